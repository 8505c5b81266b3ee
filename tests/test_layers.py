"""The layers go one way (docs/architecture.md): no module imports from a layer above it, no
module imports a project module that does not exist, and there are no import circles, with
imports placed inside functions counted (they must not hide a circle).

Read from the source with ``ast``: nothing is imported, so a broken module fails here by
name rather than in whatever imports it first. Tests and migrations are not walked.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYERS = {
    "core": 0,  # audit log, live plumbing, guards, language: imports no app
    "tenants": 1,
    "scheduling": 2,
    "workloads": 3,
    "billing": 4,
    "serving": 4,
    "console": 5,  # pages that combine apps, demo data
    "portal": 6,  # settings, urls, asgi, celery: may import anything
}

# Imports inside functions that are allowed, (importer, imported module or package), each with
# its reason. Imports in an AppConfig's ready() are allowed without an entry: that is where
# Django wants an app to register with the apps below it.
LAZY: dict[tuple[str, str], str] = {
    ("scheduling.backends.registry", "scheduling.backends"): (
        "a cluster's backend is built when first used: the Kubernetes client loads only where "
        "a cluster needs it"
    ),
    ("portal.settings", "tenants.auth"): (
        "django-cas-ng calls the setting CAS_SESSION_FACTORY for a requests session; the "
        "settings module cannot import an app while Django loads it"
    ),
}

# Known violations being fixed on another branch (the lead's); remove each entry with its fix.
PENDING: dict[tuple[str, str], str] = {}  # known violations being fixed: none left


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str  # a module of the project
    line: int
    in_function: bool
    in_ready: bool

    def __str__(self) -> str:
        return f"{self.importer}:{self.line} imports {self.imported}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    modules = {}
    for app in LAYERS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" not in path.relative_to(ROOT).parts:
                modules[_module_name(path)] = path
    return modules


MODULES = project_modules()
EVERY_MODULE = {_module_name(p) for app in LAYERS for p in (ROOT / app).rglob("*.py")}


def _is_package(module: str) -> bool:
    return MODULES.get(module, Path()).name == "__init__.py"


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The project modules an import statement names (a name imported from a package is a
    module when the package has one of that name)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    if node.level:
        base = module.split(".") if _is_package(module) else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        source = ".".join([*base, node.module] if node.module else base)
    else:
        source = node.module or ""
    for alias in node.names:
        candidate = f"{source}.{alias.name}"
        yield candidate if candidate in EVERY_MODULE else source


def _walk(node: ast.AST, stack: tuple[str, ...]) -> Iterator[tuple[ast.AST, tuple[str, ...]]]:
    for child in ast.iter_child_nodes(node):
        yield child, stack
        inner = (
            (*stack, child.name)
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            else stack
        )
        yield from _walk(child, inner)


def project_imports() -> list[Import]:
    found = []
    for module, path in sorted(MODULES.items()):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, functions in _walk(tree, ()):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for target in _targets(module, node):
                if target.split(".")[0] in LAYERS:
                    in_ready = path.name == "apps.py" and functions == ("ready",)
                    found.append(Import(module, target, node.lineno, bool(functions), in_ready))
    return found


IMPORTS = project_imports()


def _listed(allowed: dict[tuple[str, str], str], imp: Import) -> bool:
    return any(
        imp.importer == importer
        and (imp.imported == imported or imp.imported.startswith(imported + "."))
        for importer, imported in allowed
    )


def layer_of(module: str) -> int:
    return LAYERS[module.split(".")[0]]


def test_every_app_has_a_layer() -> None:
    apps = {p.parent.name for p in ROOT.glob("*/apps.py")}
    assert apps <= set(LAYERS), f"give these apps a layer in LAYERS: {sorted(apps - set(LAYERS))}"


def test_every_imported_project_module_exists() -> None:
    """A module moved away must not be imported by its old name (the lead's editable install
    would quietly find the old file in another checkout)."""
    missing = [str(i) for i in IMPORTS if i.imported not in EVERY_MODULE]
    assert not missing, "no such module in this project:\n" + "\n".join(missing)


def test_no_module_imports_from_a_layer_above_it() -> None:
    upward = [
        f"{i} (layer {layer_of(i.importer)} imports layer {layer_of(i.imported)})"
        for i in IMPORTS
        if layer_of(i.imported) > layer_of(i.importer) and not _listed(PENDING, i)
    ]
    assert not upward, "imports from a layer above:\n" + "\n".join(upward)


def test_imports_inside_functions_are_only_the_listed_lazy_ones() -> None:
    hidden = [
        str(i)
        for i in IMPORTS
        if i.in_function and not i.in_ready and not _listed(LAZY, i) and not _listed(PENDING, i)
    ]
    assert not hidden, (
        "imports inside functions (move them to the top, or list them in LAZY with why):\n"
        + "\n".join(hidden)
    )


def test_there_are_no_import_circles() -> None:
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for i in IMPORTS:
        if i.imported in graph and i.imported != i.importer and not _listed(PENDING, i):
            graph[i.importer].add(i.imported)
    circles = [sorted(c) for c in _strongly_connected(graph) if len(c) > 1]
    assert not circles, "import circles:\n" + "\n".join(" ↔ ".join(c) for c in circles)


def test_the_allow_lists_name_imports_that_exist() -> None:
    """An entry whose import is gone (fixed) is removed, so the lists stay short and true."""
    stale = [
        entry for entry in [*LAZY, *PENDING] if not any(_listed({entry: ""}, i) for i in IMPORTS)
    ]
    assert not stale, f"remove these entries, nothing imports that way any more: {stale}"


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iteratively (the graph has a few hundred modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components
