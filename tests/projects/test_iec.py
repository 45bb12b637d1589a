"""IEC 61131-3 primitives: identifiers, reserved words, literals per elementary type, located addresses and
the Structured Text tokenizer."""

from __future__ import annotations

import pytest

from projects.iec import (
    ELEMENTARY_TYPES,
    Address,
    check_literal,
    elementary_type,
    identifiers_used,
    is_identifier,
    is_reserved,
    is_standard_function,
    lex_st,
    parse_address,
    parse_integer_literal,
    tokenize_st,
)

# ---------------------------------------------------------------------------------------------------------
# Identifiers and reserved words
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "Counter", "_x", "_1", "x_1", "A1_b2_C3", "T", "a" * 127])
def test_valid_identifiers_are_accepted(name):
    assert is_identifier(name)


@pytest.mark.parametrize(
    "name", ["", "1a", "a__b", "a_", "__a", "_", "a b", "a-b", "a.b", "ä", "%IX0", "a" * 128, "Motor\n"]
)
def test_invalid_identifiers_are_refused(name):
    assert not is_identifier(name)


@pytest.mark.parametrize(
    "name",
    [
        "IF",
        "if",
        "End_If",
        "TRUE",
        "false",
        "VAR_GLOBAL",
        "INT",
        "string",
        "TOD",
        "TIME_OF_DAY",
        "ANY_NUM",
        "LD",
        "st",
        "EN",
        "ENO",
    ],
)
def test_keywords_type_names_and_il_operators_are_reserved_in_any_case(name):
    assert is_reserved(name)


@pytest.mark.parametrize("name", ["ADD", "TON", "SEL", "Counter", "INT_TO_REAL", "IN", "PT", "Q", "T", "D"])
def test_standard_function_and_fb_names_are_not_reserved(name):
    assert not is_reserved(name)


@pytest.mark.parametrize("name", ["ADD", "sel", "Limit", "INT_TO_REAL", "real_to_int", "BCD_TO_UINT", "DT_TO_TOD"])
def test_standard_functions_and_conversions_are_recognised(name):
    assert is_standard_function(name)


@pytest.mark.parametrize("name", ["TON", "Counter", "TO_", "INT"])
def test_other_names_are_not_standard_functions(name):
    assert not is_standard_function(name)


# ---------------------------------------------------------------------------------------------------------
# Elementary types
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "minimum", "maximum"),
    [
        ("SINT", -128, 127),
        ("INT", -32768, 32767),
        ("DINT", -(2**31), 2**31 - 1),
        ("LINT", -(2**63), 2**63 - 1),
        ("USINT", 0, 255),
        ("UINT", 0, 65535),
        ("UDINT", 0, 2**32 - 1),
        ("ULINT", 0, 2**64 - 1),
        ("BYTE", 0, 255),
        ("WORD", 0, 65535),
        ("DWORD", 0, 2**32 - 1),
        ("LWORD", 0, 2**64 - 1),
    ],
)
def test_integer_types_carry_their_ranges(name, minimum, maximum):
    assert (ELEMENTARY_TYPES[name].minimum, ELEMENTARY_TYPES[name].maximum) == (minimum, maximum)


def test_long_and_short_names_of_time_of_day_and_date_and_time_are_one_type():
    assert ELEMENTARY_TYPES["TIME_OF_DAY"] is ELEMENTARY_TYPES["TOD"]
    assert ELEMENTARY_TYPES["DATE_AND_TIME"] is ELEMENTARY_TYPES["DT"]


def test_elementary_type_lookup_ignores_case_and_knows_tc6_string_elements():
    assert elementary_type("string").name == "STRING"
    assert elementary_type("wstring").name == "WSTRING"
    assert elementary_type("Motor") is None


# ---------------------------------------------------------------------------------------------------------
# Literals
# ---------------------------------------------------------------------------------------------------------

