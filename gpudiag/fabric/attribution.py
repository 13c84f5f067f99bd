"""Attribution with a topology: which switch links, switches or leaves' uplinks are slow, and
what is left for the NICs and pairs (gpudiag.links.attribution) to explain.

1. Traced streams (gpudiag.fabric.observe.stream_observations): the culprits that slow some
   streams of a pair and not others — a link between switches, or a whole switch.
2. The NICs and pairs, judged as without a topology but on each pair's figure with the streams
   those culprits explain left out (``observe.nic_figure``): a slow path does not drain a NIC.
3. Pair figures as a collective sees them (``observe.pair_observations``), every test of a NIC
   suspect left out: what slows every stream of its pairs — a leaf whose uplinks are all slow —
   and, where the streams were not traced, the parts the slow pairs share (with ECMP every
   uplink of a leaf is on every one of its pairs' paths, so such a culprit names the set).
4. A leaf every one of whose nodes (three or more) is a slow NIC is the leaf, a slow switch:
   those nodes are not drained for it. A slow pair a culprit explains is no slow link: a slow
   stream of it crossed the culprit, or none of its streams was traced, the culprit is on its
   likely path and the pair ran no slower than the culprit's streams do (a trace that timed out
   does not make a slow path a slow pair).

Each culprit is ``confirmed`` when the confirm rounds' observations alone (runs other than the
ones that flagged it) show it slow again; where confirm runs crossed it and were fine, it is
cleared; where none crossed it, it stays a suspect (``unconfirmed``), never a pass.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..links.attribution import LinkAttribution, LinkBaseline, LinkThresholds, NicSuspect, attribute_links
from ..links.schedule import CONFIRM, Pair, pair_key
from .elements import UPLINKS, Element
from .model import LEAF, Topology
from .observe import (
    Measured,
    Observed,
    Planes,
    adjusted,
    crossed,
    explained_pairs,
    pair_observations,
    stream_observations,
)
from .tomography import Culprit, Observation, find_culprits, z_bar

# The z a culprit's confirm runs must reach on their own (a targeted re-test: one part, a few pairs).
CONFIRM_Z = 3.0
# Nodes of one leaf that, all slow with every partner, are the leaf rather than their NICs.
LEAF_NICS = 3


@dataclass(frozen=True)
class FabricSuspect:
    """A culprit of one backend and plane: ``traced`` (found from traced streams, else from pair
    figures), ``confirmed`` (its confirm runs alone showed it again), ``cleared`` (its confirm
    runs were fine: no finding), and ``confirm`` (the culprit as those runs alone show it)."""

    backend: str
    rail: int | None
    culprit: Culprit
    traced: bool
    confirmed: bool = False
    cleared: bool = False
    confirm: Culprit | None = None
    line_rate_gbps: float | None = None
    clear_pairs: int = 0  # pairs of its plane that avoid it, none of whose figures was slow
    retested: int = 0  # observations of its confirm runs through it

    @property
    def elements(self) -> tuple[Element, ...]:
        return self.culprit.elements

    @property
    def located(self) -> bool:
        """One part, not a set the tests could not split."""
        return len(self.culprit.elements) == 1


@dataclass(frozen=True)
class FabricAttribution:
    """The fabric's culprits, and the NIC and pair attribution of what they leave."""

    suspects: tuple[FabricSuspect, ...]
    links: LinkAttribution


