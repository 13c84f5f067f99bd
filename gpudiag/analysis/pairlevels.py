"""The level of a GPU pair's P2P key, shared with the other pairs of its board where they agree.

Each GPU pair's P2P figure is a key of its own (its two ends are parameters of the key), so its
fleet level rests on one value a host: sixteen hosts of a model in a 48-node three-model fleet.
Such a level is itself off by about half a spread (``LEVEL_ERROR`` of it over √16), as much as the
noise of six re-test runs together, and a pair 10 % slow at 3 % noise, its re-test mean 9 % below,
stood 3.8 sigma of such a mean below it where the bar was 4.8.

On a board whose GPUs meet in NVSwitches every pair of one direction runs alike, and the 56 keys
of a model's one-way pairs together know their level far better. ``pool_pair_levels``: per model,
probe, metric and the key's other parameters (the direction), where ``MIN_KEYS`` keys or more
have a fleet level, their median is the group's level; a key whose own level lies within
``AGREE_ERRORS`` of its own errors of it takes that level, resting on the values of all of them.
A key whose level differs by more keeps its own: a board whose pairs differ (NVLink bridges in
pairs, PCIe between them) is judged pair by pair as before.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence

from .measurements import Measurement
from .noisy import LEVEL_ERROR
from .reference import FLEET, KeyReferences, with_cutoff
from .thresholds import Thresholds

# The parameters that name a pair's two ends: the rest of its key is what the pairs share.
PAIR_PARAMS = frozenset({"src", "dst"})
# Keys of one group that a shared level needs: fewer are no firmer than one.
MIN_KEYS = 6
# How far (in its own level's errors) a key's level may lie from its group's and still be it.
AGREE_ERRORS = 2.0


def pool_pair_levels(refs: Mapping[str, KeyReferences], grouped: Mapping[str, Sequence[Measurement]],
                     thresholds: Thresholds) -> dict[str, KeyReferences]:
    """``refs`` with each pair key's fleet level its group's where the two agree (see the module
    docstring); every other key as it is."""
    groups: dict[tuple[object, ...], list[str]] = defaultdict(list)
    for key, key_refs in refs.items():
        m = grouped[key][0]
        if not PAIR_PARAMS <= set(m.params) or key_refs.get(FLEET) is None:
            continue
        shared = tuple(sorted((name, str(value)) for name, value in m.params.items() if name not in PAIR_PARAMS))
        groups[(m.gpu_model, m.probe, m.metric, shared)].append(key)
    pooled = dict(refs)
    for keys in groups.values():
        if len(keys) < MIN_KEYS:
            continue
        fleets = {key: ref for key in keys if (ref := refs[key].get(FLEET)) is not None}
        level = statistics.median(ref.value for ref in fleets.values())
        values = math.fsum(ref.level_values for ref in fleets.values())
        for key, fleet in fleets.items():
            if fleet.level_values <= 0:
                continue
            error = LEVEL_ERROR * fleet.spread / math.sqrt(fleet.level_values)
            if abs(fleet.value - level) <= AGREE_ERRORS * error:
                shared_ref = dataclasses.replace(fleet, value=level, level_values=values)
                pooled[key] = with_cutoff(tuple(shared_ref if ref is fleet else ref for ref in refs[key].references),
                                          thresholds)
    return pooled
