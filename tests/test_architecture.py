"""The package's layer order (docs/architecture.md) holds in the code: imports point down, none form a cycle, no file
is too big, no function of ``apps/`` is too long.

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
#: no function in the task pipelines (``monai_npc/apps``) has more lines of code than this (its docstring not counted)
MAX_FUNCTION_LINES = 80


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


def _code_lines(node: ast.AST) -> int:
    """Lines of a function, its docstring left out."""
    lines = node.end_lineno - node.lineno + 1
    first = node.body[0] if node.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines -= first.end_lineno - first.lineno + 1
    return lines


def _long_functions(root: Path, limit: int) -> Dict[str, int]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _code_lines(node) > limit:
                out[f"{path.relative_to(root.parent)}:{node.lineno} {node.name}"] = _code_lines(node)
    return out


def test_no_long_function_in_apps():
    long = _long_functions(PACKAGE / "apps", MAX_FUNCTION_LINES)
    assert not long, f"functions in apps/ over {MAX_FUNCTION_LINES} lines of code (give each step its own function): {long}"


def test_long_function_check_counts_code_not_docstrings(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(5))
    (tmp_path / "m.py").write_text(f'def f():\n    """doc\n\n    more doc\n    """\n{body}\n')
    assert _long_functions(tmp_path, 6) == {} and _long_functions(tmp_path, 5) == {f"{tmp_path.name}/m.py:1 f": 6}  # def + 5 lines
