"""How large a probe's device buffers may be, given free memory and the user's cap.

During a job's mitigation pause the paused job still holds most of the GPU's memory, so a
probe takes only what is free, minus headroom, and never more than ``--max-gpu-mem``.
It refuses (``MemoryRefusal``) rather than allocate past that.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from .catalog import SIZING

MIB = 1 << 20
# Headroom left untouched for the allocator's fragmentation and for whatever else shares
# the GPU: at least this much, or this share of the free memory, whichever is larger (catalog.json).
HEADROOM_MIN_BYTES = SIZING.headroom_min_mib * MIB
HEADROOM_FRACTION = SIZING.headroom_fraction

Size = TypeVar("Size")


class MemoryRefusal(Exception):
    """The probe will not run: what it needs does not fit. The message says the figures."""


@dataclass(frozen=True)
class MemoryBudget:
    """Free device memory (bytes) as torch/NVML report it, and the user's cap (bytes, or None)."""

    free_bytes: int
    cap_bytes: int | None = None

    @classmethod
    def from_mib_cap(cls, free_bytes: int, max_gpu_mem_mib: int | None) -> MemoryBudget:
        cap = None if max_gpu_mem_mib is None else max_gpu_mem_mib * MIB
        return cls(free_bytes=free_bytes, cap_bytes=cap)

    @property
    def headroom_bytes(self) -> int:
        return max(HEADROOM_MIN_BYTES, int(self.free_bytes * HEADROOM_FRACTION))

    @property
    def usable_bytes(self) -> int:
        """Bytes a probe may allocate: free minus headroom, then capped; never negative."""
        usable = max(0, self.free_bytes - self.headroom_bytes)
        if self.cap_bytes is not None:
            usable = min(usable, self.cap_bytes)
        return usable

    def describe(self) -> str:
        """The figures in MiB, for a refusal message."""
        text = (f"{self.usable_bytes // MIB} MiB usable "
                f"(free {self.free_bytes // MIB} MiB less {self.headroom_bytes // MIB} MiB headroom")
        if self.cap_bytes is not None:
            text += f", capped at {self.cap_bytes // MIB} MiB by --max-gpu-mem"
        return text + ")"


def choose_size(candidates: Sequence[Size], bytes_needed: Callable[[Size], int],
                budget: MemoryBudget, what: str) -> Size:
    """The first of ``candidates`` (largest first) whose ``bytes_needed`` fits the budget.

    Raises MemoryRefusal naming ``what``, the smallest need and the budget when none fits.
    """
    for candidate in candidates:
        if bytes_needed(candidate) <= budget.usable_bytes:
            return candidate
    smallest = min(bytes_needed(candidate) for candidate in candidates)
    raise MemoryRefusal(
        f"{what} needs at least {_ceil_mib(smallest)} MiB of GPU memory; {budget.describe()}")


def _ceil_mib(size_bytes: int) -> int:
    return -(-size_bytes // MIB)
