"""Cost of project handling (``projects.plcopen`` and ``projects.operations``) on large generated projects.

For each size (500 POUs with 5,000, 20,000 and 50,000 variables by default) it generates a valid TC6 2.01
file (ST programs and function blocks with mixed var sections, documentation, data types, a configuration
with globals, tasks and instances), then times in milliseconds (p50/p99/max):

* import: ``load`` + ``validate`` of the bytes (what registering or re-reading the file costs);
* index: building the element index, paid once per document state by the first query;
* export: ``serialize``;
* find: a name substring that matches a few elements, a kind+type filter, and a miss (a full scan);
* get_element: a random POU (interface listed up to 200 variables, body) and a random variable;
* list_variables: one page of a POU's variables;
* apply: a 10-operation batch (add/update/remove variables, add a POU, set a body, add a data type, a task
  and an instance) including the input and whole-result XSD validation, each on the same base document.

Aims: find and get_element under 20 ms p50, batch apply with validation under 200 ms p50.
Run it as ``.venv/bin/python bench/projects_bench.py [--sizes 5000,20000,50000] [--pous 500] [--repeat 200]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from projects.operations import apply  # noqa: E402
from projects.plcopen import documents, elements, queries, tc6  # noqa: E402

SECTIONS = ("inputVars", "outputVars", "localVars")
TYPES = ("INT", "BOOL", "REAL", "DINT", "TIME", "STRING")


def variable_xml(name: str, type_name: str, index: int, indent: str) -> str:
    type_xml = '<string length="32"/>' if type_name == "STRING" else f"<{type_name}/>"
    initial = f'\n{indent}  <initialValue>\n{indent}    <simpleValue value="{index % 100}"/>\n{indent}  </initialValue>'
    documentation = (
        f"\n{indent}  <documentation>\n{indent}    <xhtml:p><![CDATA[Signal {name} of line {index % 37}]]></xhtml:p>"
        f"\n{indent}  </documentation>"
        if index % 5 == 0
        else ""
    )
    return (
        f'{indent}<variable name="{name}">\n{indent}  <type>\n{indent}    {type_xml}\n{indent}  </type>'
        f"{initial if type_name in ('INT', 'DINT') else ''}{documentation}\n{indent}</variable>\n"
    )


def generate(pous: int, variables: int, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    per_pou = max(1, variables // pous)
    parts = []
    for p in range(pous):
        pou_type = "program" if p % 10 == 0 else "functionBlock"
        sections = []
        for s, section in enumerate(SECTIONS):
            count = per_pou // len(SECTIONS) + (1 if s < per_pou % len(SECTIONS) else 0)
            body = "".join(
                variable_xml(f"{section[:-4].capitalize()}_{p}_{i}", rng.choice(TYPES), p * per_pou + i, " " * 12)
                for i in range(count)
            )
            sections.append(f"          <{section}>\n{body}          </{section}>\n")
        code = "".join(f"Local_{p}_{i} := Local_{p}_{i} + 1; (* step {i} *)\n" for i in range(40))
        parts.append(
            f'      <pou name="Pou_{p}" pouType="{pou_type}">\n        <interface>\n{"".join(sections)}'
            f"        </interface>\n        <body>\n          <ST>\n            <xhtml:p><![CDATA[{code}]]></xhtml:p>\n"
            f"          </ST>\n        </body>\n      </pou>\n"
        )
    types = "".join(
        f'      <dataType name="Type_{t}">\n        <baseType>\n          <INT/>\n        </baseType>\n      </dataType>\n'
        for t in range(20)
    )
    tasks = "".join(
        f'          <task name="Task_{t}" priority="{t}" interval="T#{10 * (t + 1)}ms">\n'
        + "".join(
            f'            <pouInstance name="Inst_{t}_{p}" typeName="Pou_{p}"/>\n' for p in range(t * 10, pous, 50)
        )
        + "          </task>\n"
        for t in range(5)
    )
    globals_ = "".join(variable_xml(f"Global_{g}", "INT", g, " " * 10) for g in range(50))
    configurations = (
        f'      <configuration name="C0">\n        <resource name="R0">\n{tasks}        </resource>\n'
        f"        <globalVars>\n{globals_}        </globalVars>\n      </configuration>\n"
    )
    return tc6.project_skeleton(
        name="Bench",
        product="bench",
        company="bench",
        created="2024-01-01T00:00:00",
        data_types=types,
        pous="".join(parts),
        configurations=configurations,
    ).encode()


def timings(fn: Callable[[int], object], repeat: int) -> list[float]:
    out = []
    for i in range(repeat):
        start = time.perf_counter_ns()
        fn(i)
        out.append((time.perf_counter_ns() - start) / 1e6)
    return out


def row(label: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"  {label:<34} p50 {statistics.median(ordered):8.2f}  p99 {p99:8.2f}  max {ordered[-1]:8.2f}  (n={len(ordered)})"


def batch(i: int, pous: int, per_pou: int) -> list[dict]:
    p = (i * 7) % pous
    q = (i * 13 + 1) % pous
    return [
        {"op": "add_variable", "scope": f"pou/Pou_{p}", "section": "localVars", "name": f"Added_{i}", "type": "INT"},
        {"op": "add_variable", "scope": "config/C0", "name": f"G_added_{i}", "type": "BOOL", "retain": True},
        {"op": "update_variable", "id": f"pou/Pou_{q}/var/Local_{q}_0", "initial_value": "42"},
        {"op": "update_variable", "id": f"pou/Pou_{q}/var/Input_{q}_0", "documentation": "changed"},
        {"op": "remove_variable", "id": f"pou/Pou_{q}/var/Output_{q}_0"},
        {"op": "add_pou", "name": f"NewProgram_{i}", "pou_type": "program", "body": "x := 1;"},
        {"op": "set_pou_body", "id": f"pou/Pou_{p}", "language": "ST", "text": "Local := 0;"},
        {"op": "add_data_type", "name": f"NewType_{i}", "base_type": "ARRAY[0..9] OF REAL"},
        {
            "op": "add_task",
            "resource": "config/C0/resource/R0",
            "name": f"NewTask_{i}",
            "priority": 9,
            "interval": "T#1s",
        },
        {
            "op": "add_pou_instance",
            "target": f"config/C0/resource/R0/task/NewTask_{i}",
            "name": "ni",
            "type_name": f"NewProgram_{i}",
        },
    ]


def bench_size(pous: int, variables: int, repeat: int) -> None:
    data = generate(pous, variables)
    print(f"\n{pous} POUs, {variables:,} variables: {len(data) / 1e6:.1f} MB")
    rng = random.Random(7)

    def import_(_: int) -> None:
        assert documents.validate(documents.load(data)) == []

    print(row("import (load + validate)", timings(import_, max(5, repeat // 20))))
    doc = documents.load(data)
    documents.validate(doc)
    print(row("index build (once per state)", timings(lambda _: elements.ElementIndex.build(doc.root), 5)))
    assert len([e for e in doc.index.entries if e.kind == "variable"]) >= variables
    print(row("export (serialize)", timings(lambda _: documents.serialize(doc), max(5, repeat // 20))))

    pou_ids = [e.id for e in doc.index.entries if e.kind == "pou"]
    var_ids = [e.id for e in doc.index.entries if e.kind == "variable"]
    print(row("find name substring", timings(lambda i: queries.find(doc, text=f"_{rng.randrange(pous)}_1"), repeat)))
    print(
        row("find kind=variable type=REAL", timings(lambda _: queries.find(doc, kind="variable", type="real"), repeat))
    )
    print(row("find miss (full scan)", timings(lambda _: queries.find(doc, text="no-such-thing"), repeat)))
    print(row("find documentation text", timings(lambda _: queries.find(doc, text="of line 36"), repeat)))
    print(row("get_element POU", timings(lambda _: queries.get_element(doc, rng.choice(pou_ids)), repeat)))
    print(row("get_element variable", timings(lambda _: queries.get_element(doc, rng.choice(var_ids)), repeat)))
    print(
        row(
            "list_variables (POU scope)",
            timings(lambda _: queries.list_variables(doc, scope=rng.choice(pou_ids)), repeat),
        )
    )

    per_pou = variables // pous
    count = max(10, repeat // 10)
    print(row("apply 10-op batch + validation", timings(lambda i: apply(doc, batch(i, pous, per_pou)), count)))
    base = doc.copy
    print(row("  of which: copy of the tree", timings(lambda _: base(), count)))
    print(
        row(
            "  of which: XSD validation",
            timings(lambda _: documents._validate_root(doc.root, documents.SCHEMA_PATH), count),
        )
    )
    results = [apply(doc, batch(i, pous, per_pou)).doc for i in range(5)]
    print(
        row("get_element right after apply", timings(lambda i: queries.get_element(results[i], rng.choice(pou_ids)), 5))
    )
    print(row("first find after apply (builds index)", timings(lambda i: queries.find(results[i], text="x"), 5)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="5000,20000,50000", help="variable counts, comma-separated")
    parser.add_argument("--pous", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    for size in (int(s) for s in args.sizes.split(",")):
        bench_size(args.pous, size, args.repeat)


if __name__ == "__main__":
    main()
