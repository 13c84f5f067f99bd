"""The equal-cost paths of a plane: which switches and links a pair's traffic may cross.

Between two nodes under one leaf the only switch is that leaf. Between leaves, the paths are the
shortest up-down paths: up from the source leaf through higher tiers, then down, never down and up
again (a 2- or 3-tier Clos or fat tree routes so, with ECMP or a subnet manager's up-down or
fat-tree routing). Where no such path exists (a fabric that is no tree), the plain shortest paths
serve. Parallel cables between two switches are one link: a flow's path is a sequence of switches.

With ECMP a pair's streams spread over its paths evenly, so a ``PathSet`` says what share of the
pair's paths cross each link and each switch (``link_share``, ``switch_share``): the chance that
one stream crosses it. The shares come from counting paths (not listing them), so a 3-tier fabric
of thousands of paths per pair costs no more than a 2-tier one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .elements import Element
from .model import FabricLink, Plane, link_key

# A path's direction while it is walked: still climbing, or on its way down.
_UP, _DOWN = 0, 1
_State = tuple[str, int]


@dataclass(frozen=True)
class PathSet:
    """The equal-cost paths from leaf ``source`` to leaf ``target`` of one plane: ``count`` paths
    of ``switches`` switches each (1 under one leaf); ``link_share`` (link key → share of the
    paths that cross it, 0 to 1), ``link_up_share`` (the share that crosses it from its lower
    tier to its higher one: the source's side of the path) and ``switch_share`` likewise.
    ``valley_free``: the paths are up-down paths (False: the plane is no tree, and plain
    shortest paths were taken)."""

    source: str
    target: str
    count: int
    switches: int
    link_share: Mapping[tuple[str, str], float]
    switch_share: Mapping[str, float]
    link_up_share: Mapping[tuple[str, str], float]
    valley_free: bool = True

    @property
    def middle_hops(self) -> int:
        """Switches between the two leaves (0 under one leaf; 1 on a 2-tier Clos)."""
        return max(0, self.switches - 2)


@dataclass(frozen=True)
class _Dag:
    """The shortest paths between two leaves as a layered graph of (switch, direction) states:
    ``ways`` (paths from the source to each state), ``onward`` (paths from it to the target),
    ``order`` (states by depth) and ``length`` (links on a path)."""

    order: tuple[_State, ...]
    depth: Mapping[_State, int]
    ways: Mapping[_State, int]
    onward: Mapping[_State, int]
    length: int
    valley_free: bool

    @property
    def count(self) -> int:
        return self.onward[self.order[0]]


class PathModel:
    """The equal-cost paths of one plane, each leaf pair's worked out once."""

    def __init__(self, plane: Plane) -> None:
        self.plane = plane
        self._tiers = {switch.name: switch.tier for switch in plane.switches}
        self._dag = lru_cache(maxsize=65536)(self._make_dag)
        self.between = lru_cache(maxsize=65536)(self._between)
        self.elements_of = lru_cache(maxsize=65536)(self._elements_of)
        self._steps: dict[tuple[str, str, _State], tuple[tuple[tuple[_State, int], ...], int]] = {}
        # what callers work out from this plane's paths alone, kept with it (observe.pair_elements)
        self.memo: dict[tuple[object, ...], object] = {}

    def of_pair(self, a: str, b: str) -> PathSet | None:
        """The paths between nodes ``a`` and ``b``; None when the plane does not place either, or
        no path joins their leaves."""
        leaf_a, leaf_b = self.plane.leaf_of(a), self.plane.leaf_of(b)
        if leaf_a is None or leaf_b is None:
            return None
        return self.between(leaf_a, leaf_b)

    def links_of(self, hops: Sequence[str]) -> tuple[tuple[str, str], ...] | None:
        """The links of a path given as its switches in order; None when two consecutive switches
        share no link (a trace that does not fit the topology)."""
        keys = []
        for first, second in zip(hops, hops[1:], strict=False):
            if first not in self._tiers or second not in self._tiers:
                return None
            key = link_key(first, second, self._tiers)
            if key not in self.plane.link_by_key:
                return None
            keys.append(key)
        return tuple(keys)

    def _elements_of(self, hops: tuple[str, ...]) -> frozenset[Element] | None:
        """The parts a path of these switches crosses: each link between them and each switch;
        None when they do not make a path of the plane (``elements_of`` keeps each answer)."""
        links = self.links_of(hops)
        if links is None:
            return None
        rail = self.plane.rail
        return frozenset([*(Element.link(key, rail) for key in links), *(Element.switch(hop, rail) for hop in hops)])

    def link(self, key: tuple[str, str]) -> FabricLink:
        return self.plane.link_by_key[key]

    def walk(self, source: str, target: str, choose: Callable[[int], int]) -> tuple[str, ...] | None:
        """One of the equal-cost paths from leaf ``source`` to leaf ``target``, its switches in
        order: at each step ``choose(n)`` picks one of the n onward paths (0..n-1), so a uniform
        ``choose`` draws every path alike (ECMP) and a fixed one routes deterministically. None
        when no path joins them."""
        if source == target:
            return (source,)
        dag = self._dag(source, target)
        if dag is None:
            return None
        state = dag.order[0]
        hops = [source]
        while state[0] != target or dag.depth[state] < dag.length:
            nexts, total = self._onward(source, target, state)
            pick = choose(total)
            for move, ways in nexts:
                if pick < ways:
                    state = move
                    break
                pick -= ways
            hops.append(state[0])
        return tuple(hops)

    def _onward(self, source: str, target: str, state: _State) -> tuple[tuple[tuple[_State, int], ...], int]:
        """The next states of ``state`` on the paths from ``source`` to ``target``, each with its
        count of onward paths, and their sum (kept: a walk takes this step many times)."""
        key = (source, target, state)
        found = self._steps.get(key)
        if found is None:
            dag = self._dag(source, target)
            assert dag is not None
            nexts = tuple((move, dag.onward[move]) for move in self._moves(state, dag.valley_free)
                          if dag.depth.get(move) == dag.depth[state] + 1 and dag.onward.get(move))
            found = self._steps[key] = (nexts, sum(ways for _, ways in nexts))
        return found

    def _between(self, source: str, target: str) -> PathSet | None:
        if source == target:
            return PathSet(source, target, 1, 1, {}, {source: 1.0}, {})
        dag = self._dag(source, target)
        if dag is None:
            return None
        total = dag.count
        link_share: dict[tuple[str, str], float] = {}
        up_share: dict[tuple[str, str], float] = {}
        switch_share: dict[str, float] = {}
        for state in dag.order:
            through = dag.ways[state] * dag.onward.get(state, 0)
            if not through:
                continue
            switch_share[state[0]] = switch_share.get(state[0], 0.0) + through / total
            for move in self._moves(state, dag.valley_free):
                if dag.depth.get(move) == dag.depth[state] + 1 and dag.onward.get(move):
                    key = link_key(state[0], move[0], self._tiers)
                    share = dag.ways[state] * dag.onward[move] / total
                    link_share[key] = link_share.get(key, 0.0) + share
                    if self._tiers[move[0]] > self._tiers[state[0]]:
                        up_share[key] = up_share.get(key, 0.0) + share
        return PathSet(source, target, total, dag.length + 1, link_share, switch_share, up_share, dag.valley_free)

    def _make_dag(self, source: str, target: str) -> _Dag | None:
        return self._layered(source, target, True) or self._layered(source, target, False)

    def _moves(self, state: _State, valley_free: bool) -> list[_State]:
        switch, direction = state
        tier = self._tiers[switch]
        moves = []
        for other in self.plane.neighbours[switch]:
            other_tier = self._tiers[other]
            if not valley_free:
                moves.append((other, _UP))
            elif other_tier > tier and direction == _UP:
                moves.append((other, _UP))
            elif other_tier < tier:
                moves.append((other, _DOWN))
        return moves

    def _layered(self, source: str, target: str, valley_free: bool) -> _Dag | None:
        """Shortest paths from ``source`` to ``target`` over the state graph (switch, direction),
        breadth first; None when none reaches it."""
        start = (source, _UP)
        depth = {start: 0}
        ways = {start: 1}
        order = [start]
        queue = deque([start])
        reached: list[_State] = []
        while queue:
            state = queue.popleft()
            if reached and depth[state] >= depth[reached[0]]:
                break
            for move in self._moves(state, valley_free):
                if move not in depth:
                    depth[move] = depth[state] + 1
                    ways[move] = 0
                    order.append(move)
                    queue.append(move)
                if depth[move] == depth[state] + 1:
                    ways[move] += ways[state]
                    if move[0] == target and move not in reached:
                        reached.append(move)
        if not reached:
            return None
        length = depth[reached[0]]
        onward = {state: 1 for state in reached}
        for state in reversed(order):  # paths from each state to the target, walked back from the end
            if state in onward or depth[state] >= length:
                continue
            onward[state] = sum(onward.get(move, 0) for move in self._moves(state, valley_free)
                                if depth.get(move) == depth[state] + 1)
        return _Dag(tuple(order), depth, ways, onward, length, valley_free)
