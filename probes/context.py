"""What every probe is given: the user's options and a deadline it must finish within."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from .catalog import DTYPES


@dataclass(frozen=True)
class Deadline:
    """A point on the monotonic clock; probes poll it between samples."""

    at_monotonic_s: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def left_s(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.at_monotonic_s - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.at_monotonic_s

    def sooner(self, seconds: float) -> Deadline:
        """The earlier of this deadline and ``seconds`` from now."""
        return Deadline(min(self.at_monotonic_s, time.monotonic() + seconds))


@dataclass(frozen=True)
class ProbeContext:
    """Options shared by every probe.

    ``duration_s`` is how long the timed part of a load probe runs (seconds);
    ``max_gpu_mem_mib`` caps the device memory one probe may take on one GPU (None: no cap
    beyond what is free); ``sequential`` runs GPUs one at a time instead of all at once;
    ``kernel_dir`` is where the CUDA sources of ``cuda_kernels/`` lie.
    """

    duration_s: float = 1.0
    max_gpu_mem_mib: int | None = None
    dtype: str = "bf16"
    sequential: bool = False
    kernel_dir: str | None = None
    deadline: Deadline = field(default_factory=lambda: Deadline.after(600.0))

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {self.dtype!r}")
        if self.duration_s <= 0:
            raise ValueError("duration must be positive (seconds)")
        if self.max_gpu_mem_mib is not None and self.max_gpu_mem_mib <= 0:
            raise ValueError("max GPU memory must be a positive number of MiB")

    def with_deadline(self, deadline: Deadline) -> ProbeContext:
        return replace(self, deadline=deadline)
