"""The shape of gpudiag's imports, in figures: modules and packages, arrows, floors, circles and
the longest chain of imports, read from the source with ``ast`` (tests/importgraph.py).

    python bench/import_graph.py            # this checkout
    python bench/import_graph.py --tree DIR # another one (a git worktree of an older commit)

Two views: every module, and rooms (a top-level module of gpudiag, one of its packages taken
whole, or the probe bundle taken whole), the view a newcomer reads first. ``--smoke`` prints the
same (the graph is read in well under a second).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from importgraph import ImportGraph, read_graph, rooms  # noqa: E402


def describe(name: str, graph: ImportGraph) -> list[str]:
    floors = graph.floors()
    arrows = sum(len(targets) for targets in graph.arrows.values())
    cycles = graph.cycles()
    lines = [f"{name}: {len(graph.arrows)} {'rooms' if name == 'rooms' else 'modules'}, {arrows} arrows, "
             f"{max(floors.values())} floors, {len(cycles)} circles",
             f"  longest chain: {' -> '.join(graph.longest_chain())}"]
    lines += [f"  circle: {' <-> '.join(part)}" for part in cycles]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the checkout to read (default: this one)")
    parser.add_argument("--smoke", action="store_true", help="the same figures (kept for the bench smoke test)")
    parser.add_argument("--rooms", action="store_true", help="also list each room's floor and arrows")
    options = parser.parse_args()
    graph = read_graph(options.tree.resolve())
    grouped = rooms(graph)
    for line in describe("modules", graph) + describe("rooms", grouped):
        print(line)
    if options.rooms:
        floors = grouped.floors()
        for room in sorted(grouped.arrows, key=lambda name: (-floors[name], name)):
            print(f"  floor {floors[room]:2d}  {room:28s} -> {', '.join(sorted(grouped.arrows[room])) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
