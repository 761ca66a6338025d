"""glassgrad's layers and the import rule between them, and the checker that test_layers.py runs.

Every module belongs to one layer (LAYERS, bottom first; a module's own name listed beats a pattern: engine.jit is a
frontend, the rest of engine/ is the engine). A
module may import its own layer's modules and those of the layers its layer lists (MAY_IMPORT); every other arrow is
forbidden. The rule covers every import of a glassgrad module that runs, module-level or function-local. A type-only
import (under `if TYPE_CHECKING:`) runs nothing: an annotation may name a class of any layer, to say what a function
is given (a mixin's `self: Tensor`, a renderer's `Matmul`). Two more checks keep the arrows honest:
- no cycle among module-level imports (type-only ones do not run, and do not count);
- no function-local import that dodges a cycle: one whose module, imported at module level, would close a cycle.

`python test/layers.py` prints what breaks the rule.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import pathlib
from collections.abc import Callable
from dataclasses import dataclass

# bottom first; a pattern names modules relative to the package ("uop.*": every module in uop/)
LAYERS: dict[str, tuple[str, ...]] = {
    # stdlib only; device_info: what a graph's builder may ask of a device, answered by the runtime (handed in)
    "base": ("helpers", "dtype", "fp8", "disk_cache", "shape", "progress", "autocast", "errors", "device_info"),
    "ir": ("uop", "uop.*"),  # UOp, Ops, rewriting, symbolic math, views: no device, no Tensor
    "renderer": ("renderer", "renderer.*"),  # the dialects: a linear program -> source text
    "codegen": ("codegen", "codegen.*"),  # kernel AST -> linear program -> source, through a Renderer
    "schedule": ("schedule", "schedule.*"),  # graph -> kernels; asks a Renderer what layouts pay
    "runtime": ("runtime", "runtime.*"),  # devices: memory, compilers, programs
    "engine": ("engine", "engine.*"),  # realize: schedule, compile, run
    # VIZ=1: records rewrites and kernels through the hooks it sets (uop/rewrite.py, engine/realize.py), serves the page
    "viz": ("viz", "viz.*"),
    # the Tensor API's methods and autograd: they build graphs and open no device (they ask device_info)
    "api": (
        "mixin",
        "mixin.*",
        "tensor_math",
        "tensor_checks",
        "gradient",
        "gradient_formulas",
        "backward_targets",
    ),
    # the Tensor class: the API joined to devices, buffers and realize
    "tensor": ("tensor", "host_data"),
    # built on Tensor; backends/: PyTorch's switches (TF32), the user's to set
    "frontend": (
        "",
        "function",
        "engine.jit",
        "nn",
        "nn.*",
        "onnx",
        "onnx.*",
        "models",
        "models.*",
        "backends",
        "backends.*",
        "amp",
        "distributed",
        "distributed.*",
    ),
}

MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "base": (),
    "ir": ("base",),
    "renderer": ("ir", "base"),
    "codegen": ("renderer", "ir", "base"),
    "schedule": ("renderer", "ir", "base"),
    "runtime": ("renderer", "ir", "base"),
    "engine": ("schedule", "codegen", "runtime", "renderer", "ir", "base"),
    "viz": ("engine", "ir", "base"),
    "api": ("engine", "ir", "base"),
    "tensor": ("api", "engine", "runtime", "ir", "base"),
    "frontend": ("tensor", "api", "viz", "engine", "runtime", "ir", "base"),
}


@dataclass(frozen=True)
class Import:
    """One import of a package module by another: where it stands and how it runs."""

    source: str  # importing module, relative to the package ("" for the package's __init__)
    target: str  # imported module, relative to the package
    line: int
    local: bool  # inside a function: runs when called
    type_only: bool  # under `if TYPE_CHECKING:`: never runs

    def __str__(self) -> str:
        kind = "function-local " if self.local else "type-only " if self.type_only else ""
        return f"{self.source or '__init__'}:{self.line} {kind}imports {self.target or '__init__'}"


def module_name(package_dir: pathlib.Path, path: pathlib.Path) -> str:
    parts = list(path.relative_to(package_dir).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _relative(name: str, package: str) -> str | None:
    """A dotted module name relative to the package ("" for the package itself), or None outside it."""
    return "" if name == package else name[len(package) + 1 :] if name.startswith(package + ".") else None


def _targets(
    node: ast.Import | ast.ImportFrom, package: str, source: str, is_init: bool, modules: set[str]
) -> set[str]:
    """The package modules an import statement runs: `import m` and `from m import name` name m, or m.name where
    that is a module of its own."""
    if isinstance(node, ast.Import):
        names = [_relative(alias.name, package) for alias in node.names]
        return {n for n in names if n in modules}
    if node.level:  # from .x import y
        base = source.split(".") if source else []
        base = base if is_init else base[:-1]
        module = ".".join([*base[: len(base) - (node.level - 1)], *([node.module] if node.module else [])])
    elif (module := _relative(node.module or "", package)) is None:
        return set()
    submodules = {f"{module}.{alias.name}".lstrip(".") for alias in node.names}
    found = submodules & modules
    return found | ({module} if len(found) < len(submodules) and module in modules else set())


def _imports_in(tree: ast.AST, where: Callable[[ast.Import | ast.ImportFrom], set[str]]) -> list[tuple]:
    """(statement, target, local, type_only) for each package module a statement in the tree imports."""
    found = []

    def visit(node: ast.AST, local: bool, type_only: bool) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.extend((node, target, local, type_only) for target in sorted(where(node)))
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, local, True)
            for child in node.orelse:
                visit(child, local, type_only)
        else:
            inner = local or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            for child in ast.iter_child_nodes(node):
                visit(child, inner, type_only)

    visit(tree, False, False)
    return found


def imports_of(package_dir: pathlib.Path) -> list[Import]:
    """Every import of a package module in the package, each marked local or type-only."""
    package = package_dir.name
    modules = {module_name(package_dir, path): path for path in sorted(package_dir.rglob("*.py"))}
    found = []
    for source, path in modules.items():
        is_init = path.name == "__init__.py"
        where = functools.partial(_targets, package=package, source=source, is_init=is_init, modules=set(modules))
        for node, target, local, type_only in _imports_in(ast.parse(path.read_text(), str(path)), where):
            found.append(Import(source, target, node.lineno, local, type_only))
    return found


def layer_of(module: str, layers: dict[str, tuple[str, ...]]) -> str | None:
    """The layer that lists the module by name, else the first whose pattern matches it."""
    named = [layer for layer, patterns in layers.items() if module in patterns]
    matched = [layer for layer, patterns in layers.items() if any(fnmatch.fnmatchcase(module, p) for p in patterns)]
    return (named or matched or [None])[0]


def layer_violations(found: list[Import], layers=LAYERS, may_import=MAY_IMPORT) -> list[str]:
    """Each import that runs whose arrow the rule forbids, or whose module has no layer."""
    bad = []
    for imp in found:
        if imp.type_only:
            continue
        source, target = layer_of(imp.source, layers), layer_of(imp.target, layers)
        if source is None or target is None:
            missing = imp.source if source is None else imp.target
            bad.append(f"{imp}: {missing or '__init__'} belongs to no layer")
        elif source != target and target not in may_import[source]:
            bad.append(f"{imp}: {source} may not import {target}")
    return bad


def _module_graph(found: list[Import]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for imp in found:
        graph.setdefault(imp.source, set())
        if not imp.local and not imp.type_only and imp.source != imp.target:
            graph[imp.source].add(imp.target)
    return graph


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """A path of module-level imports from start to goal, or None."""
    parent: dict[str, str | None] = {start: None}
    todo = [start]
    while todo:
        node = todo.pop()
        if node == goal:
            path = [node]
            while parent[path[-1]] is not None:
                path.append(parent[path[-1]])  # type: ignore[arg-type]
            return path[::-1]
        for nxt in sorted(graph.get(node, ())):
            if nxt not in parent:
                parent[nxt] = node
                todo.append(nxt)
    return None


def cycles(found: list[Import]) -> list[str]:
    """Module-level import cycles, each as the path that closes it."""
    graph, bad, seen = _module_graph(found), [], set()
    for source in sorted(graph):
        for target in sorted(graph[source]):
            path = _reaches(graph, target, source)
            if path is not None and frozenset(path) not in seen:
                seen.add(frozenset(path))
                bad.append(" -> ".join([source, *path]))
    return bad


def cycle_dodges(found: list[Import]) -> list[str]:
    """Function-local imports that would close a cycle if they were module-level."""
    graph, bad = _module_graph(found), []
    for imp in found:
        if imp.local and not imp.type_only and (path := _reaches(graph, imp.target, imp.source)) is not None:
            bad.append(f"{imp}, which imports it back: {' -> '.join(path)}")
    return bad


def check(package_dir: pathlib.Path, layers=LAYERS, may_import=MAY_IMPORT) -> list[str]:
    """Everything that breaks the rule in the package at `package_dir`."""
    found = imports_of(package_dir)
    modules = sorted(module_name(package_dir, path) for path in package_dir.rglob("*.py"))
    homeless = [f"{m or '__init__'} belongs to no layer" for m in modules if layer_of(m, layers) is None]
    return homeless + layer_violations(found, layers, may_import) + cycles(found) + cycle_dodges(found)


if __name__ == "__main__":
    for problem in check(pathlib.Path(__file__).resolve().parents[1] / "glassgrad"):
        print(problem)
