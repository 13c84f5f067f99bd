"""The JSON lines a simulated node prints: the same records, in the same order and shape, as
``python -m probes`` on a real GPU node (see probes/runner.py and each probe's module).

This module knows nothing of faults. It draws each record from a node's *state* (per-GPU
speed, clock-event and link figures, which GPUs NVML and torch see, which probes fail: what
:mod:`gpudiag.simulate` derives from the fleet file), the SKU figures of
``gpudiag/data/sku.json`` and a random source per record, so that a record's noise does not
depend on which other probes ran or in which order threads were scheduled.

GPUs are numbered as on a real node: telemetry labels the GPUs NVML lists ``gpu:<NVML index>``;
the torch probes label the GPUs CUDA can use ``cuda:<n>``, numbered 0.. in bus order without the
lost ones (CUDA renumbers), so a GPU keeps its UUID but may change its ``cuda:`` number.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import random
import statistics
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from .sku import Sku
from .transport import CommandResult

PROBE_NAMES = ("facts", "telemetry", "gemm", "membw", "p2p", "pcie", "smclock")
HEADLINE_METRICS = {"facts": "gpu_count", "telemetry": "nvml", "gemm": "tflops", "membw": "bandwidth",
                    "p2p": "bandwidth", "pcie": "bandwidth", "smclock": "sm_clock"}
DTYPES = ("bf16", "fp16", "tf32", "fp32")
# NVML clocks-event reason bits (probes/nvml.py), lowest first.
REASON_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"),
    (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"), (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"), (0x100, "display_clock_setting"))
GPU_IDLE_BIT = 0x1
THERMAL_BITS = 0x20 | 0x40
TELEMETRY_COUNTS = ("ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "remapped_rows_correctable",
                    "remapped_rows_uncorrectable", "remapped_rows_pending", "remapped_rows_failure")
MIB = 1 << 20
# PCI buses of the eight GPUs of an HGX baseboard, in NVML order.
PCI_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
# A timed sample of a probe batches runs to about this long (probes/timing.py), so a probe
# run of ``duration_s`` yields duration_s / SAMPLE_S samples, and at least MIN_SAMPLES.
SAMPLE_S = 0.025
MIN_SAMPLES = 5
# The noise figures of the fleet file are the spread between runs and GPUs; the samples of one
# run scatter this many times less around that run's level (real probes: CV 0.2-0.5 %).
WITHIN_RUN_DIVISOR = 3.0
NVML_INTERVAL_S = 0.1
# Square GEMM sizes the probe tries, largest first (probes/gemm.py GPU_SIZES); the healthy
# TFLOP/s of each is the SKU table's per-size figure. Buffer sizes of the copy probes, largest
# first, with how fast a smaller one runs relative to the largest.
GEMM_SIZES = (8192, 6144, 4096, 2048)
MEMBW_BUFFERS_MIB = ((1024, 1.0), (512, 0.99), (256, 0.98), (128, 0.96))
PAIR_BUFFERS_MIB = ((256, 1.0), (64, 0.96), (16, 0.88))
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "tf32": 4, "fp32": 4}
CUBLAS_WORKSPACE_MIB = 64
SMCLOCK_MIN_MIB = 2
# What the driver and CUDA context take before any probe allocates (MiB).
CONTEXT_MIB = 530
# Simulated wall time (s): the node's Python importing torch, and each probe's fixed part.
STARTUP_S = 4.0
SETUP_S = {"facts": 0.6, "telemetry": 0.4, "gemm": 1.0, "membw": 0.4, "p2p": 1.0, "pcie": 0.5, "smclock": 1.5}
DEADLINE_GRACE_S = 5.0
# A host starved of CPU (slow_node, factor f) launches kernels late: GEMM runs at f ** this.
HOST_GEMM_EXPONENT = 0.25
# What probes/telemetry.py prints for a GPU NVML reports lost: NVML_ERROR_GPU_IS_LOST as its
# error name and pynvml's description of it (nvmlDeviceGetHandleByIndex fails with it).
GPU_LOST_REASON = "NVML_ERROR_GPU_IS_LOST: GPU is lost"


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
    NVLink indices that are down.
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
class NodeState:
    """One simulated node: the GPUs on its PCI bus in NVML order, software, ``host_factor`` (host
    CPU/memory speed, 1.0: healthy) and the probes that fail on this run."""

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

    @property
    def cuda_gpus(self) -> tuple[GpuState, ...]:
        """The GPUs torch sees, in ``cuda:`` order."""
        return tuple(gpu for gpu in self.gpus if not gpu.lost)

    def failure(self, probe: str, gpu: GpuState | None) -> str | None:
        """The error reason of ``probe`` on ``gpu`` (None: the probe as a whole), or None when it works."""
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


@dataclass(frozen=True)
class BundleCall:
    """The options of one ``python -m probes`` command line (probes/runner.py)."""

    names: tuple[str, ...]
    duration_s: float = 1.0
    max_gpu_mem_mib: int | None = None
    dtype: str = "bf16"
    sequential: bool = False
    deadline_s: float = 600.0


class BundleUsage(Exception):
    """The command line is not one the bundle accepts; the message is argparse's complaint."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BundleUsage(message)


