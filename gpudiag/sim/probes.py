"""One function per simulated probe (facts, telemetry, gemm, membw, p2p, pcie, smclock; xid in
xidprobe.py): the records the real probe of probes/ prints for a node in that state, and the
simulated seconds it takes."""

from __future__ import annotations

import itertools
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..pause.sizing import (
    DTYPE_BYTES,
    GEMM_SIZES,
    GEMM_WORKSPACE_MIB,
    HEADROOM_FRACTION,
    HEADROOM_MIN_BYTES,
    MEMBW_BUFFER_MIB,
    P2P_BUFFER_MIB,
    PCIE_BUFFER_MIB,
    SMCLOCK_SEGMENT_MIB,
)
from .nicports import port_records
from .nvml import gpu_telemetry, load_evidence
from .printed import MIB, SAMPLE_S, BundleCall, ProbeOutput, measured, noisy, not_ok, record, sample_count
from .state import Draw, GpuState, NodeState
from .xidprobe import xid

# The probes' sizes are the bundle's catalogue's (gpudiag/pause/sizing.py): GEMM's square sizes,
# largest first, the healthy TFLOP/s of each the SKU table's per-size figure; the copy probes'
# buffer sizes, largest first, each with how fast it runs relative to the largest (one figure per
# size of the catalogue).
MEMBW_BUFFERS_MIB = tuple(zip(MEMBW_BUFFER_MIB, (1.0, 0.99, 0.98, 0.96), strict=True))
P2P_BUFFERS_MIB = tuple(zip(P2P_BUFFER_MIB, (1.0, 0.96, 0.88), strict=True))
PCIE_BUFFERS_MIB = tuple(zip(PCIE_BUFFER_MIB, (1.0, 0.96, 0.88), strict=True))
# What the driver and CUDA context take before any probe allocates (MiB).
CONTEXT_MIB = 530
# Simulated wall time (s) of each probe's fixed part.
SETUP_S = {"facts": 0.6, "telemetry": 0.4, "gemm": 1.0, "membw": 0.4, "p2p": 1.0, "pcie": 0.5, "smclock": 1.5}
# A host starved of CPU (slow_node, factor f) launches kernels late: GEMM runs at f ** this.
HOST_GEMM_EXPONENT = 0.25


# ------------------------------------------------------------------------------ memory sizing


def _choose(sizes: Sequence[tuple[int, float]], bytes_needed: Callable[[int], int], free_mib: int,
            cap_mib: int | None, what: str) -> tuple[int, float] | str:
    """The largest (size, figure) that fits the GPU's ``free_mib`` (MiB, before our CUDA context)
    and the cap, or the refusal text.

    ``figure`` is whatever goes with the size: the healthy rate (GEMM) or the efficiency.
    """
    free_bytes = max(0, free_mib - CONTEXT_MIB) * MIB
    headroom = max(HEADROOM_MIN_BYTES, int(free_bytes * HEADROOM_FRACTION))
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
    (NVML's device count includes a GPU whose handle then fails with GPU_IS_LOST). ``gpus`` maps
    each ``cuda:N`` to its NVML index, UUID and bus id, as probes/hostfacts.py does.
    """
    reason = node.failure("facts", None)
    if reason is not None:
        return ProbeOutput((not_ok("error", "facts", "host", "gpu_count", reason),), SETUP_S["facts"])
    rng, host, visible = draw("facts"), node.sku.host, node.cuda_gpus
    usable_cpus = max(1, round(host.cpu_count * node.host_factor))
    # A starved host (slow_node) runs far more work than it has usable CPUs for.
    load = rng.uniform(0.2, 2.5) + (1.0 - node.host_factor) * host.cpu_count * 1.5
    details = {"hostname": node.hostname or node.host, "cpu_model": host.cpu_model, "cpu_count": host.cpu_count,
               "cpu_count_usable": usable_cpus, "load_average_1m": round(load, 2),
               "memory_total_mib": host.memory_total_mib,
               "memory_available_mib": int(host.memory_total_mib * rng.uniform(0.93, 0.97) * node.host_factor),
               "kernel": "5.15.0-105-generic", "os": "Ubuntu 22.04.4 LTS", "python_version": "3.10.12",
               "driver_version": node.driver, "pci_gpu_count": len(node.gpus), "nvml_gpu_count": len(node.gpus),
               "torch_version": node.torch, "cuda_version": node.cuda,
               "nccl_version": "2.20.5", "gpu_count": len(visible), "gpu_model": node.sku.gpu_model,
               "gpu_memory_mib": node.gpu_memory_mib, "gpu_uuids": [gpu.gpu_uuid for gpu in visible],
               "platform": node.platform,
               "gpus": [{"cuda_index": gpu.cuda_index, "nvml_index": gpu.nvml_index, "gpu_uuid": gpu.gpu_uuid,
                         "pci_bus_id": gpu.pci_bus_id} for gpu in visible]}
    facts_record = record("facts", "host", "gpu_count", len(visible), "count", details=details)
    return ProbeOutput((facts_record,), SETUP_S["facts"])


def telemetry(call: BundleCall, node: NodeState, draw: Draw) -> ProbeOutput:
    """Per GPU NVML lists (``gpu:N``): identity, then every metric of probes/telemetry.py, GPUs idle;
    then one ``nic_port`` record per rail (gpudiag/sim/nicports.py).

    A lost GPU is one ``error`` identity record, as probes/telemetry.py prints when NVML cannot
    give a handle for it.
    """
    records: list[dict[str, Any]] = []
    for gpu in node.gpus:
        records += gpu_telemetry(node, gpu, draw(f"telemetry:{gpu.index}"))
    records += port_records(node.sku.network.rails, node.sku.network.rail_line_rate_gbps, node.nic_ports)
    return ProbeOutput(tuple(records), SETUP_S["telemetry"] + 0.08 * len(node.gpus))


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
    chosen = _choose(figures, lambda s: 3 * s * s * width + GEMM_WORKSPACE_MIB * MIB, node.free_mib(gpu),
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
    chosen = _choose(MEMBW_BUFFERS_MIB, lambda mib: 2 * mib * MIB, node.free_mib(gpu), call.max_gpu_mem_mib,
                     "membw")
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
    chosen = _choose(P2P_BUFFERS_MIB, lambda mib: 2 * mib * MIB, min(node.free_mib(gpu) for gpu in visible),
                     call.max_gpu_mem_mib,
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
    true_gbps = (nominal * efficiency * min(_nvlink_share(node, source), _nvlink_share(node, target))
                 * source.p2p_factor(target))
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
    count = sample_count(min(call.duration_s, 0.5))
    visible = node.cuda_gpus
    records = []
    for direction in ("h2d", "d2h"):
        for gpu in visible:
            chosen = _choose(PCIE_BUFFERS_MIB, lambda mib: mib * MIB, node.free_mib(gpu), call.max_gpu_mem_mib, "pcie")
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
        if call.max_gpu_mem_mib is not None and call.max_gpu_mem_mib < SMCLOCK_SEGMENT_MIB:
            reason = f"--max-gpu-mem {call.max_gpu_mem_mib} MiB is below the {SMCLOCK_SEGMENT_MIB} MiB needed"
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
                                  "p2p": p2p, "pcie": pcie, "smclock": smclock, "xid": xid}
