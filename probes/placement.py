"""Host memory on the GPU's own socket, for the probes that copy between host and GPU.

Linux places a page on the NUMA node of the CPU that first touches it, and page-locking a
buffer (a pinned allocation) touches every page. A pinned buffer allocated while the thread runs
on the far socket makes every host<->device copy cross the link between sockets as well, and the
PCIe figure then measures that link too. NVML names the CPUs nearest each GPU
(``nvmlDeviceGetCpuAffinity``): the probe allocates its buffer with its thread on those.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from .nvml import NvmlUnavailable, open_nvml


class PlacementUnknown(Exception):
    """Why the GPU's nearest CPUs could not be found."""


@contextmanager
def near_gpu(gpu_uuid: str | None, nvml_module: ModuleType | None = None) -> Iterator[dict[str, Any]]:
    """Run the block with this thread on the GPU's nearest CPUs (those this process may use),
    then give the thread its CPUs back. Yields the record details that say where it ran:
    ``host_cpus`` ("0-55,112-167"), or ``host_cpus_unset`` with the reason it stayed where it was
    (the figure is still measured, and the reason travels with it)."""
    allowed = frozenset(os.sched_getaffinity(0))
    try:
        local = nearest_cpus(gpu_uuid, nvml_module)
    except PlacementUnknown as error:
        yield {"host_cpus_unset": str(error)}
        return
    chosen = local & allowed
    if not chosen:
        yield {"host_cpus_unset": f"none of the GPU's CPUs ({cpu_ranges(local)}) may be used by this process "
                                  f"(allowed: {cpu_ranges(allowed)})"}
        return
    os.sched_setaffinity(0, chosen)
    try:
        yield {"host_cpus": cpu_ranges(chosen)}
    finally:
        os.sched_setaffinity(0, allowed)


def nearest_cpus(gpu_uuid: str | None, nvml_module: ModuleType | None = None) -> frozenset[int]:
    """The CPUs NVML names nearest the GPU. Raises PlacementUnknown saying why it cannot tell."""
    if gpu_uuid is None:
        raise PlacementUnknown("the GPU has no UUID to find it by in NVML")
    try:
        with open_nvml(nvml_module) as nvml:
            try:
                cpus = nvml.cpu_affinity(nvml.handle(gpu_uuid), os.cpu_count() or 1)
            except nvml.module.NVMLError as error:
                raise PlacementUnknown(f"NVML cannot tell the GPU's CPUs ({nvml.error_name(error)})") from error
    except NvmlUnavailable as error:
        raise PlacementUnknown(str(error)) from error
    if not cpus:
        raise PlacementUnknown("NVML named no CPU near the GPU")
    return cpus


def cpu_ranges(cpus: Iterable[int]) -> str:
    """CPU numbers as Linux lists them: ``0-55,112-167``."""
    spans: list[list[int]] = []
    for cpu in sorted(cpus):
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(str(first) if first == last else f"{first}-{last}" for first, last in spans)
