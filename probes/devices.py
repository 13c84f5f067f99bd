"""Which compute devices this node has, as torch sees them, without assuming torch exists."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from types import ModuleType


class DeviceUnavailable(Exception):
    """torch or CUDA is missing; the message is the reason a probe reports as ``skipped``.

    A probe raises it before its first record; the runner turns it into that probe's one
    ``skipped`` record.
    """


@dataclass(frozen=True)
class CudaDevice:
    """One GPU as torch numbers it (after CUDA_VISIBLE_DEVICES)."""

    index: int
    name: str
    gpu_uuid: str | None
    total_memory_bytes: int
    pci_bus_id: str | None
    multiprocessor_count: int
    compute_capability: tuple[int, int]

    @property
    def label(self) -> str:
        """The device name used in records, e.g. ``cuda:3``."""
        return f"cuda:{self.index}"


def import_torch() -> ModuleType:
    """Import torch, or raise DeviceUnavailable saying it is not installed for this Python."""
    try:
        return importlib.import_module("torch")
    except ImportError as error:
        raise DeviceUnavailable(f"torch is not importable by this Python ({sys.executable}: {error}); give "
                                f"gpudiag --python the path of an interpreter that has torch") from error


def cuda_devices(torch: ModuleType) -> list[CudaDevice]:
    """Every CUDA device torch can use; an empty list on a machine without one."""
    if not torch.cuda.is_available():
        return []
    return [_describe(torch, index) for index in range(torch.cuda.device_count())]


def require_cuda_devices(torch: ModuleType, at_least: int = 1) -> list[CudaDevice]:
    """Like :func:`cuda_devices`, but raise DeviceUnavailable with fewer than ``at_least``."""
    devices = cuda_devices(torch)
    if not devices:
        raise DeviceUnavailable("no CUDA device is visible to torch on this machine")
    if len(devices) < at_least:
        raise DeviceUnavailable(f"needs at least {at_least} GPUs; this machine has {len(devices)} "
                                "visible to torch")
    return devices


def _describe(torch: ModuleType, index: int) -> CudaDevice:
    properties = torch.cuda.get_device_properties(index)
    raw_uuid = getattr(properties, "uuid", None)
    gpu_uuid = None
    if raw_uuid is not None:
        text = str(raw_uuid)
        gpu_uuid = text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"
    return CudaDevice(
        index=index,
        name=properties.name,
        gpu_uuid=gpu_uuid,
        total_memory_bytes=int(properties.total_memory),
        pci_bus_id=_pci_bus_id(properties),
        multiprocessor_count=int(properties.multi_processor_count),
        compute_capability=(int(properties.major), int(properties.minor)),
    )


def _pci_bus_id(properties: object) -> str | None:
    """``dddddddd:bb:dd.0`` as NVML writes it, when torch exposes the parts."""
    parts = [getattr(properties, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if any(part is None for part in parts):
        return None
    domain, bus, device = (int(part) for part in parts)
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"
