"""The state of a simulated node, what its records are drawn from: per-GPU speed, clock-event and
link figures, which GPUs NVML and torch see, which probes fail. gpudiag/sim/fleet.py derives it
from the fleet file; nothing here knows of faults.

GPUs are numbered as on a real node: telemetry labels the GPUs NVML lists ``gpu:<NVML index>``;
the torch probes label the GPUs CUDA can use ``cuda:<n>``, numbered 0.. in bus order without the
lost ones (CUDA renumbers), so a GPU keeps its UUID but may change its ``cuda:`` number.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from ..analysis.sku import Sku
from .memerrors import MemoryErrors
from .nicports import PortFault

# PCI buses of the eight GPUs of an HGX baseboard, in NVML order.
# The probes that make a CUDA context on a GPU, and what CUDA says when the GPU is in
# exclusive-process mode and another process (a paused job) holds it.
CUDA_PROBES = ("gemm", "membw", "p2p", "pcie", "smclock")
EXCLUSIVE_BUSY = "CUDA error: CUDA-capable device(s) is/are busy or unavailable"
PCI_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


@dataclass(frozen=True)
class Noise:
    """Relative spread (coefficient of variation) of measurements across GPUs and runs."""

    gemm_cv: float = 0.01
    membw_cv: float = 0.01
    link_cv: float = 0.02


@dataclass(frozen=True)
class Throttle:
    """An NVML clocks-event reason (``bit``) that slows a GPU's SM clock to ``factor`` × maximum.

    It is active in ``share`` (0 < share ≤ 1) of the NVML samples taken under load; with share
    1 it is also active at idle. ``full_load_only``: it acts only while every GPU of the node is
    loaded at once (a concurrent GEMM or memory copy), never at idle or with one GPU loaded.
    """

    bit: int
    factor: float = 1.0
    share: float = 1.0
    full_load_only: bool = False

    def acts(self, all_loaded: bool) -> bool:
        """Whether it acts in a run with every GPU loaded (``all_loaded``) or one at a time."""
        return all_loaded or not self.full_load_only

    @property
    def acts_at_idle(self) -> bool:
        return self.share >= 1.0 and not self.full_load_only


@dataclass(frozen=True)
class GpuState:
    """One simulated GPU: identity, where NVML and torch see it, and the factors its
    measurements are scaled by (1.0: healthy).

    ``index`` is its slot on the baseboard (the fleet file's GPU number; identity and noise
    follow it); ``nvml_index`` its NVML number; ``cuda_index`` its torch number, None when
    ``lost`` (NVML lists it, but it answers nothing and torch cannot see it).
    ``compute_factor`` scales GEMM alone; ``throttles`` slow the SM clock (and with it GEMM,
    copies and power); ``pcie_width`` is the trained link width (lanes); ``nvlinks_down`` the
    NVLink indices that are down; ``pcie_replays`` its PCIe replay counter and ``nvlink_errors``
    its NVLink error counters that read other than 0: (link, counter key, count);
    ``recovery_action`` the action NVML says the GPU needs (nvmlDeviceGpuRecoveryAction_t, 0: none);
    ``job_mib`` the memory (MiB) a paused job holds on it, and ``exclusive`` whether it is in
    exclusive-process compute mode with that job's process on it (no other context may be made).
    """

    index: int
    gpu_uuid: str
    serial: str
    pci_bus_id: str
    nvml_index: int
    cuda_index: int | None
    compute_factor: float = 1.0
    throttles: tuple[Throttle, ...] = ()
    pcie_width: int = 16
    nvlinks_down: frozenset[int] = frozenset()
    lost: bool = False
    pcie_replays: int = 0
    nvlink_errors: tuple[tuple[int, str, int], ...] = ()
    recovery_action: int = 0
    job_mib: int = 0
    exclusive: bool = False
    memory_errors: MemoryErrors = MemoryErrors()  # what NVML's ECC and row-remap readings show
    # ``slow_p2p``: (the other GPU's slot, factor) of each pair of its that runs slower
    p2p_factors: tuple[tuple[int, float], ...] = ()

    def p2p_factor(self, other: GpuState) -> float:
        """What its pair with ``other`` runs at (1.0: healthy), from either end's ``slow_p2p``."""
        factors = [factor for slot, factor in self.p2p_factors if slot == other.index]
        factors += [factor for slot, factor in other.p2p_factors if slot == self.index]
        return min(factors, default=1.0)

    @property
    def device(self) -> str:
        """The torch probes' label, ``cuda:<n>``. Raises ValueError for a lost GPU (torch has none)."""
        if self.cuda_index is None:
            raise ValueError(f"GPU {self.gpu_uuid} is lost: torch does not see it")
        return f"cuda:{self.cuda_index}"

    @property
    def idle_throttle_bits(self) -> int:
        """The clocks-event reason bits active while the GPU idles."""
        return _bits(t for t in self.throttles if t.acts_at_idle)

    def acting_throttles(self, all_loaded: bool) -> tuple[Throttle, ...]:
        """The throttles acting under load: every GPU loaded at once (``all_loaded``) or this one alone."""
        return tuple(t for t in self.throttles if t.acts(all_loaded))

    def clock_factor(self, all_loaded: bool) -> float:
        """The mean SM clock under load over the maximum: each acting throttle slows its share of the time."""
        factor = 1.0
        for throttle in self.acting_throttles(all_loaded):
            factor *= 1.0 - throttle.share * (1.0 - throttle.factor)
        return factor


