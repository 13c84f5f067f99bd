"""The rows of bench/detection.py that judge a GPU against its siblings and against noise (issue 16).

- ``siblings``: a 1-node and a 2-node job (``siblings 1n``, ``siblings 2n``), no baseline, one
  GPU slower by the slowdown: too few hosts for a fleet level, and the SKU figure's 3 % spread
  hides less than 9 %; the GPU's seven siblings find it. Expected: its ``slow_gpu``; exit 1 at
  slowdowns of 8 % or more (a confirmed deficit of ``deficit_fail``, 6 %: at 8 % the mean of two
  runs stays above it; at 7 % it fell either side, and the finding was a warn or a fail).
- ``starved``: a 16-node fleet, one host starved (a ``slow_node`` fault of factor 0.7: PCIe
  copies 30 % slow, GEMM 8.5 % on every GPU) with one of its GPUs slower still by the slowdown.
  Expected: the host's ``slow_node`` AND the GPU's ``slow_gpu`` (judged against its siblings,
  which share the starved host); exit 1.
- ``cv3``: GEMM and memory noise at CV 3 % whatever ``--cvs`` says (network links at 1 %), P2P
  probed too, on fleets of ``--sizes``: ``cv3 N`` one GPU slower by the slowdown (its
  ``slow_gpu``, found by the noisy key's several re-test runs: gpudiag.analysis.noisy; exit 1
  scored at 20 % and more, where even one run's deficit is 6 sigma: at 8 % the mean of six runs
  is above ``deficit_fail`` about nineteen times in twenty, a warn otherwise), and ``cv3
  healthy N``: the share of a fault-free fleet's GPUs named by a ``fail`` finding (a finding
  without a GPU names all of its host's; a P2P pair both of its GPUs) and the P2P
  ``slow_link`` fails, over ``--seeds`` sweeps (target: <= 0.1 % of GPUs, no P2P pair).

Each builder returns the fields of a detection.Case.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpudiag.run.fanout import SweepOptions
from gpudiag.run.hostprobe import ProbeOptions

GPUS = 8
SIBLING_SCENARIOS = ("siblings", "starved", "cv3")
NOISY_CV = 0.03
NOISY_LINK_CV = 0.01
NOISY_PROBES = ("facts", "telemetry", "gemm", "membw", "pcie", "p2p")
STARVED_FACTOR = 0.7
STARVED_NODES = 16

CaseFields = dict[str, Any]


def _fleet(size: int, cv: float, seed: int, faults: list[dict], link_cv: float | None = None) -> dict:
    return {"nodes": size, "name_format": "node{:04d}", "gpus_per_node": GPUS, "seed": seed,
            "noise": {"gemm_cv": cv, "membw_cv": cv, "link_cv": 2 * cv if link_cv is None else link_cv},
            "faults": faults}


def _slow_gpu(host: str, gpu: int, slowdown_pct: float) -> dict:
    return {"kind": "slow_gpu", "host": host, "gpu": gpu, "factor": 1 - slowdown_pct / 100}


def siblings_case(nodes: int, cv: float, slowdown_pct: float, seed: int) -> CaseFields:
    """A ``nodes``-node job, no baseline, one GPU slower by ``slowdown_pct``."""
    rng = random.Random(f"siblings:{nodes}:{cv}:{slowdown_pct}:{seed}")
    host, gpu = f"node{rng.randint(1, nodes):04d}", rng.randrange(GPUS)
    return {"fleet": _fleet(nodes, cv, seed, [_slow_gpu(host, gpu, slowdown_pct)]),
            "expected": frozenset({("slow_gpu", host, gpu)}), "exit_expected": 1 if slowdown_pct >= 8 else None}


def starved_case(cv: float, slowdown_pct: float, seed: int) -> CaseFields:
    """A starved host among ``STARVED_NODES``, one of its GPUs slower still by ``slowdown_pct``."""
    rng = random.Random(f"starved:{cv}:{slowdown_pct}:{seed}")
    host, gpu = f"node{rng.randint(1, STARVED_NODES):04d}", rng.randrange(GPUS)
    faults = [{"kind": "slow_node", "host": host, "factor": STARVED_FACTOR}, _slow_gpu(host, gpu, slowdown_pct)]
    return {"fleet": _fleet(STARVED_NODES, cv, seed, faults),
            "expected": frozenset({("slow_node", host, None), ("slow_gpu", host, gpu)}), "exit_expected": 1}


def noisy_case(size: int, slowdown_pct: float | None, seed: int) -> CaseFields:
    """A ``size``-node fleet at CV 3 % with P2P probed: one GPU slower by ``slowdown_pct`` (None: none)."""
    rng = random.Random(f"cv3:{size}:{slowdown_pct}:{seed}")
    faults, expected = [], frozenset()
    if slowdown_pct is not None:
        host, gpu = f"node{rng.randint(1, size):04d}", rng.randrange(GPUS)
        faults, expected = [_slow_gpu(host, gpu, slowdown_pct)], frozenset({("slow_gpu", host, gpu)})
    sweep = SweepOptions(probe=ProbeOptions(names=NOISY_PROBES), fanout=64)
    return {"fleet": _fleet(size, NOISY_CV, seed, faults, NOISY_LINK_CV), "expected": expected,
            "exit_expected": 1 if slowdown_pct is not None and slowdown_pct >= 20 else None,
            "request": (("sweep", sweep),)}


def sibling_builders(scenario: str, sizes: list[int]) -> list[tuple[str, Callable[[float, float, int], CaseFields]]]:
    """(label, build(cv, slowdown_pct, seed)) for each row of ``scenario`` (one of SIBLING_SCENARIOS)."""
    if scenario == "siblings":
        return [(f"siblings {nodes}n", lambda cv, s, seed, n=nodes: siblings_case(n, cv, s, seed)) for nodes in (1, 2)]
    if scenario == "starved":
        return [("starved", starved_case)]
    return [(f"cv3 {size}", lambda cv, s, seed, size=size: noisy_case(size, s, seed)) for size in sizes]


def scenario_cvs(scenario: str, cvs: list[float]) -> list[float]:
    """The CVs a scenario runs at: ``cv3`` at 3 % alone, every other at ``--cvs``."""
    return [NOISY_CV] if scenario == "cv3" else cvs


def parts_at_fail(findings: list[dict]) -> set[tuple[str, int]]:
    """The GPUs (host, NVML index) ``fail`` findings name: a finding without a GPU names all of its
    host's (and its peer host's), a P2P pair both of its GPUs."""
    parts: set[tuple[str, int]] = set()
    for finding in findings:
        if finding["severity"] != "fail":
            continue
        if finding.get("gpu") is None:
            hosts = [finding["host"]] + ([finding["peer"]] if finding.get("peer") else [])
            parts |= {(host, gpu) for host in hosts for gpu in range(GPUS)}
            continue
        parts.add((finding["host"], finding["gpu"]))
        if finding.get("peer_gpu") is not None:
            parts.add((finding.get("peer") or finding["host"], finding["peer_gpu"]))
    return parts


def healthy_at_fail(sizes: list[int], seeds: int, sweep: Callable[[CaseFields, Path], tuple[list[dict], int]]) -> None:
    """``cv3 healthy N``: the share of a fault-free CV 3 % fleet's GPUs named at ``fail``."""
    for size in sizes:
        flagged, p2p_pairs, seconds = 0, 0, 0.0
        for seed in range(1, seeds + 1):
            with tempfile.TemporaryDirectory() as folder:
                started = time.perf_counter()
                findings, _ = sweep(noisy_case(size, None, seed), Path(folder))
                seconds += time.perf_counter() - started
            flagged += len(parts_at_fail(findings))
            p2p_pairs += sum(1 for f in findings if f["kind"] == "slow_link" and f["severity"] == "fail"
                             and str(f.get("metric", "")).startswith("p2p."))
        gpus = size * GPUS * seeds
        print(f"{'cv3 healthy ' + str(size):<16} {NOISY_CV:>5.3f} {'none':>5} GPUs at fail {flagged}/{gpus} = "
              f"{100 * flagged / gpus:.3f} %; P2P slow_link fails {p2p_pairs} ({seeds} sweeps, "
              f"{seconds / seeds:.1f} s each; target <= 0.1 %, 0)", flush=True)