def parse_bundle_argv(argv: Sequence[str]) -> BundleCall:
    """``[python, -m, probes, ...]`` as the bundle's runner reads it. Raises BundleUsage."""
    if len(argv) < 3 or list(argv[1:3]) != ["-m", "probes"]:
        raise BundleUsage(f"a simulated node only runs the probe bundle (python -m probes), not {list(argv)!r}")
    parser = _Parser(prog="python -m probes", add_help=False)
    parser.add_argument("names", nargs="*")
    parser.add_argument("--duration", type=float, default=1.0)
    parser.add_argument("--max-gpu-mem", type=int, default=None)
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    parser.add_argument("--sequential", action="store_true")
    parser.add_argument("--deadline", type=float, default=600.0)
    parser.add_argument("--kernel-dir", default=None)
    arguments = parser.parse_args(list(argv[3:]))
    unknown = [name for name in arguments.names if name not in PROBE_NAMES]
    if unknown:
        raise BundleUsage(f"unknown probe {unknown[0]!r}; choose from {', '.join(PROBE_NAMES)}")
    if arguments.duration <= 0 or (arguments.max_gpu_mem is not None and arguments.max_gpu_mem <= 0):
        raise BundleUsage("duration and max GPU memory must be positive")
    return BundleCall(tuple(arguments.names), arguments.duration, arguments.max_gpu_mem, arguments.dtype,
                      arguments.sequential, arguments.deadline)


@dataclass(frozen=True)
class ProbeOutput:
    """One probe's records and the simulated seconds it took."""

    records: tuple[dict[str, Any], ...]
    seconds: float


@dataclass(frozen=True)
class BundleRun:
    """What the simulated bundle printed: each line with the simulated time (s) it appeared at."""

    lines: tuple[tuple[float, str], ...]
    exit_status: int
    duration_s: float
    stderr: str = ""

    def command_result(self, timeout_s: float) -> CommandResult:
        """The command's result; past ``timeout_s`` only the lines printed by then, and a timeout."""
        if self.duration_s > timeout_s:
            stdout = "".join(line + "\n" for at_s, line in self.lines if at_s <= timeout_s)
            return CommandResult(exit_status=None, stdout=stdout, stderr="", timed_out=True, duration_s=timeout_s)
        return CommandResult(exit_status=self.exit_status, stdout="".join(line + "\n" for _, line in self.lines),
                             stderr=self.stderr, timed_out=False, duration_s=self.duration_s)


def run_bundle(call: BundleCall, node: NodeState, draw: Draw) -> BundleRun:
    """Every selected probe in run order, under the bundle's deadline, as JSON lines."""
    wanted = set(call.names) or set(PROBE_NAMES)
    clock_s = STARTUP_S
    lines: list[tuple[float, str]] = []
    for name in (name for name in PROBE_NAMES if name in wanted):
        if clock_s - STARTUP_S >= call.deadline_s:
            lines.append((clock_s, _line(not_ok("skipped", name, "host", HEADLINE_METRICS[name],
                                                "the run's overall deadline passed before this probe started"))))
            continue
        output = PROBES[name](call, node, draw)
        if clock_s + output.seconds - STARTUP_S > call.deadline_s + DEADLINE_GRACE_S:
            clock_s = STARTUP_S + call.deadline_s + DEADLINE_GRACE_S
            lines.append((clock_s, _line(not_ok("error", name, "host", HEADLINE_METRICS[name],
                                                "the run's overall deadline passed while this probe was running"))))
            return BundleRun(tuple(lines), 124, clock_s)
        clock_s += output.seconds
        lines.extend((clock_s, _line(record)) for record in output.records)
    return BundleRun(tuple(lines), 0, clock_s)


# ------------------------------------------------------------------------------ record shapes


