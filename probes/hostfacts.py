"""Facts about the node that decide which results may be compared with which.

GPU model and memory, driver, CUDA, torch and NCCL versions go into the baseline key; CPU,
memory and load explain a host-side (``slow_node``) slowdown.
"""

from __future__ import annotations

import os
import platform
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .context import ProbeContext
from .devices import DeviceUnavailable, cuda_devices, import_torch
from .records import Record

PROBE = "facts"
METRIC = "gpu_count"
MIB = 1 << 20
_DRIVER_VERSION = re.compile(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)")


def parse_cpu_model(cpuinfo: str) -> str | None:
    """The first ``model name`` of /proc/cpuinfo (x86), or its ``Model``/``CPU part`` (Arm)."""
    for key in ("model name", "Model", "Hardware"):
        match = re.search(rf"^{key}\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
        if match:
            return match.group(1).strip()
    return None


def parse_meminfo_mib(meminfo: str, field: str) -> int | None:
    """A /proc/meminfo field (given there in kB) in MiB, or None when absent."""
    match = re.search(rf"^{re.escape(field)}:\s+(\d+)\s*kB", meminfo, re.MULTILINE)
    return int(match.group(1)) * 1024 // MIB if match else None


def parse_driver_version(proc_version: str) -> str | None:
    """The NVIDIA kernel module version from /proc/driver/nvidia/version, e.g. ``535.183.01``."""
    match = _DRIVER_VERSION.search(proc_version)
    return match.group(1) if match else None


def parse_os_release(os_release: str) -> str | None:
    """PRETTY_NAME of /etc/os-release."""
    match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?$', os_release, re.MULTILINE)
    return match.group(1) if match else None


def run(ctx: ProbeContext) -> Iterator[Record]:
    """Yield one record: the GPU count as value, every fact in ``details``."""
    facts = {**_system_facts(), **_torch_facts()}
    yield Record(probe=PROBE, device="host", metric=METRIC, value=facts["gpu_count"], unit="count",
                 details=facts)


def _system_facts() -> dict[str, Any]:
    meminfo = _read("/proc/meminfo")
    try:
        usable_cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable_cpus = os.cpu_count()
    return {
        "hostname": socket.gethostname(),
        "cpu_model": parse_cpu_model(_read("/proc/cpuinfo")) or platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "cpu_count_usable": usable_cpus,
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "memory_total_mib": parse_meminfo_mib(meminfo, "MemTotal"),
        "memory_available_mib": parse_meminfo_mib(meminfo, "MemAvailable"),
        "kernel": platform.release(),
        "os": parse_os_release(_read("/etc/os-release")),
        "python_version": platform.python_version(),
        "driver_version": parse_driver_version(_read("/proc/driver/nvidia/version")),
    }


def _torch_facts() -> dict[str, Any]:
    try:
        torch = import_torch()
    except DeviceUnavailable as missing:
        return {"torch_version": None, "torch_unavailable": str(missing), "cuda_version": None,
                "nccl_version": None, "gpu_count": 0, "gpu_model": None, "gpu_memory_mib": None}
    devices = cuda_devices(torch)
    models = sorted({device.name for device in devices})
    return {
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "nccl_version": _nccl_version(torch) if devices else None,
        "gpu_count": len(devices),
        "gpu_model": models[0] if len(models) == 1 else (", ".join(models) or None),
        "gpu_memory_mib": devices[0].total_memory_bytes // MIB if devices else None,
        "gpu_uuids": [device.gpu_uuid for device in devices],
    }


def _nccl_version(torch: Any) -> str | None:
    try:
        version = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):  # a torch build without NCCL
        return None
    return ".".join(str(part) for part in version) if isinstance(version, tuple) else str(version)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""
