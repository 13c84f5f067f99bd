"""From pair tests to observations of the fabric (gpudiag.fabric.tomography.Observation).

- ``stream_observations``: each traced stream, against its fair share of its own pair's figure in
  that direction: log(its Gb/s / the mean of the direction's streams). A slow link slows the
  streams hashed onto it and not their siblings, whatever the pair's NICs do, and what it leaves
  the siblings take up, so the pair's own mean is the reference; the centre and spread of these
  ratios are measured over every traced stream of the plane and backend.
- ``pair_observations``: each pair test's figure as a collective sees it (its streams' count ×
  the slowest of those not already explained), against the centre of its group (backend, rail,
  line rate): what a leaf whose every uplink is slow, or an untraced pair's slow path, shows. A
  pair that crossed a culprit is left out (the culprit explains it, and the figure its other
  streams took up says nothing of the parts beside it), and so is the untraced direction of a
  pair with a culprit on its likely path.
- ``nic_figure``: the figure the NIC attribution judges a pair by where the fabric is known: its
  own (the sum of its streams: what a slow path leaves of the NIC's rate, the other streams take
  up), or none where every stream of a direction crossed a culprit — such a pair says nothing
  of its NICs, and a slow path does not read as a slow NIC at either end.
- ``adjusted``: those figures, each pair that crossed a culprit (a traced stream through it, or
  untraced with the culprit on its likely path) raised by what the culprit costs such pairs: the
  median of the crossing pairs against the median of the rest of their group. The other streams
  take up most but not all of what a slow path leaves, so every pair through it runs a few
  percent low; a NIC whose pairs all crossed it is judged against that, not against pairs that
  avoided it (a NIC slower still is slow against it too).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import cast

from ..links.groups import LinkGroup, LinkResult, StreamFigure
from ..links.schedule import pair_key
from .elements import Element
from .model import Topology
from .paths import PathModel, PathSet
from .tomography import Observation, robust_centre

# A stream count below which a pair's upper quartile says too little to be a reference.
MIN_STREAMS = 4
# The least spread (natural log) a group's ratios are taken to have: streams of one pair are
# never closer than this.
STREAM_SPREAD_FLOOR = 0.005
PAIR_SPREAD_FLOOR = 0.01
# A part crossed with at least this chance by one of a pair's streams is on that pair's path.
HIT_CHANCE = 0.5

Measured = tuple[str, LinkResult]  # (phase, result)


class Planes:
    """The topology's path models, one per plane, and where each host sits."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.models = {plane.rail: PathModel(plane) for plane in topology.planes}

    def model(self, rail: int | None) -> PathModel | None:
        plane = self.topology.plane(rail)
        return None if plane is None else self.models[plane.rail]


def traced_elements(model: PathModel, hops: Sequence[str]) -> frozenset[Element] | None:
    """The parts a traced stream crossed: the links between its switches, and each switch; None
    when its hops do not fit the plane (a trace the topology cannot place)."""
    return model.elements_of(tuple(hops))


# Observations by (backend, plane rail): the parts of one plane are judged on one backend's figures.
Observed = dict[tuple[str, int | None], list[Observation]]


def stream_observations(measured: Iterable[Measured], planes: Planes) -> Observed:
    """Every traced stream's observation (see the module), each plane and backend centred on its
    own streams. A trace must start at the client's leaf and end at the server's, as the topology
    places them (a trace from elsewhere is left out)."""
    rows: dict[tuple[str, int | None], list[tuple[str, LinkResult, float, frozenset[Element]]]] = defaultdict(list)
    for phase, result in measured:
        model = planes.model(result.rail)
        traced = [s for s in result.streams if s.hops is not None]
        if model is None or len(result.streams) < MIN_STREAMS or not traced:
            continue
        top = math.fsum(s.gbps for s in result.streams) / len(result.streams)
        if top <= 0:
            continue
        first, last = model.plane.leaf_of(result.a), model.plane.leaf_of(result.b)
        group = rows[(result.backend, model.plane.rail)]
        for stream in traced:
            hops = stream.hops
            assert hops is not None
            if not hops or hops[0] != first or hops[-1] != last or stream.gbps <= 0:
                continue
            elements = traced_elements(model, hops)
            if elements is not None:
                group.append((phase, result, math.log(stream.gbps / top), elements))
    rows = {key: found for key, found in rows.items() if found}
    observed: Observed = {}
    for group in sorted(rows, key=lambda key: (key[0], -1 if key[1] is None else key[1])):
        centre, spread = robust_centre([ratio for _, _, ratio, _ in rows[group]], STREAM_SPREAD_FLOOR)
        observed[group] = [Observation((r.a, r.b), ratio - centre, (ratio - centre) / spread, elements, phase)
                           for phase, r, ratio, elements in rows[group]]
    return observed


