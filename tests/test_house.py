"""A function reads on one screen: none in viewer/ is over 60 lines (a longer one hides a second job)."""
import ast
import glob
import os

from conftest import ROOT

LONGEST = 60


def long_functions(source: str, path: str = "") -> list[str]:
    tree = ast.parse(source, path)
    return [f"{path}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > LONGEST]


def test_the_check_counts_a_long_function():
    body = "".join(f"    x{i} = {i}\n" for i in range(LONGEST))
    assert long_functions("def f():\n" + body) == [f":1 f ({LONGEST + 1} lines)"]
    assert long_functions("def f():\n" + body[:-len(f"    x{LONGEST - 1} = {LONGEST - 1}\n")]) == []


def test_no_function_is_over_60_lines():
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "viewer", "**", "*.py"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            found += long_functions(f.read(), os.path.relpath(path, ROOT))
    assert not found, "functions over 60 lines: " + "; ".join(found)
