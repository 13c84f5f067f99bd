"""Facts about the node that decide which results may be compared with which.

GPU model and memory, driver, CUDA, torch and NCCL versions go into the baseline key; CPU,
memory and load explain a host-side (``slow_node``) slowdown. Three GPU counts tell a GPU that
fell off the bus from one torch cannot use: ``pci_gpu_count`` (NVIDIA GPUs on the PCI bus, from
sysfs), ``nvml_gpu_count`` (what NVML counts, lost GPUs included) and ``gpu_count`` (torch's).

``gpus`` says which GPU each of torch's ``cuda:N`` is: its NVML index, UUID and PCI bus id. CUDA
numbers only the GPUs it can use, so after a GPU is lost the rest move down one: the controller
names GPUs by NVML's index (what ``nvidia-smi -i`` takes), never by CUDA's. ``platform`` is the
board's DMI product name (readable without root): GPU counts are compared only within one.
``lldp`` (only where lldpd runs, probes/lldp.py) names the switch port at the other end of each
link the node heard LLDP on, and the rail whose RDMA device owns the link.
"""

from __future__ import annotations

import os
import platform
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from .context import ProbeContext
from .devices import CudaDevice, DeviceUnavailable, cuda_devices, import_torch
from .lldp import read_lldp
from .nvml import NvmlUnavailable, open_nvml
from .records import Record

PROBE = "facts"
METRIC = "gpu_count"
MIB = 1 << 20
SYSFS_ROOT = "/sys"
NVIDIA_PCI_VENDOR = "0x10de"
# PCI classes of a GPU: VGA-compatible display controller (0x0300), 3D controller (0x0302).
GPU_PCI_CLASSES = ("0x0300", "0x0302")
# What firmware writes into the DMI product name when the vendor left it unset: no platform.
DMI_PLACEHOLDERS = frozenset({"", "to be filled by o.e.m.", "system product name", "default string", "not specified",
                              "not applicable", "none", "unknown", "0123456789", "product name"})
PLATFORM_CHARS = 128
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


def count_pci_gpus(sysfs_root: str | Path = SYSFS_ROOT) -> int | None:
    """NVIDIA GPUs on the PCI bus: devices under ``<sysfs_root>/bus/pci/devices`` whose ``vendor``
    is 0x10de and whose ``class`` is a display or 3D controller. None when that folder is
    unreadable (no sysfs); a device whose files cannot be read is not counted."""
    try:
        devices = list((Path(sysfs_root) / "bus" / "pci" / "devices").iterdir())
    except OSError:
        return None
    return sum(1 for device in devices if _is_nvidia_gpu(device))


def _is_nvidia_gpu(device: Path) -> bool:
    try:
        vendor = (device / "vendor").read_text().strip().lower()
        pci_class = (device / "class").read_text().strip().lower()
    except OSError:
        return False  # a device gone while we looked, or one we may not read
    return vendor == NVIDIA_PCI_VENDOR and pci_class.startswith(GPU_PCI_CLASSES)


def count_nvml_gpus(nvml_module: ModuleType | None = None) -> int | None:
    """The GPUs NVML counts (nvmlDeviceGetCount: a lost GPU still counts); None when NVML is
    unavailable or cannot count. ``nvml_module`` replaces pynvml (a test double)."""
    inventory = nvml_inventory(nvml_module)
    return None if inventory is None else len(inventory)


def nvml_inventory(nvml_module: ModuleType | None = None) -> list[tuple[str | None, str | None]] | None:
    """(UUID, PCI bus id) of every GPU NVML counts, by NVML index; (None, None) for one NVML
    cannot give a handle for (lost). None when NVML is unavailable or cannot count."""
    try:
        with open_nvml(nvml_module) as nvml:
            try:
                count = nvml.device_count()
            except nvml.NVMLError:
                return None
            return [_nvml_identity(nvml, index) for index in range(count)]
    except NvmlUnavailable:
        return None


