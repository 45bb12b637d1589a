"""The vocabulary of PLCopen TC6 XML 2.01 that every part of the service shares, defined once.

The namespaces, the var section and text language names, the element that stands for each elementary
type, the small helpers that name and read elements (`q`, `local_name`, `first_element`, `flag`), the
formatted text that holds documentation and ST/IL code, and the skeleton of an empty project. The type
names come from `projects.iec`, so the IEC rules and the file format cannot disagree about them. Pure: no
Django, no database; the rest of `projects.plcopen`, the findings and the operations build on it.
"""

from __future__ import annotations

from typing import Final

from lxml import etree

from projects import iec

NS: Final = "http://www.plcopen.org/xml/tc6_0201"
XHTML_NS: Final = "http://www.w3.org/1999/xhtml"

VAR_SECTIONS: Final = tuple(
    ["inputVars", "outputVars", "inOutVars", "localVars", "tempVars", "externalVars", "globalVars", "accessVars"]
)
TEXT_LANGUAGES: Final = ("ST", "IL")
# TC6 has an element for each elementary type, named as IEC names the type but for the string types, which
# it spells in lower case (they carry a length), and with only the short forms DT and TOD.
ELEMENTARY_TYPE_ELEMENTS: Final = frozenset(
    t.name.lower() if t.kind in ("string", "wstring") else t.name for t in iec.ELEMENTARY_TYPES.values()
)


def q(name: str) -> str:
    """The Clark name of a TC6 element, e.g. `q("pou")`."""
    return f"{{{NS}}}{name}"


def local_name(el: etree._Element) -> str:
    """The local name of an element, or "" for comments and processing instructions."""
    tag = el.tag
    if not isinstance(tag, str):
        return ""
    return tag.rpartition("}")[2]


def first_element(el: etree._Element | None) -> etree._Element | None:
    """The first child element (comments and processing instructions skipped): the content of a `type`,
    `baseType`, `initialValue`, `body` or array/struct `value`."""
    if el is None:
        return None
    for child in el:
        if isinstance(child.tag, str):
            return child
    return None


def flag(el: etree._Element | None, name: str) -> bool:
    """An xsd:boolean attribute (a var section's retain, constant, ...), false when absent."""
    return el is not None and el.get(name) in ("true", "1")


def formatted_text(el: etree._Element | None) -> str | None:
    """The text of a formattedText element (documentation, ST, IL): the content of its one XHTML child."""
    if el is None:
        return None
    for child in el:
        if isinstance(child.tag, str) and child.tag.startswith(f"{{{XHTML_NS}}}"):
            return "".join(child.itertext())
    # Schema-invalid files (bare text in <ST>) still read as their text.
    return "".join(el.itertext())


DOCUMENTATION: Final = q("documentation")


def documentation_of(el: etree._Element) -> str:
    """An element's documentation as text, stripped; "" when it has none."""
    documentation = el.find(DOCUMENTATION)
    return (formatted_text(documentation) or "").strip() if documentation is not None else ""


def xhtml_paragraph(text: str, nsmap_source: etree._Element) -> etree._Element:
    """An `<xhtml:p>` holding `text` as CDATA, as Beremiz and OpenPLC write code and documentation."""
    nsmap = None if XHTML_NS in nsmap_source.nsmap.values() else {"xhtml": XHTML_NS}
    p = etree.Element(f"{{{XHTML_NS}}}p", nsmap=nsmap)
    set_code_text(p, text)
    return p


def set_code_text(el: etree._Element, text: str) -> None:
    """Make `text` the only content of an XHTML element, as a CDATA section with LF line ends."""
    for child in list(el):
        el.remove(child)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    # lxml cannot split a CDATA section, so text holding "]]>" is written escaped instead.
    el.text = etree.CDATA(text) if "]]>" not in text else text


def project_skeleton(
    *,
    name: str,
    product: str,
    created: str,
    company: str = "",
    modified: str | None = None,
    data_types: str = "",
    pous: str = "",
    configurations: str = "",
) -> str:
    """The text of a TC6 2.01 project holding what the schema requires of every project (the file and
    content headers, the coordinate info, the containers of types and instances) around the content given:
    `data_types`, `pous` and `configurations` are written inside their containers as they are (lines
    indented for their depth, each ending with a line break), and an empty one is written `<dataTypes/>`."""
    modification = f' modificationDateTime="{modified}"' if modified is not None else ""
    return f"""<?xml version='1.0' encoding='utf-8'?>
<project xmlns="{NS}" xmlns:xhtml="{XHTML_NS}">
  <fileHeader companyName="{company}" productName="{product}" productVersion="1" creationDateTime="{created}"/>
  <contentHeader name="{name}"{modification}>
    <coordinateInfo>
      <fbd>
        <scaling x="0" y="0"/>
      </fbd>
      <ld>
        <scaling x="0" y="0"/>
      </ld>
      <sfc>
        <scaling x="0" y="0"/>
      </sfc>
    </coordinateInfo>
  </contentHeader>
  <types>
{_container("dataTypes", data_types)}
{_container("pous", pous)}
  </types>
  <instances>
{_container("configurations", configurations)}
  </instances>
</project>
"""


def _container(tag: str, content: str, indent: str = "    ") -> str:
    return f"{indent}<{tag}/>" if not content else f"{indent}<{tag}>\n{content}{indent}</{tag}>"
