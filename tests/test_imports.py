"""No import circles inside `viewer/`: a circle makes import order matter and hides which layer is below which.

Every `import` and `from ... import` counts, those inside functions too (a lazy import only delays
the circle). An edge goes to the module the statement names: `from .a import x` to `a` (its
`__init__` when `a` is a package), `from . import x` to `x` when `x` is a submodule, else to the
package. Importing `viewer.a.b` also runs `viewer.a`'s `__init__`, but that implicit edge is left
out: a package's `__init__` importing its own children would otherwise always be a circle, and
running a parent first is how Python works, not a choice of the code.
"""
import ast
import os
import sys

from conftest import ROOT

PACKAGE = "viewer"


def modules() -> dict[str, str]:
    """Dotted module name -> path, for every .py file under viewer/ (a package is its `__init__`)."""
    found = {}
    for folder, _, files in os.walk(os.path.join(ROOT, PACKAGE)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(module: str, path: str, known: set[str]) -> set[str]:
    """The viewer modules `module` names in any import statement."""
    is_package = path.endswith("__init__.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")[:len(module.split(".")) - node.level + is_package]
                base = ".".join(package + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in known else base)
    return {name for name in out if name in known and name != module}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle in `graph` as the modules along it (the first repeated at the end), or None."""
    state = {}   # absent: unvisited; 1: on the current path; 2: done

    def visit(node, path):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt, path)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [])):
            return found
    return None


def test_resolves_relative_and_submodule_imports(tmp_path):
    """The resolution the circle check relies on, on a made-up package."""
    (tmp_path / "__init__.py").write_text("from . import b\nfrom .b import name\n")
    known = {"viewer.a", "viewer.a.b", "viewer.a.c", "viewer.d"}
    assert imports("viewer.a", str(tmp_path / "__init__.py"), known) == {"viewer.a.b"}
    c = tmp_path / "c.py"
    c.write_text("def f():\n    from . import name\n    from ..d import x\n    import viewer.a.b\n")
    assert imports("viewer.a.c", str(c), known) == {"viewer.a", "viewer.d", "viewer.a.b"}
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circles():
    found = modules()
    graph = {name: imports(name, path, set(found)) for name, path in found.items()}
    circle = cycle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle)


# The folders from the bottom of the data flow to the top (docs/layout.md): a module imports only from its
# own folder or a lower row. `measure/` times the app and the commands' work; `commands/` is the CLI over all.
LAYERS = [("paths",), ("engine", "batch"), ("data", "community"), ("analysis",), ("training", "app"), ("measure",),
          ("commands",), ("__main__", "cli")]


def upward_imports(found: dict[str, str]) -> list[str]:
    """Every import from a folder to a higher row of LAYERS (or to one beside it in the same row)."""
    rank = {folder: row for row, folders in enumerate(LAYERS) for folder in folders}
    folder = lambda name: name.split(".")[1] if "." in name else None   # noqa: E731
    wrong = []
    for name, path in sorted(found.items()):
        for target in imports(name, path, set(found)):
            a, b = folder(name), folder(target)
            if a is None or b is None:
                continue
            assert a in rank and b in rank, f"{a} or {b} has no row in LAYERS"
            if a != b and rank[b] >= rank[a] and not {a, b} == {"__main__", "cli"}:
                wrong.append(f"{name} -> {target}")
    return wrong


def test_layer_check_finds_an_upward_import(monkeypatch):
    graph = {"viewer.engine.a": {"viewer.analysis.b"}, "viewer.analysis.b": {"viewer.engine.a"}}
    monkeypatch.setattr(sys.modules[__name__], "imports", lambda name, path, known: graph[name])
    assert upward_imports(dict.fromkeys(graph, "")) == ["viewer.engine.a -> viewer.analysis.b"]


def test_imports_point_down_the_data_flow():
    wrong = upward_imports(modules())
    assert not wrong, "imports that point up the layers: " + "; ".join(wrong)
