"""Which GPU a record names: NVML's index, UUID and PCI bus id, never CUDA's renumbered index.

The torch probes name a GPU ``cuda:N``, numbered over the GPUs CUDA can use: after a GPU is
lost the rest move down one, so ``cuda:4`` may be NVML's GPU 5, and ``nvidia-smi -i 4`` would
test a healthy GPU. Telemetry names GPUs ``gpu:N`` by NVML's index. A finding names the GPU as
an operator acts on it (NVML's index, which nvidia-smi, dcgmi and reset commands take), its UUID
and bus id; CUDA's index is only a detail of the evidence.

Where it is learnt, most trusted first: the facts' ``gpus`` map (each ``cuda:N`` with its NVML
index, UUID and bus id, as the node saw both), telemetry (``gpu:N`` with its UUID and bus id),
and the UUID a record carries. A ``cuda:N`` with none of them keeps N only where nothing says
CUDA renumbered (torch counts as many GPUs as NVML, or NVML did not count); otherwise its NVML
index is unknown (None), never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..records import device_index


@dataclass(frozen=True)
class GpuIdentity:
    """One GPU as findings name it: ``nvml_index`` (None: unknown), ``gpu_uuid``, ``pci_bus_id``,
    and ``cuda_index``, torch's number for it on this run (None: torch does not see it)."""

    nvml_index: int | None
    gpu_uuid: str | None = None
    pci_bus_id: str | None = None
    cuda_index: int | None = None

    def renumbered_note(self) -> str | None:
        """``CUDA numbers it cuda:4 on this run`` where CUDA's number differs from NVML's, else None."""
        if self.cuda_index is None or self.cuda_index == self.nvml_index:
            return None
        if self.nvml_index is None:
            return f"CUDA numbers it cuda:{self.cuda_index} on this run; its NVML index is unknown"
        return f"CUDA numbers it cuda:{self.cuda_index} on this run"


NO_GPU = GpuIdentity(None)


class HostGpus:
    """The GPUs of one host, found by the device label and UUID a record gives."""

    def __init__(self, facts: Mapping[str, Any]) -> None:
        self._by_uuid: dict[str, GpuIdentity] = {}
        self._by_cuda: dict[int, GpuIdentity] = {}
        self._by_nvml: dict[int, GpuIdentity] = {}
        self._renumbered = _renumbered(facts)
        for entry in facts.get("gpus") or ():
            if isinstance(entry, Mapping) and isinstance(entry.get("cuda_index"), int):
                self._add_mapped(entry)

    def _add_mapped(self, entry: Mapping[str, Any]) -> None:
        nvml = entry.get("nvml_index")
        identity = GpuIdentity(nvml if isinstance(nvml, int) else None, _text(entry.get("gpu_uuid")),
                               _text(entry.get("pci_bus_id")), int(entry["cuda_index"]))
        self._by_cuda[identity.cuda_index or 0] = identity
        if identity.gpu_uuid:
            self._by_uuid[identity.gpu_uuid] = identity
        if identity.nvml_index is not None:
            self._by_nvml[identity.nvml_index] = identity

    def add_nvml(self, nvml_index: int | None, gpu_uuid: str, pci_bus_id: str | None) -> None:
        """What telemetry says of GPU ``gpu:<nvml_index>``; the facts' map, where it names the
        GPU, keeps its CUDA index."""
        known = self._by_uuid.get(gpu_uuid)
        if known is not None and known.nvml_index is not None and (known.pci_bus_id or not pci_bus_id):
            return
        cuda = known.cuda_index if known is not None else None
        nvml = known.nvml_index if known is not None and known.nvml_index is not None else nvml_index
        identity = GpuIdentity(nvml, gpu_uuid, (known.pci_bus_id if known else None) or pci_bus_id, cuda)
        self._by_uuid[gpu_uuid] = identity
        if nvml is not None:
            self._by_nvml[nvml] = identity
        if cuda is not None:
            self._by_cuda[cuda] = identity

    def of(self, device: object, gpu_uuid: str | None = None) -> GpuIdentity:
        """The GPU ``device`` (``cuda:N`` or ``gpu:N``) and ``gpu_uuid`` name; NO_GPU for a host-side
        device. A UUID the node gave decides over the label."""
        label = str(device)
        index = device_index(label)
        if index is None:
            return NO_GPU
        known = self._by_uuid.get(gpu_uuid) if gpu_uuid else None
        if label.startswith("gpu:"):
            found = known or self._by_nvml.get(index)
            return found if found is not None else GpuIdentity(index, gpu_uuid)
        found = known or self._by_cuda.get(index)
        if found is not None:
            cuda = found.cuda_index if found.cuda_index is not None else index
            return GpuIdentity(found.nvml_index, found.gpu_uuid or gpu_uuid, found.pci_bus_id, cuda)
        return GpuIdentity(None if self._renumbered else index, gpu_uuid, None, index)


def _renumbered(facts: Mapping[str, Any]) -> bool:
    """True where the facts say CUDA sees fewer GPUs than NVML counts, so ``cuda:N`` may not be
    NVML's GPU N."""
    torch, nvml = facts.get("gpu_count"), facts.get("nvml_gpu_count")
    return isinstance(torch, int) and isinstance(nvml, int) and torch != nvml


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
