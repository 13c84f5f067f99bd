"""gpudiag's import graph, read from the source with ``ast`` (nothing is imported or run).

A module is a ``.py`` file under ``gpudiag/`` or ``probes/``, named the way Python names it
(``gpudiag.links.groups``, ``probes.net.common``); an arrow A -> B is an ``import`` in A that loads B,
wherever it stands (a function's body and ``if TYPE_CHECKING:`` too: both are still a dependency
a reader must follow). ``from package import name`` draws an arrow to ``package.name`` where that
is a module, else to the package. The layout test holds the rules on this graph; ``bench/
import_graph.py`` prints its figures.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP_PACKAGES = ("gpudiag", "probes")


@dataclass
class ImportGraph:
    """Modules, the arrows between them, and the outside packages each one imports."""

    files: dict[str, Path] = field(default_factory=dict)
    arrows: dict[str, set[str]] = field(default_factory=dict)
    external: dict[str, set[str]] = field(default_factory=dict)

    def importers_of(self, prefix: str) -> dict[str, set[str]]:
        """Each module that imports ``prefix`` or a module under it, with what it imports there."""
        found: dict[str, set[str]] = {}
        for module, targets in self.arrows.items():
            hits = {target for target in targets if within(target, prefix)}
            if hits:
                found[module] = hits
        return found

    def cycles(self) -> list[list[str]]:
        """The strongly connected parts of more than one module (Tarjan), each sorted."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        found: list[list[str]] = []

        def visit(module: str) -> None:
            index[module] = low[module] = len(index)
            stack.append(module)
            on_stack.add(module)
            for target in sorted(self.arrows.get(module, ())):
                if target not in index:
                    visit(target)
                    low[module] = min(low[module], low[target])
                elif target in on_stack:
                    low[module] = min(low[module], index[target])
            if low[module] == index[module]:
                part = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.append(member)
                    if member == module:
                        break
                if len(part) > 1:
                    found.append(sorted(part))

        for module in sorted(self.arrows):
            if module not in index:
                visit(module)
        return found

    def floors(self) -> dict[str, int]:
        """Each module's floor: 1 for one that imports no module of ours, else one above the highest
        it imports (arrows inside a cycle are not climbed)."""
        cyclic = {module for part in self.cycles() for module in part}
        floor: dict[str, int] = {}

        def height(module: str, path: frozenset[str]) -> int:
            if module in floor:
                return floor[module]
            below = [height(target, path | {module}) for target in self.arrows.get(module, ())
                     if target not in path and not (module in cyclic and target in cyclic)]
            floor[module] = 1 + max(below, default=0)
            return floor[module]

        for module in self.arrows:
            height(module, frozenset())
        return floor

    def longest_chain(self) -> list[str]:
        """One chain of imports from the top floor down to the ground."""
        floor = self.floors()
        module = max(floor, key=lambda name: (floor[name], name))
        chain = [module]
        while floor[module] > 1:
            module = max((target for target in self.arrows[module] if floor.get(target, 0) == floor[module] - 1),
                         key=lambda name: name)
            chain.append(module)
        return chain


def within(module: str, prefix: str) -> bool:
    """True where ``module`` is ``prefix`` or lies under it."""
    return module == prefix or module.startswith(prefix + ".")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_graph(root: Path = ROOT) -> ImportGraph:
    graph = ImportGraph()
    for top in TOP_PACKAGES:
        for path in sorted((root / top).rglob("*.py")):
            graph.files[module_name(path, root)] = path
    for module, path in graph.files.items():
        graph.arrows[module] = set()
        graph.external[module] = set()
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for target in _imports(ast.parse(path.read_text(), str(path)), package):
            resolved = _resolve(target, graph.files)
            if resolved is None:
                graph.external[module].add(target.partition(".")[0])
            elif resolved != module:
                graph.arrows[module].add(resolved)
    return graph


def _imports(tree: ast.Module, package: str) -> Iterator[str]:
    """Every dotted name the module imports; ``from X import a`` gives ``X.a`` (a module, or a
    name the caller resolves to X)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            yield from (f"{origin}.{alias.name}" for alias in node.names)


# The installed bundle's package: gpudiag/bundle/probes is a link to probes/, whose modules the
# graph names once, as probes.*.
BUNDLE_PACKAGE = "gpudiag.bundle.probes"


def _resolve(target: str, files: dict[str, Path]) -> str | None:
    """The longest of our modules that ``target`` names or lies under; None for an outside one."""
    if within(target, BUNDLE_PACKAGE):
        target = "probes" + target[len(BUNDLE_PACKAGE):]
    parts = target.split(".")
    while parts:
        name = ".".join(parts)
        if name in files:
            return name
        parts.pop()
    return None


def room_of(module: str) -> str:
    """A top-level module of gpudiag, one of its packages, or the bundle, taken whole."""
    parts = module.split(".")
    if parts[0] != "gpudiag":
        return parts[0]
    return ".".join(parts[:2])


def rooms(graph: ImportGraph) -> ImportGraph:
    """The graph with modules grouped into rooms; arrows inside a room are dropped."""
    grouped = ImportGraph()
    for module, targets in graph.arrows.items():
        room = room_of(module)
        grouped.files.setdefault(room, graph.files[module])
        grouped.arrows.setdefault(room, set()).update(room_of(target) for target in targets
                                                      if room_of(target) != room)
    return grouped
