"""smclock: the effective clock and FP32 FMA rate of every SM, to find one running slow.

A GEMM averages over all SMs, so one SM stuck at a low clock (or computing slower) costs a
synchronous job its speed yet hides in the total. ``cuda_kernels/sm_clock.cu`` runs one block
per SM and records which SM it ran on, the SM cycles and the wall nanoseconds it took; this
module compiles it on the node, launches it a few times on each GPU and reports:

- ``sm_clock`` (MHz): the median effective SM clock, with min/max/spread and the slowest SMs;
- ``sm_fma_rate_min_ratio`` (ratio): the slowest SM's FMA rate over the median SM's.

The probe measures FP32 FMAs whatever ``ctx.dtype`` says. Without a compiler it reports
``skipped``, never a pass.
"""

from __future__ import annotations

import ctypes
import os
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

from .catalog import SIZING
from .context import ProbeContext
from .cuda_driver import (
    ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
    ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
    ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK,
    CudaDriver,
    KernelDriver,
    exclusive_shared_bytes,
)
from .devices import CudaDevice, import_torch, require_cuda_devices
from .kernels import CudaDriverError, KernelError, KernelImage, NoCompiler, arch_for, compile_cached
from .records import Record, failed, measured, skipped

PROBE = "smclock"
METRIC = "sm_clock"  # the headline metric, as the runner names it
METRIC_CLOCK = METRIC
METRIC_FMA_RATIO = "sm_fma_rate_min_ratio"
KERNEL_FILE = "sm_clock.cu"
KERNEL_NAME = "gpudiag_sm_clock"
# Mirrors of the #defines in sm_clock.cu; the FLOP count depends on them.
CHAINS_PER_THREAD = 8
UNROLL = 16
RECORD_WORDS = 8
THREADS_PER_BLOCK = 512  # 16 warps × 8 chains keep every FMA pipe of an SM busy
FLOPS_PER_FMA = 2
CALIBRATION_ITERATIONS = 256
TARGET_LAUNCH_S = 0.02  # long enough that a 1 µs globaltimer tick is 0.005 % of a launch
WARMUP_LAUNCHES = 5  # lets the GPU's clock governor settle before samples count
MIN_SAMPLES, MAX_SAMPLES = 3, 30
MAX_ITERATIONS = 1 << 22
COMPILE_TIMEOUT_S = 120.0
SLOWEST_REPORTED = 3
_RATIO_DETAIL_KEYS = ("fma_gflops_median", "fma_gflops_min", "fma_gflops_max", "slowest_fma_sm_ids",
                      "mismatched_result_sm_ids", "sms_seen", "sms_expected")
# The caching allocator rounds even a tiny tensor up to a 2 MiB segment (catalog.json).
ALLOCATOR_SEGMENT_MIB = SIZING.smclock_segment_mib


@dataclass(frozen=True)
class BlockTiming:
    """What one block recorded: SM ids at start and end, SM cycles, globaltimer ns, result.

    ``smid_limit`` is ``%nsmid``: every SM id is below it, but ids may have gaps.
    """

    smid: int
    smid_end: int
    cycles: int
    start_ns: int
    end_ns: int
    result_bits: int
    smid_limit: int = 0

    @property
    def elapsed_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def migrated(self) -> bool:
        """True when the block ended on another SM, so its cycles mix two SM counters."""
        return self.smid != self.smid_end


@dataclass(frozen=True)
class SmRate:
    """One SM in one launch (or the median over launches): clock in MHz, FMA rate in GFLOP/s."""

    smid: int
    clock_mhz: float
    fma_gflops: float
    blocks: int


@dataclass(frozen=True)
class SmSummary:
    """The spread over SMs of :class:`SmRate` values; ``spread_pct`` is (max-min)/median."""

    sm_count: int
    median_clock_mhz: float
    min_clock_mhz: float
    max_clock_mhz: float
    spread_pct: float
    slowest_clock_sm_ids: tuple[int, ...]
    median_fma_gflops: float
    min_fma_gflops: float
    max_fma_gflops: float
    fma_min_ratio: float
    slowest_fma_sm_ids: tuple[int, ...]