def attribute_fabric(measured: Sequence[Measured], topology: Topology, thresholds: LinkThresholds, *,
                     baseline: LinkBaseline | None = None) -> FabricAttribution:
    """Culprits and NIC/pair suspects from every pair test so far (``measured``: (phase, result)
    in run order). See the module docstring."""
    planes = Planes(topology)
    material = math.log(1 - thresholds.deficit_pct / 100)
    hosts = {host for _, r in measured for host in (r.a, r.b)}
    streams = stream_observations(measured, planes)
    first = _culprits(streams, material, traced=True)
    blamed = _blamed(first)
    links = attribute_links(adjusted(measured, planes, blamed), thresholds, baseline=baseline)
    suspects_nics = frozenset(v.host for v in links.nics)
    pairs = pair_observations(measured, planes, blamed, suspects_nics)
    second = _culprits(pairs, material, traced=False, min_hosts=3)
    found = [*first, *second]
    leaf_culprits, nics = _leaves_of_nics(links.nics, topology, hosts)
    explained = _explained(measured, planes, found, streams, pairs)
    links = dataclasses.replace(links, nics=nics, links=tuple(
        v for v in links.links if v.gbps < explained.get((v.a, v.b), math.inf) * v.reference_gbps))
    rates = _line_rates(measured, planes)
    suspects = []
    for suspect in found:
        rows = (streams if suspect.traced else pairs)[(suspect.backend, suspect.rail)]
        suspects.append(dataclasses.replace(_judged(suspect, rows, material), line_rate_gbps=rates.get(
            (suspect.backend, suspect.rail)), clear_pairs=_clear_pairs(rows, suspect.elements, material)))
    suspects += leaf_culprits
    return FabricAttribution(tuple(suspects), links)


def _explained(measured: Sequence[Measured], planes: Planes, found: Sequence[FabricSuspect], streams: Observed,
               pairs: Observed) -> dict[Pair, float]:
    """The pairs the culprits explain, each with the share of its reference below which it is slower
    than they explain (0: whatever it ran at). A pair is explained by a traced culprit that one
    of its slow traced streams crossed (any figure), or, none of its streams traced, that is on its
    likely path (a figure down to the culprit's own share: what it leaves of a pair whose every
    stream it carries); by an untraced culprit, through a slow pair figure (any)."""
    explained: dict[Pair, float] = {}

    def explain(found_pairs: Iterable[Pair], share: float) -> None:
        for pair in found_pairs:
            explained[pair] = min(explained.get(pair, math.inf), share)

    untraced = [r for _, r in measured if not any(s.hops is not None for s in (*r.streams, *r.back_streams))]
    for suspect in found:
        key = (suspect.backend, suspect.rail)
        if not suspect.traced:
            explain(explained_pairs(pairs.get(key, []), suspect.elements), 0.0)
            continue
        explain(explained_pairs(streams.get(key, []), suspect.elements), 0.0)
        parts = frozenset(suspect.elements)
        explain((pair_key(r.a, r.b) for r in untraced if r.backend == suspect.backend
                 and (model := planes.model(r.rail)) is not None and model.plane.rail == suspect.rail
                 and crossed(r, model, parts)), suspect.culprit.share_pct / 100)
    return explained


def _culprits(observed: Observed, material: float, *, traced: bool, min_hosts: int = 2) -> list[FabricSuspect]:
    """The culprits of each backend and plane's observations (screen and confirm runs together)."""
    found = []
    for (backend, rail), rows in observed.items():
        parts = len(frozenset().union(*(row.elements for row in rows)))
        for culprit in find_culprits(rows, material, z_bar(parts), min_hosts=min_hosts):
            found.append(FabricSuspect(backend, rail, culprit, traced))
    return found


def _clear_pairs(rows: Sequence[Observation], elements: Sequence[Element], material: float) -> int:
    """Pairs none of whose observations crossed ``elements`` or was slow."""
    wanted = set(elements)
    crossing = {row.pair for row in rows if row.elements & wanted}
    slow = {row.pair for row in rows if row.log_ratio <= material}
    return len({row.pair for row in rows} - crossing - slow)


def _line_rates(measured: Sequence[Measured], planes: Planes) -> dict[tuple[str, int | None], float]:
    """Each backend and plane's line rate: the lowest its measured pairs report."""
    rates: dict[tuple[str, int | None], float] = {}
    for _, result in measured:
        model = planes.model(result.rail)
        if model is not None and result.line_rate_gbps is not None:
            key = (result.backend, model.plane.rail)
            rates[key] = min(rates.get(key, math.inf), result.line_rate_gbps)
    return rates


def _blamed(suspects: Sequence[FabricSuspect]) -> dict[int | None, frozenset[Element]]:
    blamed: dict[int | None, set[Element]] = {}
    for suspect in suspects:
        blamed.setdefault(suspect.rail, set()).update(suspect.elements)
    return {rail: frozenset(elements) for rail, elements in blamed.items()}


