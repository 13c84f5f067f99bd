"""Which NVLinks a GPU wires, so that only a wired link is ever called ``down``.

NVML lists link slots up to NVML_NVLINK_MAX_LINKS and may read the slots a board does not wire
as inactive: a PCIe card without an NVLink bridge reads every slot inactive, which is not a link
down. A link is judged where it is wired:

- the SKU table (gpudiag/data/sku.json) says how many links the model wires, links 0..n-1
  (0: none; an H100 SXM wires 18, an A100 SXM 12);
- for a model the table lacks, peers decide: a link counts where this GPU has it up, or where
  most of the *other* GPUs of its model in this sweep that list it have it up (each host
  weighing once: a node printing a hundred GPUs cannot outvote the fleet). A GPU whose model
  has no other GPU in the sweep has only its up links judged (nothing to tell an unwired slot
  from a dead link).

A GPU whose model is not known at all (no facts, no NVML name) keeps every link NVML lists.
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping

from .rules import WIRED_BY_PEERS, WIRED_BY_SKU, GpuTelemetry, NvlinkWiring

# GPU model -> how many NVLinks it wires, or None for a model the SKU table lacks.
WiredLookup = Callable[[str | None], int | None]
Telemetry = Mapping[str, Mapping[str, GpuTelemetry]]


def with_wiring(telemetry: Telemetry, wired: WiredLookup) -> dict[str, dict[str, GpuTelemetry]]:
    """``telemetry`` (host -> GPU UUID -> GPU) with each GPU's ``nvlink_wiring`` set (see the
    module docstring); the order of hosts and GPUs is kept."""
    by_model: dict[str, list[GpuTelemetry]] = defaultdict(list)
    for gpus in telemetry.values():
        for gpu in gpus.values():
            if gpu.gpu_model:
                by_model[gpu.gpu_model].append(gpu)
    wiring: dict[tuple[str, str], NvlinkWiring | None] = {}
    for model, gpus in by_model.items():
        count = wired(model)
        if count is None:
            peers = _peer_wiring(gpus)
            wiring.update({(gpu.host, gpu.gpu_uuid): peers.get((gpu.host, gpu.gpu_uuid)) for gpu in gpus
                           if gpu.nvlink_wiring != peers.get((gpu.host, gpu.gpu_uuid))})
            continue
        by_sku = _sku_wiring(count)
        # A GPU wired so already (as each host was read: prewired, with this very object) is kept as it is.
        wiring.update({(gpu.host, gpu.gpu_uuid): by_sku for gpu in gpus
                       if gpu.nvlink_wiring is not by_sku and gpu.nvlink_wiring != by_sku})
    if not wiring:
        return {host: dict(gpus) for host, gpus in telemetry.items()}
    return {host: {uuid: _wired(gpu, wiring[(host, uuid)]) if (host, uuid) in wiring else gpu
                   for uuid, gpu in gpus.items()} for host, gpus in telemetry.items()}


def prewired(gpus: Mapping[str, GpuTelemetry], wired: WiredLookup) -> dict[str, GpuTelemetry]:
    """One host's GPUs with the wiring ``wired`` gives their model where it knows the model
    (``with_wiring`` keeps those as they are): done as each host is read, in the sweep's worker
    threads, so that the analysis after the last host copies none of 80,000 GPUs."""
    counts = {gpu.gpu_model: wired(gpu.gpu_model) for gpu in gpus.values() if gpu.gpu_model}
    return {uuid: gpu if counts.get(gpu.gpu_model) is None else _wired(gpu, _sku_wiring(counts[gpu.gpu_model]))
            for uuid, gpu in gpus.items()}


@functools.lru_cache(maxsize=64)
def _sku_wiring(count: int) -> NvlinkWiring:
    """Links 0..count-1, by the SKU table: one object for every GPU of such a model."""
    return NvlinkWiring(frozenset(range(count)), WIRED_BY_SKU)


def _wired(gpu: GpuTelemetry, wiring: NvlinkWiring | None) -> GpuTelemetry:
    """``gpu`` with ``wiring`` (None: every link NVML lists)."""
    if gpu.nvlink_wiring == wiring:
        return gpu
    # Positional, not dataclasses.replace: a 10,000-node sweep has 80,000 GPUs to copy.
    return GpuTelemetry(gpu.host, gpu.gpu_uuid, gpu.nvml_index, gpu.readings, gpu.under_load, gpu.pci_bus_id,
                        gpu.gpu_model, gpu.driver, wiring)


def _peer_wiring(gpus: list[GpuTelemetry]) -> dict[tuple[str, str], NvlinkWiring]:
    """The wiring of each GPU of one model the SKU table lacks, judged against the others. Each
    host weighs once: where its hosts have different numbers of GPUs of the model (one printing
    a hundred it claims to have), a GPU's say weighs 1 / (its host's GPUs of the model)."""
    states = {(gpu.host, gpu.gpu_uuid): _states(gpu) for gpu in gpus}
    per_host = Counter(gpu.host for gpu in gpus)
    equal = len(set(per_host.values())) == 1
    listed: Counter[int] = Counter()
    up: Counter[int] = Counter()
    listed_weight: dict[int, float] = defaultdict(float)
    up_weight: dict[int, float] = defaultdict(float)
    for (host, _), links in states.items():
        weight = 1 / per_host[host]
        for link, is_up in links.items():
            listed[link] += 1
            up[link] += is_up
            listed_weight[link] += weight
            up_weight[link] += weight * is_up
    wiring = {}
    for (host, uuid), links in states.items():
        judged = set()
        peers: dict[int, tuple[int, int]] = {}
        weight = 1 / per_host[host]
        for link, is_up in links.items():
            others_up, others = up[link] - is_up, listed[link] - 1
            most_up = 2 * others_up > others if equal else \
                2 * (up_weight[link] - weight * is_up) > (listed_weight[link] - weight) + _TOLERANCE
            if is_up or most_up:
                judged.add(link)
            if not is_up:
                peers[link] = (others_up, others)
        wiring[(host, uuid)] = NvlinkWiring(frozenset(judged), WIRED_BY_PEERS, peers)
    return wiring


# Weights are sums of 1/n: a tie is a tie within this.
_TOLERANCE = 1e-9


def _states(gpu: GpuTelemetry) -> dict[int, bool]:
    """Link index -> whether it is up, for every link NVML listed with an index."""
    return {int(link["link"]): link.get("state") == "up" for link in gpu.nvlinks()
            if isinstance(link.get("link"), int) and not isinstance(link.get("link"), bool)}
