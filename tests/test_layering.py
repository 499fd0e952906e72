"""The house rules, read from the code's own imports (function-level and type-only ones included).

One installed namespace (`daedalus.*`); each room imports only the rooms below it; no circles between rooms;
`models/` never imports Prefect, I/O libraries or the wall clock.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("data", "models", "sim", "connectors", "tasks", "flows", "deployments", "runtime", "bench", "cli")
MAY_IMPORT = {  # docs/design.md, "The rooms, and which may import which"
    "data": set(),
    "models": set(),
    "sim": {"models", "data"},
    "connectors": {"models", "sim"},
    "tasks": {"models", "connectors"},
    "flows": {"tasks", "models", "connectors"},
    "deployments": {"models", "connectors", "flows"},
    "runtime": {"models", "sim", "connectors", "tasks", "flows"},
    "bench": {"data", "models", "sim", "connectors", "tasks", "flows", "deployments", "runtime"},
    "cli": {"data", "models", "sim", "connectors", "tasks", "flows", "deployments", "runtime", "bench"},
}
# models/ is pure: numpy, pandas, pmdarima and friends, never Prefect, I/O or the wall clock.
MODELS_FORBIDDEN = {"prefect", "fsspec", "requests", "httpx", "kubernetes", "pyspark", "prometheus_api_client",
                    "prometheus_client", "great_expectations", "yaml", "socket", "subprocess", "urllib", "os"}


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every absolute import in the module, wherever it stands (functions, TYPE_CHECKING blocks)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


def _modules() -> dict[str, list[Path]]:
    return {room: sorted((ROOT / room).rglob("*.py")) for room in ROOMS}


def test_every_room_is_a_package_of_the_one_namespace() -> None:
    for room in ROOMS:
        assert (ROOT / room / "__init__.py").is_file(), f"{room}/ has no __init__.py"
    pyproject = (ROOT / "pyproject.toml").read_text()
    for room in ROOMS:
        assert f'"daedalus.{room}" = "{room}"' in pyproject, f"{room}/ is not installed as daedalus.{room}"


def test_first_party_code_imports_only_the_namespace() -> None:
    bare = []
    for path in [*ROOT.joinpath("tests").rglob("*.py"), *(p for ps in _modules().values() for p in ps)]:
        for line, name in _imports(path):
            if name.split(".")[0] in ROOMS:
                bare.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not bare, "bare first-party imports (use daedalus.…):\n" + "\n".join(bare)


def _room_edges() -> dict[tuple[str, str], list[str]]:
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for room, paths in _modules().items():
        for path in paths:
            for line, name in _imports(path):
                parts = name.split(".")
                if parts[0] == "daedalus" and len(parts) > 1 and parts[1] != room:
                    edges[(room, parts[1])].append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return edges


@pytest.mark.parametrize("room", ROOMS)
def test_each_room_imports_only_the_rooms_below_it(room: str) -> None:
    wrong = [where for (src, dst), wheres in _room_edges().items() if src == room and dst not in MAY_IMPORT[room]
             for where in wheres]
    assert not wrong, f"{room}/ may import {sorted(MAY_IMPORT[room]) or 'no other room'}:\n" + "\n".join(wrong)


def test_no_circles_between_rooms() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for src, dst in _room_edges():
        graph[src].add(dst)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})) for nxt in graph[start])

    circles = [room for room in ROOMS if reaches(room, room, {room})]
    assert not circles, f"rooms in a circle: {circles}"


def test_models_stay_pure() -> None:
    impure = [f"{path.relative_to(ROOT)}:{line} imports {name}" for path in _modules()["models"]
              for line, name in _imports(path) if name.split(".")[0] in MODELS_FORBIDDEN]
    assert not impure, "models/ is Prefect-free and does no I/O:\n" + "\n".join(impure)


def test_the_rules_can_fail() -> None:
    """The checks above read real imports: a module that breaks a rule is caught."""
    bad = ROOT / "models" / "_layering_probe.py"
    bad.write_text("def f():\n    from daedalus.flows import mape_k\n    import prefect\n")
    try:
        assert ("models", "flows") in _room_edges()
        assert any(n == "prefect" for _, n in _imports(bad))
    finally:
        bad.unlink()


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["daedalus", *parts])


def _file_edges() -> dict[str, dict[str, int]]:
    """Module → the first-party modules it imports (an `from a.b import c` names a.b.c where c is a module)."""
    paths = {_module_name(p): p for ps in _modules().values() for p in ps}
    edges: dict[str, dict[str, int]] = {}
    for name, path in paths.items():
        out: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in paths else node.module
                           for a in node.names]
            for target in targets:
                if target in paths and target != name:
                    out.setdefault(target, node.lineno)
        edges[name] = out
    return edges


def _circles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_circles_between_files() -> None:
    """A module never imports, however indirectly, a module that imports it (type-only imports count too)."""
    circles = _circles(_file_edges())
    assert not circles, "modules in a circle (move the shared piece where both can import it):\n" + "\n".join(
        " ↔ ".join(c) for c in circles)


def test_the_circle_check_can_fail() -> None:
    edges = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert _circles(edges) == [["a", "b", "c"]]
    assert _circles({"a": {"b": 1}, "b": {}}) == []


MODELS_TOP = 8  # types, configuration, errors, ports, knowledge, text, and what every room shares


def test_models_keeps_at_its_top_only_what_every_room_shares() -> None:
    top = sorted(p.stem for p in (ROOT / "models").glob("*.py") if p.stem != "__init__")
    assert len(top) <= MODELS_TOP, f"models/ holds {len(top)} modules at its top (at most {MODELS_TOP}): {top}"
    loop = {p.stem for p in (ROOT / "models" / "loop").glob("*.py")}
    assert {"iteration", "monitor", "analyze", "verify", "plan", "execute", "messages"} <= loop


def _sleeps_in_loops(path: Path) -> list[int]:
    """Lines of a sleep called inside a for or while loop: a hand-written retry or poll."""
    found = []
    for loop in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(loop, ast.For | ast.While):
            found += [n.lineno for n in ast.walk(loop) if isinstance(n, ast.Call)
                      and getattr(n.func, "attr", getattr(n.func, "id", "")) in ("sleep", "_sleep", "wait")]
    return found


def test_no_connector_retries_or_polls_by_hand(tmp_path: Path) -> None:
    """Each connector states its retry policy in tenacity (and waits through connectors/polling.poll)."""
    by_hand = [f"{p.relative_to(ROOT)}:{line}" for p in _modules()["connectors"]
               for line in _sleeps_in_loops(p)]
    assert not by_hand, "a sleep inside a loop (use tenacity, or connectors.polling.poll):\n" + "\n".join(by_hand)
    probe = tmp_path / "probe.py"
    probe.write_text("import time\nfor attempt in range(3):\n    time.sleep(1)\n")
    assert _sleeps_in_loops(probe) == [3]


# One job store (connectors/store.py) opens a job's folder: one fsspec filesystem, one atomic write. fsspec is the
# store's and the lake's (the metric-history lake is another system); a rename into place is the store's atomic
# write, the lake's and the local Spark application's workdir (spark_local.py, outside the store).
OPENERS = ("connectors", "tasks", "flows", "cli")  # the rooms that reach the store (runtime/ runs its own processes)
FSSPEC_OWNERS = {"connectors/store.py", "connectors/lake.py"}
RENAME_OWNERS = {"connectors/store.py", "connectors/lake.py", "connectors/spark_local.py"}


def _folder_openings(path: Path) -> list[tuple[int, str]]:
    """Where a module reaches a filesystem itself: fsspec imported or `url_to_fs` called (`fsspec`), or a file
    renamed into place, `os.replace`/`os.rename` or a filesystem's `mv`/`rename` (`rename`)."""
    out = [(line, "fsspec") for line, name in _imports(path) if name.split(".")[0] == "fsspec"]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "url_to_fs":
            out.append((node.lineno, "fsspec"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr, owner = node.func.attr, node.func.value
            if attr == "url_to_fs":
                out.append((node.lineno, "fsspec"))
            elif attr in ("mv", "rename") or (attr == "replace" and isinstance(owner, ast.Name) and owner.id == "os"):
                out.append((node.lineno, "rename"))
    return out


def _store_breaches() -> list[str]:
    wrong = []
    for room in OPENERS:
        for path in _modules()[room]:
            rel = str(path.relative_to(ROOT))
            for line, what in _folder_openings(path):
                if rel not in (FSSPEC_OWNERS if what == "fsspec" else RENAME_OWNERS):
                    wrong.append(f"{rel}:{line} {'uses fsspec' if what == 'fsspec' else 'renames a file into place'}")
    return wrong


def test_only_the_job_store_opens_a_jobs_folder() -> None:
    wrong = _store_breaches()
    assert not wrong, "a job's folder is the job store's (connectors/store.py: Store(url).job(name)):\n" + \
        "\n".join(wrong)


def test_the_store_rule_can_fail() -> None:
    bad = ROOT / "connectors" / "_store_probe.py"
    bad.write_text("import os\nfrom fsspec.core import url_to_fs\n\ndef f(fs, a, b):\n    fs.mv(a, b)\n"
                   "    os.replace(a, b)\n    return url_to_fs(a)\n")
    try:
        probe = [w.split(" ", 1) for w in _store_breaches() if w.startswith("connectors/_store_probe.py")]
        assert [(where.rsplit(":", 1)[1], what) for where, what in probe] == [
            ("2", "uses fsspec"), ("5", "renames a file into place"), ("6", "renames a file into place"),
            ("7", "uses fsspec")]
    finally:
        bad.unlink()


# The knowledge is the only writer of its ledger (docs/design.md): no module but models/knowledge.py appends to or
# rewrites `.ledger`, adds to a ledger entry's `.history`, moves an entry (`.mark(`) or sets another object's
# `.state`. A `history` of one's own (`self.history`: the local Flink cluster's) and the forecaster's WAPE history
# (models/forecast/) are not the ledger's.
LEDGER_WRITER = "models/knowledge.py"
OTHER_HISTORIES = ("models/forecast/",)
MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"}


def _ledger_writes(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr, owner = node.func.attr, node.func.value
            if attr == "mark":
                out.append((node.lineno, "moves a ledger entry (.mark)"))
            elif attr in MUTATORS and isinstance(owner, ast.Attribute) and owner.attr == "ledger":
                out.append((node.lineno, f"changes a ledger (.ledger.{attr})"))
            elif (attr in MUTATORS and isinstance(owner, ast.Attribute) and owner.attr == "history"
                  and not (isinstance(owner.value, ast.Name) and owner.value.id == "self")):
                out.append((node.lineno, f"writes an entry's history (.history.{attr})"))
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else \
            [node.target] if isinstance(node, ast.AugAssign) else []
        for t in targets:
            t = t.value if isinstance(t, ast.Subscript) else t
            if isinstance(t, ast.Attribute) and t.attr == "ledger":
                out.append((node.lineno, "rewrites a ledger (.ledger =)"))
            elif (isinstance(t, ast.Attribute) and t.attr == "state"
                  and not (isinstance(t.value, ast.Name) and t.value.id == "self")):
                out.append((node.lineno, "sets an entry's state (.state =)"))
    return out


def _ledger_breaches() -> list[str]:
    wrong = []
    for paths in _modules().values():
        for path in paths:
            rel = str(path.relative_to(ROOT))
            if rel == LEDGER_WRITER:
                continue
            for line, what in _ledger_writes(path):
                if "history" in what and rel.startswith(OTHER_HISTORIES):
                    continue
                wrong.append(f"{rel}:{line} {what}")
    return wrong


def test_the_knowledge_is_the_only_writer_of_its_ledger() -> None:
    wrong = _ledger_breaches()
    assert not wrong, "write the ledger through the knowledge (record, note, move):\n" + "\n".join(wrong)


def test_the_ledger_rule_can_fail() -> None:
    bad = ROOT / "models" / "loop" / "_ledger_probe.py"
    bad.write_text("def f(k, entry, self):\n    k.ledger.append(entry)\n    entry.history.append((0, 'x'))\n"
                   "    entry.mark('executed', 0)\n    del k.ledger[:1]\n    self.history.append(1)\n"
                   "    entry.state = 'executing'\n")
    try:
        probe = sorted(w.split(" ", 1)[0].rsplit(":", 1)[1] for w in _ledger_breaches()
                       if w.startswith("models/loop/_ledger_probe.py"))
        assert probe == ["2", "3", "4", "5", "7"]
    finally:
        bad.unlink()
