"""No function in fairmedbench/ grows past 80 lines (issue 29, point 3): a long function fails this test."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fairmedbench"
MAX_LINES = 80


def long_functions(source: str, limit: int = MAX_LINES) -> list[tuple[str, int]]:
    """(name, lines) of every function or method, nested ones included, whose `def` line to last line spans more
    than `limit` lines (decorators not counted)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                out.append((node.name, lines))
    return out


def test_the_count_is_the_def_line_to_the_last_line() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(79))  # 79 body lines + the def line: 80 lines
    source = f"@decorator\ndef at_limit():\n{body}\n\nasync def over():\n{body}    x = 0\n"
    assert long_functions(source) == [("over", 81)]  # 1 def line + 79 + 1; the decorator is not counted
    nested = f"class C:\n    def method(self):\n        def inner():\n{body.replace('    ', '            ')}" \
             "            y = 1\n            z = 2\n"
    assert long_functions(nested) == [("method", 83), ("inner", 82)]


def test_no_function_over_80_lines() -> None:
    found = {(str(p.relative_to(PACKAGE)), name, lines) for p in sorted(PACKAGE.rglob("*.py"))
             for name, lines in long_functions(p.read_text(encoding="utf-8"))}
    long = sorted(f"{path}:{name} ({lines} lines)" for path, name, lines in found)
    assert not long, f"functions over {MAX_LINES} lines: {', '.join(long)}; split them into helpers that do one thing"