def _judged(suspect: FabricSuspect, observations: Sequence[Observation], material: float) -> FabricSuspect:
    """The suspect against its confirm runs alone (see the module)."""
    wanted = set(suspect.elements)
    again = [row for row in observations if row.phase == CONFIRM and row.elements & wanted]
    if not again:
        return suspect
    redone = find_culprits(again, material, CONFIRM_Z, min_pairs=1, min_hosts=1, min_observations=2)
    confirm = next((c for c in redone if set(c.elements) & wanted), None) or _slow_again(suspect, again, material)
    if confirm is not None:
        return dataclasses.replace(suspect, confirmed=True, confirm=confirm, retested=len(again))
    healthy = sorted(row.log_ratio for row in again)
    median = healthy[len(healthy) // 2]
    return dataclasses.replace(suspect, cleared=median > material / 2, retested=len(again))


def _slow_again(suspect: FabricSuspect, again: Sequence[Observation], material: float) -> Culprit | None:
    """The suspect as its confirm runs through it show it, where they are slow again on their own
    (two or more, their median past the material cut, their z past CONFIRM_Z): a re-test need not
    split it from the parts those runs also crossed (every pair of them crossed both ends' leaves),
    only show it slow again; the runs of every round together chose it over those parts."""
    if len(again) < 2:
        return None
    ratios = sorted(row.log_ratio for row in again)
    median = ratios[len(ratios) // 2]
    z = math.fsum(row.z for row in again) / math.sqrt(len(again))
    if median > material or z > -CONFIRM_Z:
        return None
    slow = [row for row in again if row.log_ratio <= material]
    pairs = tuple(sorted({pair_key(*row.pair) for row in again}))
    slow_pairs = tuple(sorted({pair_key(*row.pair) for row in slow}))
    return Culprit(suspect.elements, median, z, len(again), len(slow), pairs, slow_pairs,
                   tuple(sorted({host for pair in slow_pairs for host in pair})))


def _leaves_of_nics(nics: Sequence[NicSuspect], topology: Topology,
                    hosts: set[str]) -> tuple[list[FabricSuspect], tuple[NicSuspect, ...]]:
    """A leaf whose every measured node (LEAF_NICS or more) is a confirmed slow NIC on a rail of
    its plane: that leaf as a slow switch, and the NICs without those nodes' suspects there."""
    culprits: list[FabricSuspect] = []
    dropped: set[tuple[str, str, int | None]] = set()
    by_group: dict[tuple[str, int | None], list[NicSuspect]] = {}
    for nic in nics:
        if nic.confirmed:
            by_group.setdefault((nic.backend, nic.rail), []).append(nic)
    for (backend, rail), group in sorted(by_group.items(), key=lambda item: (item[0][0], -1 if item[0][1] is None
                                                                              else item[0][1])):
        plane = topology.plane(rail)
        if plane is None:
            continue
        slow = {nic.host: nic for nic in group}
        for leaf, under in plane.hosts_under.items():
            measured = [host for host in under if host in hosts]
            if len(measured) < LEAF_NICS or not all(host in slow for host in measured):
                continue
            chosen = [slow[host] for host in measured]
            culprits.append(FabricSuspect(backend, plane.rail, _leaf_culprit(leaf, plane.rail, chosen), False,
                                          confirmed=True, line_rate_gbps=chosen[0].line_rate_gbps))
            dropped |= {(host, backend, rail) for host in measured}
    kept = tuple(nic for nic in nics if (nic.host, nic.backend, nic.rail) not in dropped)
    return culprits, kept


def _leaf_culprit(leaf: str, rail: int | None, nics: Sequence[NicSuspect]) -> Culprit:
    ratios = sorted(math.log(max(1e-9, nic.gbps / nic.reference_gbps)) for nic in nics)
    pairs: list[Pair] = sorted({pair_key(f.a, f.b) for nic in nics for f in nic.pairs})
    return Culprit((Element.switch(leaf, rail),), ratios[len(ratios) // 2], -math.inf, len(nics), len(nics),
                   tuple(pairs), tuple(pairs), tuple(sorted(nic.host for nic in nics)))


__all__ = ["FabricAttribution", "FabricSuspect", "LEAF", "UPLINKS", "attribute_fabric"]