VALID_LITERALS = [
    ("BOOL", "TRUE"),
    ("BOOL", "false"),
    ("BOOL", "0"),
    ("BOOL", "1"),
    ("BOOL", "BOOL#TRUE"),
    ("BOOL", "bool#0"),
    ("SINT", "-128"),
    ("SINT", "127"),
    ("INT", "-32768"),
    ("INT", "32767"),
    ("INT", "+12"),
    ("INT", "1_000"),
    ("INT", "INT#5"),
    ("INT", "INT#-5"),
    ("INT", "16#7FFF"),
    ("INT", "INT#16#7F"),
    ("INT", " 42 "),
    ("DINT", "-2147483648"),
    ("DINT", "2147483647"),
    ("LINT", "-9223372036854775808"),
    ("LINT", "9223372036854775807"),
    ("USINT", "0"),
    ("USINT", "255"),
    ("UINT", "65535"),
    ("UDINT", "4294967295"),
    ("ULINT", "18446744073709551615"),
    ("BYTE", "16#FF"),
    ("BYTE", "2#1111_1111"),
    ("BYTE", "8#377"),
    ("WORD", "16#ffff"),
    ("DWORD", "16#FFFF_FFFF"),
    ("LWORD", "16#FFFFFFFFFFFFFFFF"),
    ("REAL", "1.5"),
    ("REAL", "-0.25"),
    ("REAL", "1.0E-3"),
    ("REAL", "1_000.5"),
    ("REAL", "3"),
    ("REAL", "REAL#2.5"),
    ("LREAL", "1.0e300"),
    ("TIME", "T#20ms"),
    ("TIME", "T#1h2m3s4ms"),
    ("TIME", "t#1.5s"),
    ("TIME", "TIME#5s"),
    ("TIME", "time#100ms"),
    ("TIME", "T#-5s"),
    ("TIME", "T#1d_2h"),
    ("TIME", "T#25h"),
    ("TIME", "T#1_000ms"),
    ("DATE", "D#2024-01-31"),
    ("DATE", "DATE#2024-02-29"),
    ("TOD", "TOD#12:30:00"),
    ("TOD", "tod#0:0:0"),
    ("TIME_OF_DAY", "TIME_OF_DAY#23:59:59.999"),
    ("DT", "DT#2013-02-23-22:35:46"),
    ("DATE_AND_TIME", "DATE_AND_TIME#2024-01-31-00:00:00.5"),
    ("STRING", "'Hello'"),
    ("STRING", "''"),
    ("STRING", "'it$'s'"),
    ("STRING", "'cost $$5'"),
    ("STRING", "'line$N$r'"),
    ("STRING", "'$41'"),
    ("STRING", "'say \"hi\"'"),
    ("STRING", "STRING#'typed'"),
    ("string", "'lower-case type name'"),
    ("WSTRING", '"Hello"'),
    ("WSTRING", '"a$"b"'),
    ("WSTRING", '"$0041"'),
]


@pytest.mark.parametrize(("type_name", "text"), VALID_LITERALS)
def test_valid_literal_is_accepted(type_name, text):
    assert check_literal(type_name, text) is None


INVALID_LITERALS = [
    ("BOOL", "2", "not a valid BOOL literal"),
    ("BOOL", "yes", "not a valid BOOL literal"),
    ("BOOL", "INT#1", "typed INT"),
    ("SINT", "128", "out of range for SINT"),
    ("SINT", "-129", "out of range for SINT"),
    ("INT", "32768", "out of range for INT, which holds -32768 to 32767"),
    ("INT", "-32769", "out of range for INT"),
    ("INT", "16#8000", "out of range for INT"),
    ("DINT", "2147483648", "out of range for DINT"),
    ("LINT", "9223372036854775808", "out of range for LINT"),
    ("USINT", "256", "out of range for USINT"),
    ("UINT", "65536", "out of range for UINT"),
    ("UINT", "-1", "negative"),
    ("UDINT", "4294967296", "out of range for UDINT"),
    ("ULINT", "18446744073709551616", "out of range for ULINT"),
    ("BYTE", "16#100", "out of range for BYTE"),
    ("BYTE", "-1", "negative"),
    ("WORD", "16#1_0000", "out of range for WORD"),
    ("INT", "1.5", "not a valid INT literal"),
    ("INT", "12a", "not a valid INT literal"),
    ("INT", "1__000", "not a valid INT literal"),
    ("INT", "_1", "not a valid INT literal"),
    ("INT", "1_", "not a valid INT literal"),
    ("INT", "16#G", "not a valid INT literal"),
    ("INT", "-16#FF", "not a valid INT literal"),
    ("INT", "3#12", "not a valid INT literal"),
    ("INT", "DINT#5", "typed DINT"),
    ("INT", "", "empty"),
    ("REAL", "abc", "not a valid REAL literal"),
    ("REAL", ".5", "not a valid REAL literal"),
    ("REAL", "1.5.2", "not a valid REAL literal"),
    ("REAL", "1e39", "out of range for REAL"),
    ("LREAL", "1e309", "out of range for LREAL"),
    ("REAL", "LREAL#1.0", "typed LREAL"),
    ("TIME", "5s", "needs the T# prefix"),
    ("TIME", "T#5", "followed by a unit"),
    ("TIME", "T#5x", "followed by a unit"),
    ("TIME", "T#", "empty"),
    ("TIME", "T#1m1h", "largest first"),
    ("TIME", "T#1s1s", "largest first"),
    ("TIME", "T#1.5h30m", "only the last unit"),
    ("TIME", "T#1h_", "cannot end with _"),
    ("TIME", "D#5s", "typed D"),
    ("DATE", "2024-01-31", "needs the D# prefix"),
    ("DATE", "D#2024-13-01", "not a calendar date"),
    ("DATE", "D#2023-02-29", "not a calendar date"),
    ("DATE", "D#24-01-01", "YYYY-MM-DD"),
    ("TOD", "TOD#24:00:00", "not a time of day"),
    ("TOD", "TOD#12:60:00", "not a time of day"),
    ("TOD", "TOD#12:30", "hh:mm:ss"),
    ("TOD", "T#12:30:00", "typed T"),
    ("DT", "DT#2024-01-31", "not a valid DT literal"),
    ("DT", "DT#2024-01-31-25:00:00", "not a time of day"),
    ("STRING", "Hello", "single quotes"),
    ("STRING", "'open", "single quotes"),
    ("STRING", '"double"', "single quotes"),
    ("STRING", "'a'b'", "unescaped '"),
    ("STRING", "'bad$x'", "escape"),
    ("STRING", "'$4'", "escape"),
    ("WSTRING", "'single'", "double quotes"),
    ("WSTRING", '"$00"', "escape"),
]


