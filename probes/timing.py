"""Timed repetition of a piece of work, on the CPU clock or on a CUDA stream.

A *sample* is one timed batch of ``iterations`` runs of the work; its value is seconds per
run. Batching keeps event and launch overhead well below the work itself.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from types import ModuleType

from .context import Deadline

Work = Callable[[], object]
SampleTimer = Callable[[], float]

# A batch this long (seconds) makes timer resolution and launch overhead negligible.
TARGET_SAMPLE_S = 0.025


class DeadlineReached(Exception):
    """The deadline passed before a single sample was taken."""


def cpu_timer(work: Work, iterations: int) -> SampleTimer:
    """A timer of ``iterations`` runs of ``work`` on the monotonic clock; seconds per run."""

    def one_sample() -> float:
        start = time.perf_counter()
        for _ in range(iterations):
            work()
        return (time.perf_counter() - start) / iterations

    return one_sample


def cuda_timer(torch: ModuleType, device_index: int, work: Work, iterations: int) -> SampleTimer:
    """A timer of ``iterations`` runs of ``work`` between CUDA events on the device's current
    stream; seconds per run. The caller's thread must have ``device_index`` as current device."""
    stream = torch.cuda.current_stream(device_index)

    def one_sample() -> float:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        for _ in range(iterations):
            work()
        end.record(stream)
        end.synchronize()
        return start.elapsed_time(end) / 1000.0 / iterations

    return one_sample


def iterations_for(seconds_per_run: float, target_sample_s: float = TARGET_SAMPLE_S) -> int:
    """How many runs make one sample of about ``target_sample_s``; at least one."""
    if seconds_per_run <= 0:
        return 1
    return max(1, math.ceil(target_sample_s / seconds_per_run))


def sample_for(one_sample: SampleTimer, duration_s: float, deadline: Deadline,
               min_samples: int = 5, max_samples: int = 100_000) -> list[float]:
    """Take samples until ``duration_s`` has passed and ``min_samples`` are in, or the
    deadline or ``max_samples`` stops it. Returns the samples (seconds per run).

    Raises DeadlineReached if the deadline had passed before the first sample.
    """
    if deadline.expired():
        raise DeadlineReached("the probe's time budget ran out before its first sample")
    samples: list[float] = []
    started = time.monotonic()
    while len(samples) < max_samples and not deadline.expired():
        samples.append(one_sample())
        elapsed = time.monotonic() - started
        if elapsed >= duration_s and len(samples) >= min_samples:
            break
    return samples


def warm_up(work: Work, seconds: float, deadline: Deadline, synchronize: Callable[[], object]) -> float:
    """Run ``work`` for about ``seconds`` (clocks ramp, libraries pick kernels, caches fill).

    Returns the last observed seconds per run, measured after the first run, so callers can
    size their batches.
    """
    work()
    synchronize()
    runs = 0
    started = time.perf_counter()
    per_run = 0.0
    while not deadline.expired():
        work()
        synchronize()
        runs += 1
        elapsed = time.perf_counter() - started
        per_run = elapsed / runs
        if elapsed >= seconds:
            break
    return per_run
