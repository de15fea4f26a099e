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