def pair_elements(model: PathModel, paths: PathSet, streams: int) -> frozenset[Element]:
    """The parts a pair of ``streams`` streams is taken to cross (see HIT_CHANCE), its leaves'
    uplinks as parts of their own where it leaves its leaf (one answer a plane, leaf pair and
    stream count)."""
    key = ("pair_elements", paths.source, paths.target, max(1, streams))
    found = model.memo.get(key)
    if found is None:
        found = model.memo[key] = _pair_elements(model, paths, max(1, streams))
    return cast(frozenset[Element], found)


def _pair_elements(model: PathModel, paths: PathSet, count: int) -> frozenset[Element]:
    rail = model.plane.rail
    found = {Element.switch(name, rail) for name, share in paths.switch_share.items()
             if 1 - (1 - share) ** count >= HIT_CHANCE}
    found |= {Element.link(key, rail) for key, share in paths.link_share.items()
              if 1 - (1 - share) ** count >= HIT_CHANCE}
    if paths.source != paths.target:
        found |= {Element.uplinks(paths.source, rail), Element.uplinks(paths.target, rail)}
    return frozenset(found)


def unexplained(streams: Sequence[StreamFigure], model: PathModel, blamed: frozenset[Element]) -> list[StreamFigure]:
    """The streams whose traced path crosses none of the ``blamed`` parts (untraced ones kept)."""
    if not blamed:
        return list(streams)
    kept = []
    for stream in streams:
        elements = traced_elements(model, stream.hops) if stream.hops is not None else None
        if elements is None or not elements & blamed:
            kept.append(stream)
    return kept


def collective_figure(result: LinkResult, model: PathModel, blamed: frozenset[Element],
                      untraced_explained: bool = False) -> float | None:
    """The pair's figure as a collective sees it, the streams a culprit explains left out: per
    direction, its streams' count × the slowest of the rest; the slower direction. A direction
    none of whose streams was traced is left out where ``untraced_explained`` (a culprit is on
    its likely path). Without streams, the pair's own figure (None where ``untraced_explained``)."""
    if not result.streams and not result.back_streams:
        return None if untraced_explained else result.gbps
    figures = [len(direction) * min(s.gbps for s in kept) for direction in (result.streams, result.back_streams)
               if direction and not (untraced_explained and all(s.hops is None for s in direction))
               and (kept := unexplained(direction, model, blamed))]
    return min(figures) if figures else None


def nic_figure(result: LinkResult, model: PathModel | None, blamed: frozenset[Element]) -> float | None:
    """The figure the NIC attribution judges ``result`` by (see the module): its own, or None when
    every traced stream of a direction crossed a ``blamed`` part."""
    if result.gbps is None or model is None or not blamed:
        return result.gbps
    for direction in (result.streams, result.back_streams):
        traced = [s for s in direction if s.hops is not None]
        if traced and len(traced) == len(direction) and not unexplained(traced, model, blamed):
            return None
    return result.gbps


