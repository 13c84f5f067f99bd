"""NVLink/P2P pairs attributed the way links are: a GPU slow with most of its partners is the
culprit of its pairs; a pair slow while both GPUs are fine elsewhere is a slow pair.

A node has 84 P2P figures (56 one-way, 28 both ways) where it has 8 GEMM ones, so a noise dip
that survives its re-test lands on a P2P pair ten times as often. A path that is really slow
slows the pair's other figures too (the other direction, both ways at once): a slow pair is
``corroborated`` when at least one of them is also as far below its reference as a suspect must
be (``deficit_warn`` and ``robust_z``); only a corroborated pair can fail (gpudiag.analysis.speed):
a noise dip in one figure, re-test and all, stays a warning."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .measurements import Measurement
from .reference import KeyReferences
from .suspects import Suspect
from .thresholds import Thresholds


@dataclass(frozen=True)
class Pair:
    """An intra-node GPU pair slow while neither GPU is slow with most of its partners."""

    host: str
    ends: tuple[str, str]
    worst: Suspect
    # Another of the pair's figures is low too (or none could be judged): see the module docstring.
    corroborated: bool = True


def attribute_pairs(suspects: Sequence[Suspect], found: Sequence[Measurement], thresholds: Thresholds,
                    refs: Mapping[str, KeyReferences] | None = None) -> tuple[list[Suspect], list[Pair]]:
    """Attribute slow P2P pairs the way links are attributed: a GPU slow with most of its
    partners (``slow_node_share``, at least two partners) is the culprit, and its worst pair
    becomes its suspect; a slow pair between two GPUs that are fine elsewhere is a pair, judged
    ``corroborated`` against ``refs`` (None: every pair is)."""
    slow: dict[str, list[Suspect]] = defaultdict(list)
    for s in suspects:
        if s.measurement.probe == "p2p":
            slow[s.measurement.host].append(s)
    if not slow:
        return [], []
    partners: dict[tuple[str, str], set[str]] = defaultdict(set)
    uuids: dict[tuple[str, str], str | None] = {}
    figures: dict[tuple[str, tuple[str, ...]], list[Measurement]] = defaultdict(list)
    for m in found:
        if m.probe == "p2p" and m.host in slow:
            src, dst = str(m.params.get("src")), str(m.params.get("dst"))
            partners[(m.host, src)].add(dst)
            partners[(m.host, dst)].add(src)
            uuids.setdefault((m.host, src), m.gpu_uuid)
            figures[(m.host, tuple(sorted((src, dst))))].append(m)
    culprits: list[Suspect] = []
    pairs: list[Pair] = []
    for host in sorted(slow):
        group = slow[host]
        slow_with: dict[str, set[str]] = defaultdict(set)
        for s in group:
            src, dst = pair_ends(s)
            slow_with[src].add(dst)
            slow_with[dst].add(src)
        blamed = sorted(device for device, others in slow_with.items()
                        if len(partners[(host, device)]) >= 2
                        and 100 * len(others) / len(partners[(host, device)]) >= thresholds.slow_node_share_pct)
        for device in blamed:
            mine = [s for s in group if device in pair_ends(s)]
            worst = max(mine, key=lambda s: (s.deficit_pct, pair_ends(s)))
            m = worst.measurement
            moved = m._replace(device=device, gpu_uuid=uuids.get((host, device)))
            why = f"slow with {len(slow_with[device])} of {len(partners[(host, device)])} NVLink partners"
            culprits.append(dataclasses.replace(worst, measurement=moved, why=why))
        by_pair: dict[tuple[str, str], list[Suspect]] = defaultdict(list)
        for s in group:
            ends = tuple(sorted(pair_ends(s)))
            if not set(ends) & set(blamed):
                by_pair[(ends[0], ends[1])].append(s)
        for ends, mine in sorted(by_pair.items()):
            worst = max(mine, key=lambda s: (s.deficit_pct, pair_ends(s)))
            agreeing = _corroborated(worst, figures[(host, ends)], refs, thresholds)
            pairs.append(Pair(host, ends, worst, agreeing))
    return culprits, pairs


def _corroborated(worst: Suspect, figures: Sequence[Measurement], refs: Mapping[str, KeyReferences] | None,
                  thresholds: Thresholds) -> bool:
    """Whether another of the pair's figures (not ``worst``'s) is low too: ``deficit_warn`` below
    its key's expected level and ``robust_z`` spreads; True when none could be judged."""
    others = [m for m in figures if m.repeat_key != worst.measurement.repeat_key]
    judged = [(refs[m.key].expected(), m) for m in others if refs is not None and m.key in refs]
    if not judged:
        return True
    return any(ref.deficit_pct(m.value) >= thresholds.deficit_warn_pct
               and ref.far_below(ref.robust_z(m.value), thresholds) for ref, m in judged)


def pair_ends(suspect: Suspect) -> tuple[str, str]:
    params = suspect.measurement.params
    return str(params.get("src")), str(params.get("dst"))

