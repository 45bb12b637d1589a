"""PLCopen TC6 XML 2.01 project files: the document, its grammar, its element ids, and the reads over it.

One module per concern, each importing only those listed before it:

- `tc6`: the format's vocabulary (namespaces, var sections, type elements, formatted text, the skeleton of
  an empty project), shared with the findings and the operations;
- `grammar`: type and initial value text to TC6 elements and back;
- `elements`: element ids, the element index and `resolve`;
- `documents`: loading, deterministic writing, fingerprints and schema validation of a `ProjectDocument`;
- `paging`: the limits of an answer and its cursors;
- `queries`: the read queries (`overview`, `find`, `list_variables`, `get_element`).

Code inside `projects` imports those modules. The names below are the package's face to the other apps
(the MCP tools and the console): a document's bytes and fingerprint, the error for an unknown element id,
and the limits the read tools publish.
"""

from projects.plcopen.documents import fingerprint, serialize
from projects.plcopen.elements import ElementNotFound
from projects.plcopen.paging import DEFAULT_BODY_LIMIT, DEFAULT_LIMIT, MAX_BODY_LIMIT, MAX_LIMIT

__all__ = [
    "DEFAULT_BODY_LIMIT",
    "DEFAULT_LIMIT",
    "MAX_BODY_LIMIT",
    "MAX_LIMIT",
    "ElementNotFound",
    "fingerprint",
    "serialize",
]