def record(probe: str, device: str, metric: str, value: float | int | None, unit: str | None, *,
           status: str = "ok", reason: str | None = None, gpu_uuid: str | None = None, samples: int = 0,
           cv: float | None = None, params: Mapping[str, Any] | None = None,
           details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A record with the fields, in the order, of probes/records.py's ``Record.to_dict``."""
    return {"probe": probe, "device": device, "gpu_uuid": gpu_uuid, "metric": metric, "value": value,
            "unit": unit, "samples": samples, "cv": cv, "status": status, "reason": reason,
            "params": dict(params or {}), "details": dict(details or {})}


def not_ok(status: str, probe: str, device: str, metric: str, reason: str, **extra: Any) -> dict[str, Any]:
    """A ``skipped`` or ``error`` record: no value, a reason."""
    return record(probe, device, metric, None, None, status=status, reason=reason, **extra)


def measured(probe: str, device: str, metric: str, unit: str, values: Sequence[float],
             **extra: Any) -> dict[str, Any]:
    """A record whose value is the median of ``values``, with their CV (population SD / mean)."""
    mean = statistics.fmean(values)
    cv = statistics.pstdev(values) / mean if len(values) > 1 and mean else 0.0
    return record(probe, device, metric, statistics.median(values), unit, samples=len(values), cv=cv, **extra)


def reason_names(mask: int) -> list[str]:
    """The names of the clocks-event reason bits set in ``mask``, lowest bit first."""
    return [name for bit, name in REASON_BITS if mask & bit]


def sample_count(duration_s: float) -> int:
    """Samples a probe takes in ``duration_s`` seconds of timed load."""
    return max(MIN_SAMPLES, round(duration_s / SAMPLE_S))


def noisy(rng: random.Random, true_value: float, cv: float, count: int) -> list[float]:
    """``count`` samples of one run: a run level drawn with ``cv``, samples scattered around it."""
    level = true_value * rng.gauss(1.0, cv)
    return [level * rng.gauss(1.0, cv / WITHIN_RUN_DIVISOR) for _ in range(count)]


def _line(data: Mapping[str, Any]) -> str:
    return json.dumps(data, allow_nan=False)


# ------------------------------------------------------------------------------ memory sizing


def _choose(sizes: Sequence[tuple[int, float]], bytes_needed: Callable[[int], int], node: NodeState,
            cap_mib: int | None, what: str) -> tuple[int, float] | str:
    """The largest (size, figure) that fits the free memory and the cap, or the refusal text.

    ``figure`` is whatever goes with the size: the healthy rate (GEMM) or the efficiency.
    """
    free_bytes = (node.gpu_memory_mib - CONTEXT_MIB) * MIB
    headroom = max(256 * MIB, int(free_bytes * 0.05))
    usable = max(0, free_bytes - headroom)
    if cap_mib is not None:
        usable = min(usable, cap_mib * MIB)
    for size, figure in sizes:
        if bytes_needed(size) <= usable:
            return size, figure
    figures = f"{usable // MIB} MiB usable (free {free_bytes // MIB} MiB less {headroom // MIB} MiB headroom"
    if cap_mib is not None:
        figures += f", capped at {cap_mib} MiB by --max-gpu-mem"
    need = -(-min(bytes_needed(size) for size, _ in sizes) // MIB)
    return f"refused: {what} needs at least {need} MiB of GPU memory; {figures})"


# ------------------------------------------------------------------------------ the probes


def facts(call: BundleCall, node: NodeState, draw: Draw) -> ProbeOutput:
    """The facts record: GPU count (torch's) as value, host and software facts in ``details``.

    ``pci_gpu_count`` and ``nvml_gpu_count`` count every GPU on the bus, a lost one included
    (NVML's device count includes a GPU whose handle then fails with GPU_IS_LOST).
    """
    reason = node.failure("facts", None)
    if reason is not None:
        return ProbeOutput((not_ok("error", "facts", "host", "gpu_count", reason),), SETUP_S["facts"])
    rng, host, visible = draw("facts"), node.sku.host, node.cuda_gpus
    usable_cpus = max(1, round(host.cpu_count * node.host_factor))
    # A starved host (slow_node) runs far more work than it has usable CPUs for.
    load = rng.uniform(0.2, 2.5) + (1.0 - node.host_factor) * host.cpu_count * 1.5
    details = {"hostname": node.host, "cpu_model": host.cpu_model, "cpu_count": host.cpu_count,
               "cpu_count_usable": usable_cpus, "load_average_1m": round(load, 2),
               "memory_total_mib": host.memory_total_mib,
               "memory_available_mib": int(host.memory_total_mib * rng.uniform(0.93, 0.97) * node.host_factor),
               "kernel": "5.15.0-105-generic", "os": "Ubuntu 22.04.4 LTS", "python_version": "3.10.12",
               "driver_version": node.driver, "pci_gpu_count": len(node.gpus), "nvml_gpu_count": len(node.gpus),
               "torch_version": node.torch, "cuda_version": node.cuda,
               "nccl_version": "2.20.5", "gpu_count": len(visible), "gpu_model": node.sku.gpu_model,
               "gpu_memory_mib": node.gpu_memory_mib, "gpu_uuids": [gpu.gpu_uuid for gpu in visible]}
    facts_record = record("facts", "host", "gpu_count", len(visible), "count", details=details)
    return ProbeOutput((facts_record,), SETUP_S["facts"])


def telemetry(call: BundleCall, node: NodeState, draw: Draw) -> ProbeOutput:
    """Per GPU NVML lists (``gpu:N``): identity, then every metric of probes/telemetry.py, GPUs idle.

    A lost GPU is one ``error`` identity record, as probes/telemetry.py prints when NVML cannot
    give a handle for it.
    """
    records: list[dict[str, Any]] = []
    for gpu in node.gpus:
        records += _telemetry_gpu(node, gpu, draw(f"telemetry:{gpu.index}"))
    return ProbeOutput(tuple(records), SETUP_S["telemetry"] + 0.08 * len(node.gpus))


def _telemetry_gpu(node: NodeState, gpu: GpuState, rng: random.Random) -> list[dict[str, Any]]:
    device = f"gpu:{gpu.nvml_index}"
    if gpu.lost:
        return [not_ok("error", "telemetry", device, "identity", GPU_LOST_REASON, details={"source": "nvml"})]
    records = [record("telemetry", device, "identity", 1, None, gpu_uuid=gpu.gpu_uuid, details={
        "name": node.sku.gpu_model, "gpu_uuid": gpu.gpu_uuid, "serial": gpu.serial,
        "pci_bus_id": gpu.pci_bus_id, "driver_version": node.driver, "cuda_driver_version": node.cuda,
        "nvml_index": gpu.nvml_index, "source": "nvml"})]
    reason = node.failure("telemetry", gpu)
    for metric, unit, value, details in _idle_readings(node, gpu, rng):
        if reason is not None:
            records.append(not_ok("error", "telemetry", device, metric, reason, gpu_uuid=gpu.gpu_uuid,
                                  details={"source": "nvml"}))
            continue
        records.append(record("telemetry", device, metric, value, unit, gpu_uuid=gpu.gpu_uuid, samples=1,
                              details={**details, "source": "nvml"}))
    return records


def _idle_readings(node: NodeState, gpu: GpuState,
                   rng: random.Random) -> Iterator[tuple[str, str, float | int, Mapping[str, Any]]]:
    sku = node.sku
    mask = GPU_IDLE_BIT | gpu.idle_throttle_bits
    temperature_c = rng.randint(80, 86) if gpu.idle_throttle_bits & THERMAL_BITS else rng.randint(29, 36)
    yield "sm_clock", "MHz", sku.sm_clock_idle_mhz, {}
    yield "sm_clock_max", "MHz", sku.sm_clock_max_mhz, {}
    yield "memory_clock", "MHz", sku.memory_clock_max_mhz, {}
    yield "memory_clock_max", "MHz", sku.memory_clock_max_mhz, {}
    yield "clocks_event_reasons", "bitmask", mask, {"active": reason_names(mask)}
    yield "gpu_temperature", "C", temperature_c, {}
    yield "memory_temperature", "C", temperature_c + rng.randint(4, 9), {}
    yield "power_draw", "W", round(sku.power_idle_w + rng.uniform(-3.0, 6.0), 3), {}
    yield "power_limit", "W", sku.power_limit_w, {}
    for metric in TELEMETRY_COUNTS:
        yield metric, "bool" if metric.endswith(("pending", "failure")) else "count", 0, {}
    yield "pcie_generation", "gen", sku.pcie_generation_max, {}
    yield "pcie_generation_max", "gen", sku.pcie_generation_max, {}
    yield "pcie_width", "lanes", gpu.pcie_width, {}
    yield "pcie_width_max", "lanes", sku.pcie_width_max, {}
    yield "pcie_replay_count", "count", 0, {}
    links = [_nvlink(sku, link, link not in gpu.nvlinks_down) for link in range(sku.nvlinks)]
    yield "nvlink_links_up", "count", sum(link["state"] == "up" for link in links), {"links": links}


def _nvlink(sku: Sku, link: int, up: bool) -> dict[str, Any]:
    status: dict[str, Any] = {"link": link, "state": "up" if up else "down"}
    if up:
        status["nvml_version_code"] = sku.nvlink_version_code
        status["speed_mbyte_per_s"] = sku.nvlink_speed_mbyte_per_s
    return {**status, "crc_errors": 0, "replay_errors": 0, "recovery_errors": 0}


def load_evidence(node: NodeState, gpu: GpuState, rng: random.Random, loaded_s: float,
                  power_share: float, all_loaded: bool) -> dict[str, Any]:
    """What the NVML sampler sees on ``gpu`` during ``loaded_s`` seconds of load (probes/nvml.py).

    ``power_share`` is the healthy load's power draw as a share of the power limit;
    ``all_loaded`` says whether every GPU of the node is loaded at once. Each acting throttle's
    reason is active in its share of the loaded samples (at least one), which run at its clock.
    """
    sku = node.sku
    loaded = max(1, round(loaded_s / NVML_INTERVAL_S))
    acting = gpu.acting_throttles(all_loaded)
    counts = [(throttle, min(loaded, max(1, round(throttle.share * loaded)))) for throttle in acting]
    clocks_mhz = [_sample_clock_mhz(sku.sm_clock_max_mhz, [t.factor for t, count in counts if sample < count])
                  for sample in range(loaded)]
    reason_samples = _reason_sample_counts(counts)
    thermal = any(throttle.bit & THERMAL_BITS for throttle in acting)
    clock_factor = gpu.clock_factor(all_loaded)
    return {"sm_clock_mhz_min": min(clocks_mhz) - 15 * rng.randint(0, 2),
            "sm_clock_mhz_median": statistics.median(clocks_mhz), "sm_clock_mhz_max_seen": max(clocks_mhz),
            "sm_clock_max_mhz": sku.sm_clock_max_mhz, "clocks_event_reasons": list(reason_samples),
            "clocks_event_reason_samples": reason_samples,
            "temperature_c_max": rng.randint(87, 92) if thermal else rng.randint(48, 62),
            "power_w_max": round(sku.power_limit_w * power_share * clock_factor * rng.uniform(0.96, 1.0), 3),
            "power_limit_w": sku.power_limit_w, "pcie_generation_min_loaded": sku.pcie_generation_max,
            "pcie_generation_max": sku.pcie_generation_max, "pcie_width_min_loaded": gpu.pcie_width,
            "pcie_width_max": sku.pcie_width_max, "nvml_samples": loaded + 2, "nvml_samples_idle": 2}


def _sample_clock_mhz(max_mhz: int, factors: Sequence[float]) -> int:
    """The SM clock of one sample under the throttles active in it; clocks step by 15 MHz."""
    clock = float(max_mhz)
    for factor in factors:
        clock *= factor
    return 15 * round(clock / 15)


def _reason_sample_counts(counts: Sequence[tuple[Throttle, int]]) -> dict[str, int]:
    """Reason name -> loaded samples it was active in, lowest bit first (the sampler's order)."""
    by_bit: dict[int, int] = {}
    for throttle, count in counts:
        # Throttles sharing a bit are active in the same first samples, so the larger count holds.
        by_bit[throttle.bit] = max(by_bit.get(throttle.bit, 0), count)
    return {name: by_bit[bit] for bit, name in REASON_BITS if bit in by_bit}


def gemm(call: BundleCall, node: NodeState, draw: Draw) -> ProbeOutput:
    """TFLOP/s per GPU, with NVML evidence. A starved host slows the launches a little."""
    count = sample_count(call.duration_s)
    visible = node.cuda_gpus
    records = [_gemm_gpu(call, node, gpu, draw(f"gemm:{gpu.index}"), count) for gpu in visible]
    turns = len(visible) if call.sequential else 1
    return ProbeOutput(tuple(records), SETUP_S["gemm"] + turns * (0.5 + count * SAMPLE_S))


def _gemm_gpu(call: BundleCall, node: NodeState, gpu: GpuState, rng: random.Random, count: int) -> dict[str, Any]:
    width = DTYPE_BYTES[call.dtype]
    figures = tuple((size, node.sku.gemm_tflops[call.dtype][size]) for size in GEMM_SIZES)
    chosen = _choose(figures, lambda s: 3 * s * s * width + CUBLAS_WORKSPACE_MIB * MIB, node,
                     call.max_gpu_mem_mib, "gemm")
    if isinstance(chosen, str):
        return not_ok("error", "gemm", gpu.device, "tflops", chosen, gpu_uuid=gpu.gpu_uuid)
    all_loaded = not call.sequential
    loaded_s = 0.5 + count * SAMPLE_S
    reason = node.failure("gemm", gpu)
    if reason is not None:
        evidence = load_evidence(node, gpu, rng, loaded_s, power_share=0.97, all_loaded=all_loaded)
        return not_ok("error", "gemm", gpu.device, "tflops", reason, gpu_uuid=gpu.gpu_uuid, details=evidence)
    size, healthy_tflops = chosen
    true_tflops = (healthy_tflops * gpu.compute_factor * gpu.clock_factor(all_loaded)
                   * node.host_factor ** HOST_GEMM_EXPONENT)
    rates = noisy(rng, true_tflops, node.noise.gemm_cv, count)
    runs = max(1, round(SAMPLE_S * true_tflops * 1e12 / (2 * size ** 3)))
    evidence = load_evidence(node, gpu, rng, loaded_s, power_share=0.97, all_loaded=all_loaded)
    return measured("gemm", gpu.device, "tflops", "TFLOP/s", rates, gpu_uuid=gpu.gpu_uuid,
                    params={"dtype": call.dtype, "m": size, "n": size, "k": size,
                            "mode": "sequential" if call.sequential else "concurrent"},
                    details={"runs_per_sample": runs, "tflops_min": min(rates), "tflops_max": max(rates),
                             **evidence})


def membw(call: BundleCall, node: NodeState, draw: Draw) -> ProbeOutput:
    """Device-memory copy bandwidth per GPU (read + write). A throttled GPU copies a little slower."""
    count = sample_count(call.duration_s)
    visible = node.cuda_gpus
    records = [_membw_gpu(call, node, gpu, draw(f"membw:{gpu.index}"), count) for gpu in visible]
    turns = len(visible) if call.sequential else 1
    return ProbeOutput(tuple(records), SETUP_S["membw"] + turns * (0.2 + count * SAMPLE_S))


def _membw_gpu(call: BundleCall, node: NodeState, gpu: GpuState, rng: random.Random, count: int) -> dict[str, Any]:
    chosen = _choose(MEMBW_BUFFERS_MIB, lambda mib: 2 * mib * MIB, node, call.max_gpu_mem_mib, "membw")
    reason = chosen if isinstance(chosen, str) else node.failure("membw", gpu)
    if reason is not None or isinstance(chosen, str):
        return not_ok("error", "membw", gpu.device, "bandwidth", str(reason), gpu_uuid=gpu.gpu_uuid)
    buffer_mib, efficiency = chosen
    true_gbps = node.sku.membw_gbps * efficiency * gpu.clock_factor(not call.sequential) ** 0.5
    rates = noisy(rng, true_gbps, node.noise.membw_cv, count)
    runs = max(1, round(SAMPLE_S * true_gbps * 1e9 / (2 * buffer_mib * MIB)))
    return measured("membw", gpu.device, "bandwidth", "GB/s", rates, gpu_uuid=gpu.gpu_uuid,
                    params={"memory": "device", "buffer_mib": buffer_mib}, details={"runs_per_sample": runs})


def _nvlink_share(node: NodeState, gpu: GpuState) -> float:
    return (node.sku.nvlinks - len(gpu.nvlinks_down)) / node.sku.nvlinks


def p2p(call: BundleCall, node: NodeState, draw: Draw) -> ProbeOutput:
    """NVLink bandwidth: every ordered pair one way, then every pair both ways (GB/s).

    Through NVSwitch a pair runs at the rate of its end with fewer NVLinks up.
    """
    visible = node.cuda_gpus
    if len(visible) < 2:
        reason = f"needs at least 2 GPUs; this machine has {len(visible)} visible to torch"
        return ProbeOutput((not_ok("skipped", "p2p", "host", "bandwidth", reason),), SETUP_S["p2p"])
    chosen = _choose(PAIR_BUFFERS_MIB, lambda mib: 2 * mib * MIB, node, call.max_gpu_mem_mib,
                     "p2p (on the GPU with least free memory)")
    reason = chosen if isinstance(chosen, str) else node.failure("p2p", None)
    if reason is not None or isinstance(chosen, str):
        return ProbeOutput((not_ok("error", "p2p", "host", "bandwidth", str(reason)),), SETUP_S["p2p"])
    count = sample_count(min(call.duration_s, 0.2))
    pairs = [(a, b, "unidirectional") for a, b in itertools.permutations(visible, 2)]
    pairs += [(a, b, "bidirectional") for a, b in itertools.combinations(visible, 2)]
    records = tuple(_pair(node, a, b, direction, chosen, count, draw) for a, b, direction in pairs)
    return ProbeOutput(records, SETUP_S["p2p"] + len(pairs) * (0.03 + count * SAMPLE_S))


def _pair(node: NodeState, source: GpuState, target: GpuState, direction: str, chosen: tuple[int, float],
          count: int, draw: Draw) -> dict[str, Any]:
    buffer_mib, efficiency = chosen
    params = {"direction": direction, "src": source.device, "dst": target.device, "buffer_mib": buffer_mib}
    details: dict[str, Any] = {"peer_access": True, "peer_uuid": target.gpu_uuid}
    reason = node.failure("p2p", source) or node.failure("p2p", target)
    if reason is not None:
        return not_ok("error", "p2p", source.device, "bandwidth", reason, gpu_uuid=source.gpu_uuid,
                      params=params, details=details)
    nominal = node.sku.p2p_unidirectional_gbps if direction == "unidirectional" else node.sku.p2p_bidirectional_gbps
    true_gbps = nominal * efficiency * min(_nvlink_share(node, source), _nvlink_share(node, target))
    rates = noisy(draw(f"p2p:{direction}:{source.index}:{target.index}"), true_gbps, node.noise.membw_cv, count)
    moved_mib = buffer_mib * (1 if direction == "unidirectional" else 2)
    details["runs_per_sample"] = max(1, round(SAMPLE_S * true_gbps * 1e9 / (moved_mib * MIB)))
    return measured("p2p", source.device, "bandwidth", "GB/s", rates, gpu_uuid=source.gpu_uuid, params=params,
                    details=details)


def pcie(call: BundleCall, node: NodeState, draw: Draw) -> ProbeOutput:
    """Host↔device bandwidth per GPU from pinned memory, h2d for every GPU, then d2h (GB/s).

    Scales with the trained link width, and with the host's memory speed (pinned copies are
    bound by host memory when the host is starved). One GPU at a time, as the real probe runs.
    """
    chosen = _choose(PAIR_BUFFERS_MIB, lambda mib: mib * MIB, node, call.max_gpu_mem_mib, "pcie")
    count = sample_count(min(call.duration_s, 0.5))
    visible = node.cuda_gpus
    records = []
    for direction in ("h2d", "d2h"):
        for gpu in visible:
            if isinstance(chosen, str):
                records.append(not_ok("error", "pcie", gpu.device, "bandwidth", chosen, gpu_uuid=gpu.gpu_uuid))
                continue
            records.append(_pcie_gpu(node, gpu, direction, chosen, count, draw(f"pcie:{direction}:{gpu.index}")))
    per_gpu_s = 0.05 + count * SAMPLE_S + 0.1
    return ProbeOutput(tuple(records), SETUP_S["pcie"] + 2 * len(visible) * per_gpu_s)


def _pcie_gpu(node: NodeState, gpu: GpuState, direction: str, chosen: tuple[int, float], count: int,
              rng: random.Random) -> dict[str, Any]:
    buffer_mib, efficiency = chosen
    loaded_s = 0.05 + count * SAMPLE_S
    reason = node.failure("pcie", gpu)
    if reason is not None:
        # The real probe's failed record carries no params, only the sampler's evidence.
        evidence = load_evidence(node, gpu, rng, loaded_s, power_share=0.17, all_loaded=False)
        return not_ok("error", "pcie", gpu.device, "bandwidth", reason, gpu_uuid=gpu.gpu_uuid, details=evidence)
    nominal = node.sku.pcie_h2d_gbps if direction == "h2d" else node.sku.pcie_d2h_gbps
    true_gbps = nominal * efficiency * gpu.pcie_width / node.sku.pcie_width_max * node.host_factor
    rates = noisy(rng, true_gbps, node.noise.membw_cv, count)
    evidence = load_evidence(node, gpu, rng, loaded_s, power_share=0.17, all_loaded=False)
    return measured("pcie", gpu.device, "bandwidth", "GB/s", rates, gpu_uuid=gpu.gpu_uuid,
                    params={"direction": direction, "buffer_mib": buffer_mib, "host_memory": "pinned"},
                    details={"runs_per_sample": max(1, round(SAMPLE_S * true_gbps * 1e9 / (buffer_mib * MIB))),
                             **evidence})


def smclock(call: BundleCall, node: NodeState, draw: Draw) -> ProbeOutput:
    """Per GPU, one at a time: the median effective SM clock (MHz) and the slowest SM's FMA rate ratio."""
    records: list[dict[str, Any]] = []
    visible = node.cuda_gpus
    for gpu in visible:
        if call.max_gpu_mem_mib is not None and call.max_gpu_mem_mib < SMCLOCK_MIN_MIB:
            reason = f"--max-gpu-mem {call.max_gpu_mem_mib} MiB is below the {SMCLOCK_MIN_MIB} MiB needed"
            records += _smclock_not_ok("skipped", gpu, reason)
            continue
        failure = node.failure("smclock", gpu)
        if failure is not None:
            # probes/smclock.py reports a CUDA failure as "<exception type>: <message>".
            records += _smclock_not_ok("error", gpu, f"RuntimeError: {failure}")
            continue
        records += _smclock_gpu(node, gpu, draw(f"smclock:{gpu.index}"), call.duration_s)
    samples = max(3, min(30, int(call.duration_s / 0.02)))
    return ProbeOutput(tuple(records), SETUP_S["smclock"] + len(visible) * (0.3 + samples * 0.02))


def _smclock_not_ok(status: str, gpu: GpuState, reason: str) -> list[dict[str, Any]]:
    return [not_ok(status, "smclock", gpu.device, metric, reason, gpu_uuid=gpu.gpu_uuid)
            for metric in ("sm_clock", "sm_fma_rate_min_ratio")]


def _smclock_gpu(node: NodeState, gpu: GpuState, rng: random.Random, duration_s: float) -> list[dict[str, Any]]:
    sku = node.sku
    samples = max(3, min(30, int(duration_s / 0.02)))
    clock_mhz = sku.sm_clock_max_mhz * gpu.clock_factor(all_loaded=False)  # one GPU at a time
    per_sm_mhz = [round(clock_mhz * rng.gauss(0.999, 0.0008), 1) for _ in range(sku.sm_count)]
    per_sm_gflops = [round(mhz * sku.fp32_lanes_per_sm * 2 / 1000 * rng.gauss(0.975, 0.001), 1)
                     for mhz in per_sm_mhz]
    gflops_median = statistics.median(per_sm_gflops)
    slowest = sorted(range(sku.sm_count), key=lambda sm: (per_sm_mhz[sm], sm))[:3]
    slowest_fma = sorted(range(sku.sm_count), key=lambda sm: (per_sm_gflops[sm], sm))[:3]
    ratio_details = {"fma_gflops_median": round(gflops_median, 2), "fma_gflops_min": min(per_sm_gflops),
                     "fma_gflops_max": max(per_sm_gflops), "slowest_fma_sm_ids": slowest_fma,
                     "mismatched_result_sm_ids": [], "sms_seen": sku.sm_count, "sms_expected": sku.sm_count}
    details = {"min_mhz": min(per_sm_mhz), "max_mhz": max(per_sm_mhz),
               "spread_pct": round((max(per_sm_mhz) - min(per_sm_mhz)) / statistics.median(per_sm_mhz) * 100, 3),
               "slowest_sm_ids": slowest, **ratio_details,
               "fma_min_ratio": round(min(per_sm_gflops) / gflops_median, 4),
               "migrated_blocks": 0, "smid_limit": sku.sm_count, "sm_ids": list(range(sku.sm_count)),
               "per_sm_clock_mhz": per_sm_mhz, "per_sm_fma_gflops": per_sm_gflops, "iterations": 8192,
               "exclusive_shared_bytes": sku.shared_memory_per_sm_bytes, "arch": sku.cuda_arch,
               "image": "cubin", "compiler": "nvrtc"}
    params = {"threads_per_block": 512, "chains_per_thread": 8, "blocks_per_sm": 1}
    clocks = [statistics.median(per_sm_mhz) * rng.gauss(1.0, 0.0005) for _ in range(samples)]
    ratios = [min(per_sm_gflops) / gflops_median * rng.gauss(1.0, 0.0005) for _ in range(samples)]
    return [measured("smclock", gpu.device, "sm_clock", "MHz", clocks, gpu_uuid=gpu.gpu_uuid, params=params,
                     details=details),
            measured("smclock", gpu.device, "sm_fma_rate_min_ratio", "ratio", ratios, gpu_uuid=gpu.gpu_uuid,
                     params=params, details=ratio_details)]


ProbeRun = Callable[[BundleCall, NodeState, Draw], ProbeOutput]
PROBES: Mapping[str, ProbeRun] = {"facts": facts, "telemetry": telemetry, "gemm": gemm, "membw": membw,
                                  "p2p": p2p, "pcie": pcie, "smclock": smclock}