def _bits(throttles: Iterable[Throttle]) -> int:
    mask = 0
    for throttle in throttles:
        mask |= throttle.bit
    return mask


@dataclass(frozen=True)
class ProbeFailure:
    """A probe whose records for GPU slot ``gpu`` (every GPU when None; for p2p None means the
    whole probe) are ``error`` records saying ``reason``."""

    probe: str
    gpu: int | None
    reason: str


@dataclass(frozen=True)
class XidLog:
    """Xid ``code`` logged ``count`` times for the GPU at ``pci_bus_id`` (NVML's spelling; it may be
    gone from the bus), with the driver's ``message`` after the code."""

    pci_bus_id: str
    code: int
    count: int
    message: str


@dataclass(frozen=True)
class NodeState:
    """One simulated node: the GPUs on its PCI bus in NVML order, software, ``host_factor`` (host
    CPU/memory speed, 1.0: healthy), the probes that fail on this run, and ``nvml_link_slots``:
    NVML lists at least this many NVLink slots per GPU (the unwired ones inactive); ``xids`` the
    kernel log's Xid lines, and ``kernel_log_unreadable`` why the log cannot be read (None: it can);
    ``platform`` the board's DMI product name (None: unreadable)."""

    host: str
    sku: Sku
    gpus: tuple[GpuState, ...]
    gpu_memory_mib: int
    driver: str
    cuda: str
    torch: str
    noise: Noise
    host_factor: float = 1.0
    probe_failures: tuple[ProbeFailure, ...] = ()
    nvml_link_slots: int = 0
    xids: tuple[XidLog, ...] = ()
    kernel_log_unreadable: str | None = None
    platform: str | None = None
    nic_ports: tuple[PortFault, ...] = ()  # what nic_port faults change (gpudiag/sim/nicports.py)
    hostname: str = ""  # what its facts say its hostname is (an impostor's: another host's); "": ``host``

    @property
    def cuda_gpus(self) -> tuple[GpuState, ...]:
        """The GPUs torch sees, in ``cuda:`` order."""
        return tuple(gpu for gpu in self.gpus if not gpu.lost)

    def free_mib(self, gpu: GpuState) -> int:
        """The memory (MiB) free on ``gpu`` before any context of ours: what a paused job left."""
        return self.gpu_memory_mib - gpu.job_mib

    def failure(self, probe: str, gpu: GpuState | None) -> str | None:
        """The error reason of ``probe`` on ``gpu`` (None: the probe as a whole), or None when it works.
        A CUDA probe on a GPU in exclusive-process mode held by a paused job cannot make its context."""
        if gpu is not None and gpu.exclusive and probe in CUDA_PROBES:
            return EXCLUSIVE_BUSY
        for failure in self.probe_failures:
            if failure.probe == probe and (failure.gpu is None or (gpu is not None and failure.gpu == gpu.index)):
                return failure.reason
        return None


def gpu_identity(seed: int, host: str, index: int) -> GpuState:
    """A healthy GPU in slot ``index`` with a UUID, serial and PCI bus id that depend only on seed,
    host and index; NVML and torch number it ``index``."""
    digest = hashlib.sha256(f"{seed}:{host}:gpu{index}".encode()).hexdigest()
    gpu_uuid = f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
    serial = str(int(digest[32:48], 16))[:13].rjust(13, "1")
    bus = PCI_BUSES[index] if index < len(PCI_BUSES) else (0x18 + 0x11 * index) % 256
    return GpuState(index=index, gpu_uuid=gpu_uuid, serial=serial, pci_bus_id=f"00000000:{bus:02X}:00.0",
                    nvml_index=index, cuda_index=index)


def number_gpus(on_bus: Sequence[GpuState]) -> tuple[GpuState, ...]:
    """The GPUs on the bus (slot order) numbered as NVML and CUDA number them: NVML 0.. over all
    of them, CUDA 0.. over those not lost."""
    numbered = []
    cuda_index = 0
    for nvml_index, gpu in enumerate(on_bus):
        numbered.append(replace(gpu, nvml_index=nvml_index, cuda_index=None if gpu.lost else cuda_index))
        cuda_index += 0 if gpu.lost else 1
    return tuple(numbered)


# A random source per record: ``draw(label)`` is seeded by fleet seed, host, call and label.
Draw = Callable[[str], random.Random]
