"""No import cycles between the files of posjax/ (function-local imports count too).

Package-level arrows are checked by `lint-imports` (the layers contract in pyproject.toml);
this test catches cycles between files inside one package, which no layer contract sees. It
reads the sources with `ast` only: nothing is imported, so it needs no jax and takes well under
a second.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "posjax"

# File cycles that are known and accepted, each a sorted tuple of module names with the reason.
# Empty: the one remaining package cycle (attention <-> kernels, ignored in pyproject.toml's
# layers contract) is no file cycle, since kernels/ imports only attention.tiles and
# attention.banded, which import nothing of kernels/.
ALLOWED: dict[tuple[str, ...], str] = {}


def modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's __init__) for every .py file under root."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def _known(name: str, known) -> str | None:
    """`name` or its nearest enclosing module that is a file of the tree (None if outside)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the tree it imports anywhere in its file (top level, inside
    functions, under `if`). `from p import x` counts as importing p.x when that is a file."""
    known = modules(root)
    graph = {}
    for name, (path, is_package) in known.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(_known(a.name, known) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".")[: len(name.split(".")) + is_package - node.level]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets.update(_known(f"{source}.{a.name}", known) for a in node.names)
        graph[name] = targets - {None, name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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
                found.append(tuple(sorted(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _describe(graph, cycle) -> str:
    members = set(cycle)
    return "\n".join(f"  {a} -> {b}" for a in cycle for b in sorted(graph[a] & members))


def test_no_file_cycles_in_posjax():
    graph = imports(PACKAGE)
    unexpected = [c for c in cycles(graph) if c not in ALLOWED]
    assert not unexpected, "import cycles between files (move the shared piece down to a " \
        "module both can import):\n" + "\n\n".join(_describe(graph, c) for c in unexpected)


def test_allowed_cycles_still_exist():
    """An allowlisted cycle that is gone must leave the list, or it would hide a new one."""
    assert set(ALLOWED) <= set(cycles(imports(PACKAGE)))


def test_a_function_local_import_closes_a_cycle(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from . import c\n")
    (pkg / "sub" / "c.py").write_text("def f():\n    from ..a import x\n    return x\n")
    (pkg / "d.py").write_text("import pkg.a\n")  # imports into the cycle, is not part of it
    assert cycles(imports(pkg)) == [("pkg.a", "pkg.sub.b", "pkg.sub.c")]