def decode_records(words: Sequence[int], blocks: int) -> list[BlockTiming]:
    """Split the kernel's output (``RECORD_WORDS`` 64-bit words per block) into timings.

    Words may come back as signed int64 (torch); they are read as unsigned.
    """
    if len(words) < blocks * RECORD_WORDS:
        raise ValueError(f"{len(words)} words cannot hold {blocks} block records")
    unsigned = [word & 0xFFFF_FFFF_FFFF_FFFF for word in words[: blocks * RECORD_WORDS]]
    return [BlockTiming(*unsigned[start:start + 7])
            for start in range(0, blocks * RECORD_WORDS, RECORD_WORDS)]


def flops_per_block(iterations: int, threads_per_block: int = THREADS_PER_BLOCK) -> int:
    """FP32 floating-point operations one block performs in ``iterations`` loop trips."""
    return iterations * UNROLL * CHAINS_PER_THREAD * FLOPS_PER_FMA * threads_per_block


def per_sm_rates(timings: Sequence[BlockTiming], block_flops: float) -> list[SmRate]:
    """Per-SM clock (MHz) and FMA rate (GFLOP/s), sorted by SM id.

    Blocks that migrated or have no elapsed time are dropped. With several blocks on one
    SM, the clock is their total cycles over total ns, and the rate is their total FLOPs over
    the span from the first start to the last end, right whether they overlapped or not.
    """
    by_sm: dict[int, list[BlockTiming]] = {}
    for timing in timings:
        if not timing.migrated and timing.elapsed_ns > 0:
            by_sm.setdefault(timing.smid, []).append(timing)
    rates = []
    for smid, group in sorted(by_sm.items()):
        cycles = sum(timing.cycles for timing in group)
        busy_ns = sum(timing.elapsed_ns for timing in group)
        span_ns = max(t.end_ns for t in group) - min(t.start_ns for t in group)
        rates.append(SmRate(smid, cycles / busy_ns * 1000.0, len(group) * block_flops / span_ns,
                            len(group)))
    return rates


def median_over_samples(samples: Sequence[Sequence[SmRate]]) -> list[SmRate]:
    """Each SM's median clock and rate over several launches, sorted by SM id."""
    by_sm: dict[int, list[SmRate]] = {}
    for sample in samples:
        for rate in sample:
            by_sm.setdefault(rate.smid, []).append(rate)
    return [SmRate(smid, statistics.median(r.clock_mhz for r in rates),
                   statistics.median(r.fma_gflops for r in rates),
                   sum(r.blocks for r in rates))
            for smid, rates in sorted(by_sm.items())]


def summarize(rates: Sequence[SmRate], slowest_count: int = SLOWEST_REPORTED) -> SmSummary:
    """Median, extremes and slowest SM ids of clock and FMA rate; raises on no SMs."""
    if not rates:
        raise ValueError("no SM reported a usable timing")
    clocks = [rate.clock_mhz for rate in rates]
    gflops = [rate.fma_gflops for rate in rates]
    median_clock, median_gflops = statistics.median(clocks), statistics.median(gflops)
    by_clock = sorted(rates, key=lambda rate: (rate.clock_mhz, rate.smid))
    by_gflops = sorted(rates, key=lambda rate: (rate.fma_gflops, rate.smid))
    return SmSummary(
        sm_count=len(rates), median_clock_mhz=median_clock, min_clock_mhz=min(clocks),
        max_clock_mhz=max(clocks), spread_pct=(max(clocks) - min(clocks)) / median_clock * 100.0,
        slowest_clock_sm_ids=tuple(rate.smid for rate in by_clock[:slowest_count]),
        median_fma_gflops=median_gflops, min_fma_gflops=min(gflops), max_fma_gflops=max(gflops),
        fma_min_ratio=min(gflops) / median_gflops,
        slowest_fma_sm_ids=tuple(rate.smid for rate in by_gflops[:slowest_count]))