def _nvml_identity(nvml: Any, index: int) -> tuple[str | None, str | None]:
    try:
        handle = nvml.handle(None, index)
    except nvml.NVMLError:
        return None, None  # lost: CUDA cannot see it either
    found = []
    for read in (nvml.uuid, nvml.pci_bus_id):
        try:
            found.append(read(handle))
        except nvml.NVMLError:
            found.append(None)
    return found[0], found[1]


def map_gpus(devices: list[CudaDevice], inventory: list[tuple[str | None, str | None]] | None) -> list[dict[str, Any]]:
    """Which GPU each of torch's devices is: ``cuda_index``, ``nvml_index`` (None where NVML does
    not know its UUID or bus id), ``gpu_uuid`` and ``pci_bus_id`` (NVML's where torch's is unknown).
    Found by UUID first, then by bus id (CUDA_VISIBLE_DEVICES may reorder or hide GPUs)."""
    by_uuid = {uuid: index for index, (uuid, _) in enumerate(inventory or ()) if uuid}
    by_bus = {bus.upper(): index for index, (_, bus) in enumerate(inventory or ()) if bus}
    mapped = []
    for device in devices:
        index = by_uuid.get(device.gpu_uuid or "")
        if index is None and device.pci_bus_id:
            index = by_bus.get(device.pci_bus_id.upper())
        uuid, bus = inventory[index] if inventory is not None and index is not None else (None, None)
        mapped.append({"cuda_index": device.index, "nvml_index": index, "gpu_uuid": device.gpu_uuid or uuid,
                       "pci_bus_id": bus or device.pci_bus_id})
    return mapped


def read_platform(sysfs_root: str | Path = SYSFS_ROOT) -> str | None:
    """The board's DMI product name (``<sysfs_root>/class/dmi/id/product_name``, world-readable),
    cut to PLATFORM_CHARS printable characters; None where it is unreadable or a placeholder the
    firmware left (``To be filled by O.E.M.``)."""
    try:
        raw = (Path(sysfs_root) / "class" / "dmi" / "id" / "product_name").read_bytes()[:4 * PLATFORM_CHARS]
    except OSError:
        return None
    text = "".join(c if c.isprintable() else " " for c in raw.decode("utf-8", errors="replace"))
    text = " ".join(text.split())[:PLATFORM_CHARS]
    return None if text.lower() in DMI_PLACEHOLDERS else text


def run(ctx: ProbeContext, *, sysfs_root: str | Path = SYSFS_ROOT, nvml_module: ModuleType | None = None,
        lldpctl: str = "lldpctl") -> Iterator[Record]:
    """Yield one record: the GPU count (torch's) as value, every fact in ``details``.

    ``sysfs_root``, ``nvml_module`` and ``lldpctl`` replace /sys, pynvml and lldpd's lldpctl
    (test doubles).
    """
    inventory = nvml_inventory(nvml_module)
    torch_facts, devices = _torch_facts()
    facts = {**_system_facts(), "platform": read_platform(sysfs_root), "pci_gpu_count": count_pci_gpus(sysfs_root),
             "nvml_gpu_count": None if inventory is None else len(inventory), **torch_facts,
             "gpus": map_gpus(devices, inventory)}
    lldp = read_lldp({device.index: device.pci_bus_id for device in devices if device.pci_bus_id}, len(devices),
                     str(sysfs_root), lldpctl, topology_timeout_s=min(15.0, max(1.0, ctx.deadline.left_s())))
    if lldp is not None:
        facts["lldp"] = lldp
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


def _torch_facts() -> tuple[dict[str, Any], list[CudaDevice]]:
    try:
        torch = import_torch()
    except DeviceUnavailable as missing:
        return {"torch_version": None, "torch_unavailable": str(missing), "cuda_version": None,
                "nccl_version": None, "gpu_count": 0, "gpu_model": None, "gpu_memory_mib": None}, []
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
    }, devices


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
