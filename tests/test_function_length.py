"""No function or method in the app packages is longer than :data:`MAX_FUNCTION_LINES` (its ``def`` line to its
last line, docstring included)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path
from typing import List

MAX_FUNCTION_LINES = 80
PACKAGE = Path(__file__).resolve().parents[1] / "monai_npc"
#: the packages held to the limit (apps/registration, apps/stacks follow when their long functions are split)
CHECKED = ("apps/tracking",)
#: functions over the limit whose split belongs to work in progress elsewhere (``path:function``)
PENDING = {"apps/tracking/cohort.py:track_cohort"}


def long_functions(root: Path, base: Path = PACKAGE, limit: int = MAX_FUNCTION_LINES) -> List[str]:
    """``path:name (lines)`` (``path`` relative to ``base``) of every function under ``root`` longer than ``limit`` lines."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            lines = node.end_lineno - node.lineno + 1 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else 0
            if lines > limit:
                out.append(f"{path.relative_to(base).as_posix()}:{node.name} ({lines})")
    return out


def test_no_function_over_the_limit():
    found = [f for package in CHECKED for f in long_functions(PACKAGE / package)]
    over = [f for f in found if f.rsplit(" ", 1)[0] not in PENDING]
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(over)


def test_the_check_sees_a_long_function(tmp_path):
    body = "    x = 1\n" * MAX_FUNCTION_LINES
    method = textwrap.indent(f"async def g(self):\n{body}", "    ")
    (tmp_path / "m.py").write_text(f"def f():\n{body}\n\nclass C:\n{method}\n\ndef h():\n    pass\n")
    assert long_functions(tmp_path, tmp_path) == ["m.py:f (81)", "m.py:g (81)"]