def mismatched_result_sm_ids(timings: Sequence[BlockTiming]) -> list[int]:
    """SMs whose FMA result differs from the majority: every block computes the same bits."""
    counts: dict[int, int] = {}
    for timing in timings:
        counts[timing.result_bits] = counts.get(timing.result_bits, 0) + 1
    if len(counts) < 2:
        return []
    majority = max(counts, key=lambda bits: counts[bits])
    return sorted({timing.smid for timing in timings if timing.result_bits != majority})


def iterations_for(target_s: float, calibration_iterations: int, calibration_ns: int) -> int:
    """Loop trips that make one launch last about ``target_s`` (clamped to 1..MAX_ITERATIONS)."""
    per_iteration_ns = max(calibration_ns, 1000) / calibration_iterations  # 1 µs timer floor
    return max(1, min(MAX_ITERATIONS, round(target_s * 1e9 / per_iteration_ns)))


def sample_count(budget_s: float, launch_s: float) -> int:
    """Launches that fit the budget, at least MIN_SAMPLES and at most MAX_SAMPLES."""
    return max(MIN_SAMPLES, min(MAX_SAMPLES, int(budget_s / launch_s)))


def kernel_source_path(kernel_dir: str | None) -> str:
    """``sm_clock.cu`` in ``kernel_dir``, or in the bundle's own ``cuda_kernels/``."""
    folder = kernel_dir or os.path.join(os.path.dirname(os.path.dirname(__file__)), "cuda_kernels")
    return os.path.join(folder, KERNEL_FILE)


def run(ctx: ProbeContext) -> Iterator[Record]:
    """Probe every GPU torch sees, one after another; yields two records per GPU.

    GPUs run one at a time whatever ``ctx.sequential`` says: the kernel is short, and one
    GPU at a time keeps a neighbour's load out of each GPU's per-SM comparison.

    No torch or no GPU: raises DeviceUnavailable (the runner's one ``skipped`` record). An unreadable kernel source: one
    ``error`` record for ``host``. No compiler: ``skipped`` per GPU; any failure while
    compiling or launching: ``error`` for that GPU only.
    """
    torch = import_torch()
    devices = require_cuda_devices(torch)
    path = kernel_source_path(ctx.kernel_dir)
    try:
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
    except OSError as error:
        yield failed(PROBE, "host", METRIC_CLOCK, f"CUDA kernel source unreadable: {error}")
        return
    for position, device in enumerate(devices):
        budget_s = min(ctx.duration_s, ctx.deadline.left_s() / (len(devices) - position))
        yield from _probe_device(torch, device, source, budget_s, ctx)


def _probe_device(torch: ModuleType, device: CudaDevice, source: str, budget_s: float,
                  ctx: ProbeContext) -> list[Record]:
    if ctx.deadline.expired():
        return _not_ok(skipped, device, "deadline reached before this GPU was probed")
    try:
        image = compile_cached(source, KERNEL_FILE, arch_for(device.compute_capability),
                               timeout_s=min(COMPILE_TIMEOUT_S, ctx.deadline.left_s()))
        return measure_device(torch, CudaDriver.load(), device, image, budget_s, ctx)
    except NoCompiler as error:
        return _not_ok(skipped, device, str(error))
    except (KernelError, RuntimeError) as error:  # torch raises CUDA failures as RuntimeError
        return _not_ok(failed, device, f"{type(error).__name__}: {error}")


def _not_ok(make: Callable[..., Record], device: CudaDevice, reason: str) -> list[Record]:
    """The same not-ok outcome for both metrics, so neither looks merely absent."""
    return [make(PROBE, device.label, metric, reason, gpu_uuid=device.gpu_uuid)
            for metric in (METRIC_CLOCK, METRIC_FMA_RATIO)]


