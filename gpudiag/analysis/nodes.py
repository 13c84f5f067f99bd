"""A node judged as one: the median of its GPUs on each key, against the fleet's node medians.

A node slow on every GPU alike (a starved host, a slow PCIe root, a node-wide power cap) is
``slow_node``. Where each GPU's figure is noisy (CV 3 %), a node 8 % slow has only a third of its
GPUs past a GPU's threshold, and was named GPU by GPU (or not at all). The median of its eight
GPUs is four times steadier than one of them, and the fleet's node medians scatter that much
less too: judged against them, the node stands out whole.

Each host with ``sibling_min_gpus`` GPUs or more of a key gives one **node median** measurement
of that key: device ``NODE_MEDIAN`` (no GPU of its own; no device a node can print, whose names
have no space), its own key (the GPU key with a field no record can give), the median of its
GPUs' figures, the median of their sample CVs. Node medians are compared only with the fleet's
node medians of the same key (its densest level and MAD, as any fleet reference: at least
``min_peers`` hosts): not with the SKU figure or a baseline, whose spreads are a single GPU's.
Their suspects go through the same re-test as any suspect (the re-test's node medians, made the
same way, confirm them), and a host with one is node-wide on that metric (``slow_node``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from .measurements import HOST_DEVICES, NODE_MEDIAN, KeyInfo, Measurement
from .siblings import SIBLING_PROBES
from .sku import FloorKey
from .thresholds import Thresholds

# The field a node median's key adds to its GPUs' key (a JSON object of sorted fields: a node's
# records cannot add a top-level field to a key, so no record's key is a node median's).
_MEDIAN_FIELD = ',"within":"the median of a node\'s GPUs"}'


def node_medians(found: Iterable[Measurement], thresholds: Thresholds) -> list[Measurement]:
    """One node-median measurement per host and key of its GPUs (``SIBLING_PROBES``), where the
    host has ``sibling_min_gpus`` GPUs of the key or more (the median of a device that printed
    several figures first)."""
    return [m for m, gpus in counted_medians(found) if gpus >= thresholds.sibling_min_gpus]


def counted_medians(found: Iterable[Measurement],
                    infos: dict[tuple[str, str | None], KeyInfo] | None = None) -> list[tuple[Measurement, int]]:
    """``node_medians`` before the threshold: every host's and key's median, with how many GPUs
    it rests on. Per host, so each host's are made as it is read (gpudiag.analysis.suspects.
    SweepReader), beside the probing; ``infos`` shares each median key's KeyInfo across hosts."""
    values: dict[tuple[str, str, str | None], dict[str, list[float]]] = {}
    cvs: dict[tuple[str, str, str | None], list[float]] = defaultdict(list)
    infos = {} if infos is None else infos
    for m in found:
        info = m.info
        if info.probe not in SIBLING_PROBES or m.device in HOST_DEVICES:
            continue
        place = (m.host, info.key, info.gpu_model)
        by_device = values.get(place)
        if by_device is None:
            by_device = values[place] = {}
            if (info.key, info.gpu_model) not in infos:
                infos[(info.key, info.gpu_model)] = info._replace(key=median_key(info.key))
        device_values = by_device.get(m.device)
        if device_values is None:
            by_device[m.device] = [m.value]
        else:
            device_values.append(m.value)
        if m.cv is not None:
            cvs[place].append(m.cv)
    medians = []
    for (host, key, model), by_device in values.items():
        spread = cvs.get((host, key, model))
        medians.append((Measurement(host, NODE_MEDIAN, None, infos[(key, model)],
                                    small_median([small_median(v) for v in by_device.values()]),
                                    small_median(spread) if spread else None), len(by_device)))
    return medians


def small_median(values: Sequence[float]) -> float:
    """statistics.median of a short list, without its generality (a node's few figures, fifty
    thousand times a sweep). Raises IndexError for an empty one."""
    count = len(values)
    if count == 1:
        return values[0]
    ordered = sorted(values)
    half = count // 2
    return ordered[half] if count % 2 else (ordered[half - 1] + ordered[half]) / 2


def median_key(key: str) -> str:
    """The key of the node medians of the GPU key ``key``."""
    return key[:-1] + _MEDIAN_FIELD


def is_median_key(key: str) -> bool:
    return key.endswith(_MEDIAN_FIELD)


def gpu_key(key: str) -> str:
    """The GPU key whose node medians ``key`` (a median key) names."""
    return key[:-len(_MEDIAN_FIELD)] + "}"


def no_figures(model: str | None) -> Mapping[FloorKey, float]:
    """Node medians have no SKU figure (``references``' ``skus``): a figure's spread is one GPU's."""
    return {}
