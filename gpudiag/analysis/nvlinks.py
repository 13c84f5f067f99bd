"""Which NVLinks a GPU wires, so that only a wired link is ever called ``down``.

NVML lists link slots up to NVML_NVLINK_MAX_LINKS and may read the slots a board does not wire
as inactive: a PCIe card without an NVLink bridge reads every slot inactive, which is not a link
down. A link is judged where it is wired:

- the SKU table (gpudiag/data/sku.json) says how many links the model wires, links 0..n-1
  (0: none; an H100 SXM wires 18, an A100 SXM 12);
- for a model the table lacks, peers decide: a link counts where this GPU has it up, or where
  most of the *other* GPUs of its model in this sweep that list it have it up. A GPU whose model
  has no other GPU in the sweep has only its up links judged (nothing to tell an unwired slot
  from a dead link).

A GPU whose model is not known at all (no facts, no NVML name) keeps every link NVML lists.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping

from ..rules import WIRED_BY_PEERS, WIRED_BY_SKU, GpuTelemetry, NvlinkWiring

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
    wiring: dict[tuple[str, str], NvlinkWiring] = {}
    for model, gpus in by_model.items():
        count = wired(model)
        if count is None:
            wiring.update(_peer_wiring(gpus))
            continue
        by_sku = NvlinkWiring(frozenset(range(count)), WIRED_BY_SKU)
        wiring.update({(gpu.host, gpu.gpu_uuid): by_sku for gpu in gpus})
    return {host: {uuid: _wired(gpu, wiring.get((host, uuid))) for uuid, gpu in gpus.items()}
            for host, gpus in telemetry.items()}


def _wired(gpu: GpuTelemetry, wiring: NvlinkWiring | None) -> GpuTelemetry:
    if wiring is None:
        return gpu
    # Positional, not dataclasses.replace: a 10,000-node sweep has 80,000 GPUs to copy.
    return GpuTelemetry(gpu.host, gpu.gpu_uuid, gpu.nvml_index, gpu.readings, gpu.under_load, gpu.pci_bus_id,
                        gpu.gpu_model, gpu.driver, wiring)


def _peer_wiring(gpus: list[GpuTelemetry]) -> dict[tuple[str, str], NvlinkWiring]:
    """The wiring of each GPU of one model the SKU table lacks, judged against the others."""
    states = {(gpu.host, gpu.gpu_uuid): _states(gpu) for gpu in gpus}
    listed: Counter[int] = Counter()
    up: Counter[int] = Counter()
    for links in states.values():
        for link, is_up in links.items():
            listed[link] += 1
            up[link] += is_up
    wiring = {}
    for where, links in states.items():
        judged = set()
        peers: dict[int, tuple[int, int]] = {}
        for link, is_up in links.items():
            others_up, others = up[link] - is_up, listed[link] - 1
            if is_up or 2 * others_up > others:
                judged.add(link)
            if not is_up:
                peers[link] = (others_up, others)
        wiring[where] = NvlinkWiring(frozenset(judged), WIRED_BY_PEERS, peers)
    return wiring


def _states(gpu: GpuTelemetry) -> dict[int, bool]:
    """Link index -> whether it is up, for every link NVML listed with an index."""
    return {int(link["link"]): link.get("state") == "up" for link in gpu.nvlinks()
            if isinstance(link.get("link"), int) and not isinstance(link.get("link"), bool)}