class _Launcher:
    """Launches the kernel on one GPU, in torch's context and stream, into a torch buffer."""

    def __init__(self, torch: ModuleType, driver: KernelDriver, function: ctypes.c_void_p,
                 device: CudaDevice, shared_bytes: int) -> None:
        self.torch, self.driver, self.function = torch, driver, function
        self.device, self.shared_bytes = device, shared_bytes
        self.stream = torch.cuda.current_stream(device.index).cuda_stream

    def launch(self, buffer: Any, slot: int, iterations: int) -> None:
        """Queue one launch writing its records into row ``slot`` of ``buffer`` (int64)."""
        row_bytes = self.device.multiprocessor_count * RECORD_WORDS * 8
        address = ctypes.c_uint64(buffer.data_ptr() + slot * row_bytes)
        self.driver.launch(self.function, self.device.multiprocessor_count, THREADS_PER_BLOCK,
                           self.shared_bytes, self.stream,
                           [address, ctypes.c_int32(iterations), ctypes.c_float(1.0)])

    def run_rows(self, rows: int, iterations: int, launches: int | None = None) -> list[list[int]]:
        """Launch ``launches`` times (default ``rows``) back to back, wait, return the rows."""
        buffer = self.torch.zeros((rows, self.device.multiprocessor_count * RECORD_WORDS),
                                  dtype=self.torch.int64, device=self.device.label)
        for launch in range(launches if launches is not None else rows):
            self.launch(buffer, launch % rows, iterations)
        self.torch.cuda.current_stream(self.device.index).synchronize()
        return buffer.cpu().tolist()


def measure_device(torch: ModuleType, driver: KernelDriver, device: CudaDevice, image: KernelImage,
                   budget_s: float, ctx: ProbeContext) -> list[Record]:
    """Calibrate, warm up and sample the kernel on one GPU for about ``budget_s`` seconds.

    Returns the two records (``skipped`` ones when the memory cap or free memory forbids
    even the few KiB needed). Raises KernelError or torch's RuntimeError on failure.
    """
    memory_problem = _memory_problem(torch, device, ctx)
    if memory_problem is not None:
        return _not_ok(skipped, device, memory_problem)
    torch.cuda.set_device(device.index)
    torch.zeros(1, device=device.label)  # makes torch create (and own) the primary context
    with driver.primary_context(device.index), driver.module(image.data) as module:
        function = driver.function(module, KERNEL_NAME)
        shared_bytes = _exclusive_shared_bytes(driver, device.index)
        driver.allow_dynamic_shared(function, shared_bytes)
        launcher = _Launcher(torch, driver, function, device, shared_bytes)
        calibration = decode_records(launcher.run_rows(1, CALIBRATION_ITERATIONS)[0],
                                     device.multiprocessor_count)
        iterations = iterations_for(TARGET_LAUNCH_S, CALIBRATION_ITERATIONS,
                                    max(timing.elapsed_ns for timing in calibration))
        launcher.run_rows(1, iterations, launches=WARMUP_LAUNCHES)
        samples = min(sample_count(budget_s, TARGET_LAUNCH_S),
                      max(1, int(ctx.deadline.left_s() / TARGET_LAUNCH_S) - WARMUP_LAUNCHES))
        rows = launcher.run_rows(samples, iterations)
    timings = [decode_records(row, device.multiprocessor_count) for row in rows]
    return _records(device, timings, iterations, image, shared_bytes)


def _memory_problem(torch: ModuleType, device: CudaDevice, ctx: ProbeContext) -> str | None:
    """Why the few KiB this probe needs cannot be taken, or None when they can."""
    if ctx.max_gpu_mem_mib is not None and ctx.max_gpu_mem_mib < ALLOCATOR_SEGMENT_MIB:
        return f"--max-gpu-mem {ctx.max_gpu_mem_mib} MiB is below the {ALLOCATOR_SEGMENT_MIB} MiB needed"
    free_bytes, _total_bytes = torch.cuda.mem_get_info(device.index)
    if free_bytes < ALLOCATOR_SEGMENT_MIB * 1024 * 1024:
        return f"only {free_bytes // (1024 * 1024)} MiB of GPU memory free"
    return None