@pytest.mark.parametrize(("type_name", "text", "fragment"), INVALID_LITERALS)
def test_invalid_literal_is_explained(type_name, text, fragment):
    message = check_literal(type_name, text)
    assert message is not None
    assert fragment in message


@pytest.mark.parametrize(("type_name", "text", "_fragment"), INVALID_LITERALS)
def test_every_refusal_is_a_sentence_that_shows_a_valid_form(type_name, text, _fragment):
    message = check_literal(type_name, text)
    assert message[0].isupper() or message[0] in "'\""
    assert message.endswith(".")
    assert "such as" in message


def test_string_fits_its_declared_length_counting_escapes_as_one_character():
    assert check_literal("STRING", "'abcd'", string_length=4) is None
    assert check_literal("STRING", "'ab$'$$'", string_length=4) is None
    assert check_literal("WSTRING", '"$0041bc"', string_length=3) is None


def test_string_longer_than_its_declared_length_is_refused():
    message = check_literal("STRING", "'abcde'", string_length=4)
    assert message == "'abcde' has 5 characters, more than the declared STRING[4]."


def test_check_literal_refuses_a_type_that_is_not_elementary():
    with pytest.raises(ValueError):
        check_literal("Motor", "1")


@pytest.mark.parametrize(
    ("text", "value"),
    [("42", 42), ("-7", -7), ("1_000", 1000), ("16#FF", 255), ("2#1010", 10), ("8#17", 15), ("16#f_f", 255)],
)
def test_integer_literal_values(text, value):
    assert parse_integer_literal(text) == value


@pytest.mark.parametrize("text", ["", "1.0", "16#", "2#102", "abc", "--1"])
def test_malformed_integer_literals_have_no_value(text):
    assert parse_integer_literal(text) is None


# ---------------------------------------------------------------------------------------------------------
# Located addresses
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "area", "size", "path"),
    [
        ("%IX0.0", "I", "X", (0, 0)),
        ("%QW3", "Q", "W", (3,)),
        ("%MD10", "M", "D", (10,)),
        ("%IB2", "I", "B", (2,)),
        ("%ML5", "M", "L", (5,)),
        ("%QX0.1.1.0", "Q", "X", (0, 1, 1, 0)),
        ("%I3.0", "I", None, (3, 0)),
        ("%I*", "I", None, ()),
        ("%QW*", "Q", "W", ()),
        ("%ix1.2", "I", "X", (1, 2)),
        (" %QX0.0 ", "Q", "X", (0, 0)),
    ],
)
def test_located_addresses_are_parsed(text, area, size, path):
    assert parse_address(text) == Address(area, size, path)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("IX0.0", "must start with %"),
        ("M10", "must start with %"),
        ("%", "must start with %"),
        ("%ZX1", "the area Z"),
        ("%IY1", "the size Y"),
        ("%IX", "numbers separated by dots"),
        ("%I", "numbers separated by dots"),
        ("%IX0.", "numbers separated by dots"),
        ("%IX0..1", "numbers separated by dots"),
        ("%IXa", "numbers separated by dots"),
        ("%IX-1", "numbers separated by dots"),
    ],
)
def test_malformed_addresses_get_a_reason(text, fragment):
    reason = parse_address(text)
    assert isinstance(reason, str)
    assert fragment in reason


