"""The layer order of docs/architecture.md, held by parsing every module's imports (no import is executed).

Each package of `registry/` sits on one level; a module may import from its
own package and from packages on lower levels, never from its level's peers
or from above. Imports inside functions count too: a lazy import upward is
still a dependency upward. Module-level imports must also form no cycle
between modules, so every module can be imported first; and no two modules
lean on each other even through a lazy import (a cycle of two jobs that
belong in one module, or of one that belongs in neither).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from paths import ROOT

PACKAGE = ROOT / "registry"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# Lowest first; packages on one line are peers and import neither each other.
# The same order as the "Layers" list of docs/architecture.md (a test below holds the two together).
LAYERS = (
    ("formats",),
    ("events", "contracts"),
    ("gate",),
    ("evidence",),
    ("kernels",),
    ("workloads",),
    ("projections",),
    ("bundles",),
    ("app",),
    ("runtime",),
    ("serve",),
    ("cli",),
    ("migrations",),
)
LEVEL = {package: level for level, peers in enumerate(LAYERS) for package in peers}
# `registry/__init__.py` (the version) sits below everything; `python -m registry` runs the CLI.
TOP_LEVEL_MODULES = {"registry": -1, "registry.__main__": len(LAYERS)}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def import_nodes(tree: ast.AST, top_level_only: bool) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, or (`top_level_only`) those that run when the module is imported:
    not those inside a function body, which run only when it is called."""
    found, pending = [], [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif not (top_level_only and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))):
            pending.extend(ast.iter_child_nodes(node))
    return found


def imported_modules(module: str, top_level_only: bool) -> set[str]:
    """The registry modules `module` imports (absolute or relative), resolved to modules where they name one."""
    found: set[str] = set()
    for node in import_nodes(ast.parse(MODULES[module].read_text(encoding="utf-8")), top_level_only):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package(module) else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES)
    return {name for name in found if name in MODULES}


def level_of(module: str) -> int:
    if module in TOP_LEVEL_MODULES:
        return TOP_LEVEL_MODULES[module]
    package = module.split(".")[1]
    assert package in LEVEL, f"registry/{package}/ is on no layer: add it to docs/architecture.md and LAYERS"
    return LEVEL[package]


def package_of(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def test_every_package_of_the_registry_is_on_a_layer():
    packages = {path.name for path in PACKAGE.iterdir() if path.is_dir() and any(path.rglob("*.py"))}
    assert packages == set(LEVEL)


def test_the_layers_are_those_of_the_architecture_doc_in_its_order():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    block = text.split("## Layers", 1)[1].split("```", 2)[1]
    listed = re.findall(r"^  ([a-z_]+)/", block, flags=re.MULTILINE)
    assert listed == [package for peers in LAYERS for package in peers]


def test_no_module_imports_from_a_peer_or_a_layer_above_it():
    upward = []
    for module in MODULES:
        for target in imported_modules(module, top_level_only=False):
            same_package = package_of(target) == package_of(module)
            if not same_package and level_of(target) >= level_of(module) and target != "registry":
                upward.append(f"{module} imports {target}")
    assert upward == []


def module_cycles(top_level_only: bool = True) -> list[list[str]]:
    """Cycles among module-level imports (or all imports); importing a package's own parent is not an edge (it is
    already loading)."""
    edges = {module: {target for target in imported_modules(module, top_level_only=top_level_only)
                      if not module.startswith(target + ".") and target != module}
             for module in MODULES}
    # Tarjan's strongly connected components, iteratively.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in MODULES:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def test_no_circular_imports_between_modules():
    assert module_cycles() == []


def test_no_two_modules_depend_on_each_other_even_through_imports_inside_functions():
    assert module_cycles(top_level_only=False) == []


@pytest.mark.parametrize("package", ["formats", "contracts", "gate"])
def test_the_pure_layers_import_no_database_no_torch_and_no_measuring_package(package):
    """docs/architecture.md: formats/, contracts/ and gate/ import no database and no torch, at any depth."""
    forbidden = re.compile(r"^(torch|sqlalchemy|sqlite3|psycopg|alembic|triton|lpips)(\.|$)")
    found = []
    for module, path in MODULES.items():
        if package_of(module) != package:
            continue
        for node in import_nodes(ast.parse(path.read_text(encoding="utf-8")), top_level_only=False):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if not node.level else []
            found += [f"{module} imports {name}" for name in names if forbidden.match(name)]
    assert found == []


def test_the_gate_does_not_depend_on_the_measuring_package():
    reached = set()
    pending = [module for module in MODULES if package_of(module) == "gate"]
    while pending:
        module = pending.pop()
        for target in imported_modules(module, top_level_only=False) - reached:
            reached.add(target)
            pending.append(target)
    assert sorted(module for module in reached if package_of(module) in ("evidence", "kernels", "events")) == []
