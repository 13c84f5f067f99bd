"""NVLink/P2P pairs attributed the way links are: a GPU slow with most of its partners is the
culprit of its pairs; a pair slow while both GPUs are fine elsewhere is a slow pair."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ..thresholds import Thresholds
from .suspects import Measurement, Suspect


@dataclass(frozen=True)
class Pair:
    """An intra-node GPU pair slow while neither GPU is slow with most of its partners."""

    host: str
    ends: tuple[str, str]
    worst: Suspect


def attribute_pairs(suspects: Sequence[Suspect], found: Sequence[Measurement],
                     thresholds: Thresholds) -> tuple[list[Suspect], list[Pair]]:
    """Attribute slow P2P pairs the way links are attributed: a GPU slow with most of its
    partners (``slow_node_share``, at least two partners) is the culprit, and its worst pair
    becomes its suspect; a slow pair between two GPUs that are fine elsewhere is a pair."""
    slow: dict[str, list[Suspect]] = defaultdict(list)
    for s in suspects:
        if s.measurement.probe == "p2p":
            slow[s.measurement.host].append(s)
    if not slow:
        return [], []
    partners: dict[tuple[str, str], set[str]] = defaultdict(set)
    uuids: dict[tuple[str, str], str | None] = {}
    for m in found:
        if m.probe == "p2p" and m.host in slow:
            src, dst = str(m.params.get("src")), str(m.params.get("dst"))
            partners[(m.host, src)].add(dst)
            partners[(m.host, dst)].add(src)
            uuids.setdefault((m.host, src), m.gpu_uuid)
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
            pairs.append(Pair(host, ends, max(mine, key=lambda s: (s.deficit_pct, pair_ends(s)))))
    return culprits, pairs


def pair_ends(suspect: Suspect) -> tuple[str, str]:
    params = suspect.measurement.params
    return str(params.get("src")), str(params.get("dst"))

