"""Cost of reading Structured Text: `projects.st.analyse` (tree-sitter's IEC 61131-3 grammar, issue 18)
per 1,000 lines of ST, against the hand-written token scan it replaced (`iec.tokenize_st`).

The text is generated, deterministic, and shaped like real POU bodies: assignments with arithmetic and
boolean expressions, IF/ELSIF/ELSE, CASE, FOR loops, FB calls with formal and output parameters, member
accesses, typed literals and comments. Each figure is the median of `--repeat` runs of one whole text, with
the analysis cache emptied before each run, so every run parses; the cached lookup (what a stage call pays
for the bodies it did not change) is timed as well. Run it as::

    .venv/bin/python bench/st_bench.py                 # 1,000 and 10,000 lines, 15 repeats
    .venv/bin/python bench/st_bench.py --lines 1000 --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from projects import iec, st

CHUNK = """(* cycle {i}: level control *)
IF Level_{i} > Limit THEN
    Valve_{i} := FALSE;
    Alarm := Alarm OR (Level_{i} - Limit > 5);
ELSIF Level_{i} < Limit - 10 THEN
    Valve_{i} := TRUE;
ELSE
    Count := Count + 1;
END_IF;
Timer_{i}(IN := Valve_{i} AND NOT Alarm, PT := T#500ms, Q => Done_{i});
CASE Mode OF
    1, 2: Speed := INT_TO_REAL(Count) * 0.5;
    3..5: Speed := MAX(Speed - 1.0, 0.0);
ELSE
    Speed := 0.0;
END_CASE;
FOR k := 1 TO 8 BY 1 DO
    Buffer[k] := Buffer[k] + Motor.Current / 2;
END_FOR;
Total := Total + WORD#16#FF;
"""


def text_of(lines: int) -> str:
    per_chunk = CHUNK.count("\n")
    return "".join(CHUNK.format(i=i) for i in range((lines + per_chunk - 1) // per_chunk))


def median_ms(fn: Callable[[], Any], repeat: int, setup: Callable[[], Any] | None = None) -> float:
    samples = []
    for _ in range(repeat):
        if setup is not None:
            setup()
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", default="1000,10000", help="sizes of the text in lines (1000,10000)")
    parser.add_argument("--repeat", type=int, default=15, help="runs per figure, the median kept (15)")
    args = parser.parse_args(argv)
    print(f"{'lines':>7} {'grammar ms':>11} {'per 1k':>8} {'scan ms':>9} {'per 1k':>8} {'cached ms':>10} issues")
    for lines in (int(n) for n in args.lines.split(",")):
        text = text_of(lines)
        counted = text.count("\n")
        grammar = median_ms(lambda: st.analyse(text), args.repeat, st.clear_cache)  # noqa: B023
        scan = median_ms(lambda: list(iec.tokenize_st(text)), args.repeat)  # noqa: B023
        cached = median_ms(lambda: st.analyse(text), args.repeat)  # noqa: B023
        issues = len(st.analyse(text).issues)
        print(
            f"{counted:>7} {grammar:>11.2f} {grammar * 1000 / counted:>8.2f} {scan:>9.2f} "
            f"{scan * 1000 / counted:>8.2f} {cached:>10.3f} {issues}"
        )


if __name__ == "__main__":
    main()
