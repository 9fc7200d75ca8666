"""No import cycles in posjax/, between its packages or its files (function-local imports
count too), and no function-local import of posjax itself except the few listed below.

Package-level arrows are checked by `lint-imports` (the layers contract in pyproject.toml);
these tests also catch cycles between files inside one package, which no layer contract sees.
They read the sources with `ast` only: nothing is imported, so they need no jax and take well
under a second.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "posjax"

# File cycles that are known and accepted, each a sorted tuple of module names with the reason.
ALLOWED: dict[tuple[str, ...], str] = {}

# The only modules that import posjax inside a function (ruff's PLC0415 stops the rest; its
# per-file allowlist in pyproject.toml says why for each file): module -> the posjax modules it
# imports there. They are JAX-free at import and reach JAX only in the function that needs it.
LOCAL_POSJAX_IMPORTS: dict[str, set[str]] = {
    # config checks, run before JAX starts: the position registry and the models import JAX
    "posjax.config.validation": {"posjax.models", "posjax.positions"},
    "posjax.config.overrides": {"posjax.positions"},
    "posjax.data.patches": {"posjax.positions"},
    # results tables sort methods in the registry's order; summary.py reads them without JAX
    "posjax.evaluation.results.results_file": {"posjax.evaluation.methods"},
    # `python -m posjax list` lists the methods without flax; making a cell builds the model
    "posjax.evaluation.methods": {"posjax.models"},
    # train.py imports training.signals (this package) before JAX starts
    "posjax.training": {"posjax.training.loop"},
    # posjax.convert imports it: `python -m posjax.convert --help` answers without JAX
    "posjax.convert.core": {"posjax.models"},
}
# The entry point inside the package (python -m posjax.convert), like train.py and eval.py:
# flags first, then JAX.
ENTRY_POINTS = ("posjax.convert.__main__",)


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
            targets.update(_targets(node, name, is_package, known))
        graph[name] = targets - {None, name}
    return graph


def local_imports(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the tree it imports inside a function (as `imports` resolves
    them; `from posjax import x` counts as posjax.x when that is a file)."""
    known = modules(root)
    out = {}
    for name, (path, is_package) in known.items():
        tree = ast.parse(path.read_text(), str(path))
        functions = [n for n in ast.walk(tree)
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        found = set()
        for node in (n for f in functions for n in ast.walk(f)):
            found.update(_targets(node, name, is_package, known))
        if found - {None, name}:
            out[name] = found - {None, name}
    return out


def _targets(node, name: str, is_package: bool, known) -> set:
    if isinstance(node, ast.Import):
        return {_known(a.name, known) for a in node.names}
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = name.split(".")[: len(name.split(".")) + is_package - node.level]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        return {_known(f"{source}.{a.name}", known) for a in node.names}
    return set()


def packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between posjax's top-level packages and modules (posjax.X)."""
    out: dict[str, set[str]] = {}
    for a, targets in graph.items():
        top = ".".join(a.split(".")[:2])
        out.setdefault(top, set())
        for b in targets:
            out.setdefault(".".join(b.split(".")[:2]), set())
            if ".".join(b.split(".")[:2]) != top:
                out[top].add(".".join(b.split(".")[:2]))
    return out


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


def test_no_cycles_between_the_packages_of_posjax():
    graph = packages(imports(PACKAGE))
    found = cycles(graph)
    assert not found, "import cycles between packages (the layers in pyproject.toml):\n" + \
        "\n\n".join(_describe(graph, c) for c in found)


def test_posjax_imports_itself_inside_functions_only_where_listed():
    local = {m: t for m, t in local_imports(PACKAGE).items() if not m.startswith(ENTRY_POINTS)}
    assert local == LOCAL_POSJAX_IMPORTS, "move these imports to the top of their module " \
        "(break a cycle by moving the shared piece down):\n" + "\n".join(
            f"  {m}: {sorted(t - LOCAL_POSJAX_IMPORTS.get(m, set()))}" for m, t in
            sorted(local.items()) if t != LOCAL_POSJAX_IMPORTS.get(m))


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
    assert local_imports(pkg) == {"pkg.sub.c": {"pkg.a"}}
    assert cycles(packages(imports(pkg))) == [("pkg.a", "pkg.sub")]


def test_at_most_ten_function_local_posjax_imports_in_the_package():
    """Each one hides an edge from a reader of the module's top; each has its reason in
    pyproject.toml's per-file ignores. A new one replaces one of these, or moves a piece down."""
    statements = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                names = ([node.module or ""] if isinstance(node, ast.ImportFrom) else
                         [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                if any(n == "posjax" or n.startswith("posjax.") for n in names):
                    statements.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert len(set(statements)) <= 10, "\n".join(sorted(set(statements)))