def pair_observations(measured: Iterable[Measured], planes: Planes, blamed: Mapping[int | None, frozenset[Element]],
                      left_out: frozenset[str]) -> Observed:
    """Each pair test's observation (see the module), the tests of ``left_out`` hosts (NIC
    suspects: their own slowness is no fabric's) left out."""
    rows: dict[tuple[str, int | None, float | None, int | None],
               list[tuple[str, LinkResult, float, frozenset[Element]]]] = defaultdict(list)
    for phase, result in measured:
        model = planes.model(result.rail)
        if model is None or result.gbps is None or left_out & {result.a, result.b}:
            continue
        paths = model.of_pair(result.a, result.b)
        if paths is None:
            continue
        parts = blamed.get(model.plane.rail, frozenset())
        if crossed(result, model, parts):
            continue  # the culprit explains it, and what its other streams took up says nothing of the rest
        elements = pair_elements(model, paths, len(result.streams) or 1)
        # an untraced direction a culprit may explain says nothing of the parts beside it
        figure = collective_figure(result, model, parts, untraced_explained=bool(elements & parts))
        if figure is None or figure <= 0:
            continue
        group = (result.backend, result.rail, result.line_rate_gbps, model.plane.rail)
        rows[group].append((phase, result, math.log(figure), elements))
    observed: Observed = defaultdict(list)
    for group in sorted(rows, key=lambda key: (key[0], -1 if key[1] is None else key[1], key[2] or 0.0)):
        centre, spread = robust_centre([value for _, _, value, _ in rows[group]], PAIR_SPREAD_FLOOR)
        observed[(group[0], group[3])] += [Observation((r.a, r.b), value - centre, (value - centre) / spread,
                                                       elements, phase) for phase, r, value, elements in rows[group]]
    return dict(observed)


def crossed(result: LinkResult, model: PathModel, blamed: frozenset[Element]) -> bool:
    """Whether ``result`` went through a ``blamed`` part: a traced stream did, or, with none of its
    streams traced, the part is on its likely path (``pair_elements``)."""
    if not blamed:
        return False
    streams = [*result.streams, *result.back_streams]
    if any(s.hops is not None for s in streams):
        return any(len(unexplained([s], model, blamed)) == 0 for s in streams if s.hops is not None)
    paths = model.of_pair(result.a, result.b)
    return paths is not None and bool(pair_elements(model, paths, len(result.streams) or 1) & blamed)


# Pairs that crossed a culprit, and the hosts among them, below which their median says too
# little of what the culprit costs a pair (then their figures stand as measured).
MIN_CROSSING_PAIRS = 3
MIN_CROSSING_HOSTS = 4


def adjusted(measured: Iterable[Measured], planes: Planes,
             blamed: Mapping[int | None, frozenset[Element]]) -> list[LinkResult]:
    """The results as the NIC attribution judges them (see the module): each figure its
    ``nic_figure``, raised by its group's crossing cost where it crossed a culprit; a result
    whose every stream a culprit explains is left out."""
    rows: list[tuple[LinkResult, float | None, bool]] = []
    for _, result in measured:
        model = planes.model(result.rail)
        parts = blamed.get(model.plane.rail, frozenset()) if model else frozenset()
        if result.gbps is None or model is None:
            rows.append((result, result.gbps, False))
            continue
        figure = nic_figure(result, model, parts)
        if figure is not None:
            rows.append((result, figure, crossed(result, model, parts)))
    cost = _crossing_costs(rows)
    return [result if figure is None else dataclasses.replace(
        result, gbps=figure / cost.get(result.group, 1.0) if through else figure)
        for result, figure, through in rows]


def _crossing_costs(rows: Sequence[tuple[LinkResult, float | None, bool]]) -> dict[LinkGroup, float]:
    """Each group's share (at most 1) the pairs that crossed a culprit reached of the rest's
    median; groups with too few crossing pairs or none to compare with are left out."""
    through: dict[LinkGroup, list[LinkResult]] = defaultdict(list)
    clear: dict[LinkGroup, list[float]] = defaultdict(list)
    for result, figure, crossing in rows:
        if figure is not None:
            if crossing:
                through[result.group].append(dataclasses.replace(result, gbps=figure))
            else:
                clear[result.group].append(figure)
    costs = {}
    for group, results in through.items():
        hosts = {host for r in results for host in (r.a, r.b)}
        if len(results) < MIN_CROSSING_PAIRS or len(hosts) < MIN_CROSSING_HOSTS or not clear[group]:
            continue
        level = statistics.median(clear[group])
        share = statistics.median(r.gbps or 0.0 for r in results) / level if level > 0 else 1.0
        if 0 < share < 1:
            costs[group] = share
    return costs


def explained_pairs(observations: Iterable[Observation], elements: Iterable[Element]) -> set[tuple[str, str]]:
    """The pairs (canonical) with a slow-looking observation through any of ``elements``."""
    wanted = set(elements)
    return {pair_key(*row.pair) for row in observations if row.elements & wanted and row.log_ratio < 0}


