"""The shape the code base keeps (CONTRIBUTING.md, "The gates"), checked on the source
itself: module and function sizes (a module past the limit says why in its
docstring), and no import cycle among Mesilla's modules."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

MODULE_LINES = 600
FUNCTION_LINES = 80

def _modules() -> dict[str, ast.Module]:
    return {
        str(path.relative_to(SRC)): ast.parse(path.read_text(), str(path))
        for path in sorted((SRC / "mesilla").rglob("*.py"))
    }


MODULES = _modules()


def _name(path: str) -> str:
    name = path.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


def test_a_module_over_the_size_says_why_in_its_docstring() -> None:
    # The reason lives with the module: "One module of over 600 lines: ..."
    unexplained = [
        path
        for path, tree in MODULES.items()
        if len((SRC / path).read_text().splitlines()) > MODULE_LINES
        and f"{MODULE_LINES} lines" not in (ast.get_docstring(tree) or "")
    ]
    assert not unexplained


def test_no_function_reaches_the_size_limit() -> None:
    long = [
        f"{path}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path, tree in MODULES.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (node.end_lineno or node.lineno) - node.lineno + 1 >= FUNCTION_LINES
    ]
    assert not long


def _imported(path: str, tree: ast.Module) -> set[str]:
    """The Mesilla modules `path` imports when it is imported (not inside functions, not
    for typing only)."""
    package = _name(path) if path.endswith("__init__.py") else _name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Import):
                found |= {alias.name for alias in sub.names}
            elif isinstance(sub, ast.ImportFrom):
                base = sub.module or ""
                if sub.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - sub.level + 1] + ([base] if base else []))
                for alias in sub.names:
                    child = f"{base}.{alias.name}"
                    found.add(child if _exists(child) else base)
    return {name for name in found if name.startswith("mesilla") and _exists(name)}


def _exists(name: str) -> bool:
    path = SRC / name.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def test_the_import_graph_has_no_cycle() -> None:
    graph = {_name(path): _imported(path, tree) for path, tree in MODULES.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            if state.get(imported) == 1:
                cycles.append([*path[path.index(imported) :], imported])
            elif imported not in state:
                visit(imported)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not cycles, "\n".join(" -> ".join(cycle) for cycle in cycles)
