"""The package's layer order (docs/architecture.md) holds in the code: imports point down, none form a cycle, no file is too big.

The layers are read from the ``layers`` block of docs/architecture.md, so the map and the check cannot drift
apart. Every import of a ``monai_npc`` module counts, those inside functions (lazy) included.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, List, Set, Tuple

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "monai_npc"
#: no package file is longer than this (lines)
MAX_LINES = 500


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> Dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def import_graph() -> Dict[str, Set[str]]:
    """``module -> the monai_npc modules it imports`` (a ``from pkg import name`` of a submodule counts as that
    submodule, else as ``pkg``), module-level and lazy imports alike."""
    modules = _modules()
    graph: Dict[str, Set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: Set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name.split(".")[0] == "monai_npc")
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                if source.split(".")[0] != "monai_npc":
                    continue
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    targets.add(sub if sub in modules else source)
        graph[name] = {t for t in targets if t != name}
    return graph


def layers() -> List[List[str]]:
    """The ``layers`` block of docs/architecture.md: top layer first, ``|`` between independent packages of one layer."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    match = re.search(r"```layers\n(.*?)```", text, re.S)
    assert match, "docs/architecture.md has no ```layers block"
    return [[p.strip() for p in line.split("|")] for line in match.group(1).splitlines() if line.strip()]


def _place(module: str, table: List[List[str]]) -> Tuple[int, str]:
    """``(layer index, the entry)`` of the longest layer entry that is ``module`` or a package above it."""
    best = (-1, "")
    for i, entries in enumerate(table):
        for entry in entries:
            if (module == entry or module.startswith(entry + ".")) and len(entry) > len(best[1]):
                best = (i, entry)
    return best


def test_every_module_has_a_layer():
    table = layers()
    orphans = [m for m in _modules() if _place(m, table)[0] < 0 or (_place(m, table)[1] == "monai_npc" and m != "monai_npc")]
    assert not orphans, f"modules in no layer of docs/architecture.md: {orphans}"


def test_imports_point_down():
    """No module imports one of a higher layer, or of another package of its own layer."""
    table = layers()
    wrong = []
    for module, targets in import_graph().items():
        layer, entry = _place(module, table)
        for target in sorted(targets):
            t_layer, t_entry = _place(target, table)
            if t_layer < layer or (t_layer == layer and t_entry != entry):
                wrong.append(f"{module} ({entry}) -> {target} ({t_entry})")
    assert not wrong, "imports against the layer order of docs/architecture.md:\n" + "\n".join(wrong)


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert _cycles(import_graph()) == []


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_layer_check_sees_an_upward_import(tmp_path):
    """The placement rule itself: an interop module importing apps is above its layer."""
    table = layers()
    assert _place("monai_npc.interop.images", table)[0] > _place("monai_npc.apps.registration.api", table)[0]
    assert _place("monai_npc.functional.warp", table)[0] > _place("monai_npc.networks.blocks.warp", table)[0]


def test_no_file_over_the_limit():
    long = {str(p.relative_to(ROOT)): n for p in sorted(PACKAGE.rglob("*.py")) if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"package files over {MAX_LINES} lines (split them by job): {long}"