def test_an_address_prints_in_canonical_form_and_knows_when_it_is_incomplete():
    assert str(parse_address("%ix0.1")) == "%IX0.1"
    assert str(parse_address("%Q*")) == "%Q*"
    assert parse_address("%Q*").incomplete
    assert not parse_address("%QX0.0").incomplete


# ---------------------------------------------------------------------------------------------------------
# Structured Text tokens
# ---------------------------------------------------------------------------------------------------------


def names(text: str) -> list[str]:
    return [token.text for token in tokenize_st(text)]


def test_nested_block_comments_are_skipped():
    assert names("a (* x (* y *) z *) b") == ["a", "b"]


def test_line_and_c_style_comments_are_skipped():
    assert names("a // b c\nd /* e */ f") == ["a", "d", "f"]


def test_strings_with_escaped_quotes_are_skipped():
    assert names("x := 'it$'s y'; z := \"w$\"q\"; v") == ["x", "z", "v"]


def test_pragmas_with_nested_braces_are_skipped():
    assert names("{ attribute x } a {{ if (c) { d(); } }} b") == ["a", "b"]


def test_typed_literals_and_numbers_are_not_identifiers():
    code = (
        "x := T#20ms + TIME#1s + t#1.5s + T#-5s + INT#5 + INT#16#FF + 16#FF + 2#1010 + 1.5E3 + 1_000 "
        "+ REAL#-1.5E-3 + Color#Red + DT#2024-01-31-12:00:00 + D#2024-01-31 + TOD#12:00:00 + STRING#'q';"
    )
    assert names(code) == ["x"]


def test_direct_addresses_are_not_identifiers():
    assert names("%IX0.0 := a; %QW3 := b; c := %MD10;") == ["a", "b", "c"]


def test_ranges_do_not_swallow_their_bounds():
    assert [lexeme.text for lexeme in lex_st("a[1..10]")] == ["a", "[", "1", "..", "10", "]"]


def test_lexemes_carry_their_kinds():
    kinds = [(lexeme.kind, lexeme.text) for lexeme in lex_st("x := T#5s; {p} 'str' 16#FF %IX0.0 (* c *)")]
    assert kinds == [
        ("identifier", "x"),
        ("symbol", ":="),
        ("literal", "T#5s"),
        ("symbol", ";"),
        ("pragma", "{p}"),
        ("string", "'str'"),
        ("number", "16#FF"),
        ("address", "%IX0.0"),
    ]


def test_identifier_tokens_carry_offsets_lines_and_columns():
    text = "a :=\n  bb;"
    tokens = list(tokenize_st(text))
    assert [(t.text, t.start, t.end, t.line, t.column) for t in tokens] == [("a", 0, 1, 1, 1), ("bb", 7, 9, 2, 3)]
    assert all(text[t.start : t.end] == t.text for t in tokens)


def test_members_after_a_dot_and_formal_parameters_are_marked():
    tokens = {t.text: t for t in tokenize_st("a.b := TON1(IN := x, Q => y).Q;")}
    assert tokens["b"].member and not tokens["a"].member
    assert tokens["IN"].formal and not tokens["x"].formal
    assert not tokens["TON1"].formal


def test_unterminated_comments_strings_and_pragmas_end_the_text_without_error():
    assert names("a (* b") == ["a"]
    assert names("a 'b") == ["a"]
    assert names("a { b") == ["a"]


def test_identifiers_used_are_lowercased_without_keywords_members_or_formal_parameters():
    code = """
        IF Start AND NOT Motor.Running THEN
            Timer1(IN := Start, PT := T#5s, Q => Done);  (* Timer1 is a TON *)
            Count := COUNT + INT_TO_REAL(Offset);
        END_IF;
    """
    assert identifiers_used(code) == {"start", "motor", "timer1", "done", "count", "int_to_real", "offset"}


def test_identifiers_used_skips_comments_strings_and_pragmas():
    assert identifiers_used("(* Ghost *) x := 'Ghost'; {Ghost} // Ghost") == {"x"}