def _exclusive_shared_bytes(driver: KernelDriver, ordinal: int) -> int:
    per_sm = driver.device_attribute(ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, ordinal)
    optin = driver.device_attribute(ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, ordinal)
    try:
        reserved = driver.device_attribute(ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, ordinal)
    except CudaDriverError:  # drivers before CUDA 11 lack it; 0 only makes the ask larger
        reserved = 0
    # Without room for exclusivity two blocks may share an SM; per_sm_rates still copes.
    return exclusive_shared_bytes(per_sm, optin, reserved) or 0


def _records(device: CudaDevice, timings: Sequence[Sequence[BlockTiming]], iterations: int,
             image: KernelImage, shared_bytes: int) -> list[Record]:
    block_flops = flops_per_block(iterations)
    samples = [per_sm_rates(sample, block_flops) for sample in timings]
    usable = [sample for sample in samples if sample]
    if not usable:
        return _not_ok(failed, device, "no SM reported a usable timing")
    per_sm = median_over_samples(usable)
    all_blocks = [timing for sample in timings for timing in sample]
    params = {"threads_per_block": THREADS_PER_BLOCK, "chains_per_thread": CHAINS_PER_THREAD,
              "blocks_per_sm": 1}
    summary = summarize(per_sm)
    details = _details(summary, per_sm, device, all_blocks, iterations, image,
                       shared_bytes)
    # The per-SM lists ride on the clock record only; the ratio record keeps what explains it.
    ratio_details = {key: details[key] for key in _RATIO_DETAIL_KEYS}
    # The clock is the median SM's (of each SM's median over the launches), rounded as min_mhz and
    # max_mhz are, so it lies between the slowest and the fastest SM; the CV is over the launches.
    clock = measured(PROBE, device.label, METRIC_CLOCK, "MHz",
                     [statistics.median(rate.clock_mhz for rate in sample) for sample in usable],
                     params=params, details=details, gpu_uuid=device.gpu_uuid)
    return [replace(clock, value=round(summary.median_clock_mhz, 1)),
            measured(PROBE, device.label, METRIC_FMA_RATIO, "ratio",
                     [summarize(sample).fma_min_ratio for sample in usable],
                     params=params, details=ratio_details, gpu_uuid=device.gpu_uuid)]


def _details(summary: SmSummary, per_sm: Sequence[SmRate], device: CudaDevice,
             blocks: Sequence[BlockTiming], iterations: int, image: KernelImage,
             shared_bytes: int) -> dict[str, Any]:
    return {
        "min_mhz": round(summary.min_clock_mhz, 1), "max_mhz": round(summary.max_clock_mhz, 1),
        "spread_pct": round(summary.spread_pct, 3),
        "slowest_sm_ids": list(summary.slowest_clock_sm_ids),
        "sms_seen": summary.sm_count, "sms_expected": device.multiprocessor_count,
        "fma_gflops_median": round(summary.median_fma_gflops, 2),
        "fma_gflops_min": round(summary.min_fma_gflops, 2),
        "fma_gflops_max": round(summary.max_fma_gflops, 2),
        "fma_min_ratio": round(summary.fma_min_ratio, 4),
        "slowest_fma_sm_ids": list(summary.slowest_fma_sm_ids),
        "mismatched_result_sm_ids": mismatched_result_sm_ids(blocks),
        "migrated_blocks": sum(1 for block in blocks if block.migrated),
        "smid_limit": max((block.smid_limit for block in blocks), default=0),
        "sm_ids": [rate.smid for rate in per_sm],
        "per_sm_clock_mhz": [round(rate.clock_mhz, 1) for rate in per_sm],
        "per_sm_fma_gflops": [round(rate.fma_gflops, 1) for rate in per_sm],
        "iterations": iterations, "exclusive_shared_bytes": shared_bytes,
        "arch": image.arch, "image": image.kind, "compiler": image.compiler,
    }
