"""The ``history`` rows of bench/detection.py: slow degradation found by ``gpudiag history``'s trend
(gpudiag.store.trend) over successive simulated sweeps.

An 8-node fleet is swept once per factor, each sweep with a fleet seed of its own (fresh noise
at the row's CV), through the real pipeline into the real Store; one GPU of one node (chosen by
the seed) loses ``step`` percent a sweep after a healthy first sweep; every other GPU, and every
figure but that GPU's GEMM, is flat. Each host's rows are read back as ``Store.host_history``
gives them (one store per sweep: a store orders sweeps by their start time in whole seconds) and
judged by ``host_trends`` with the shipped thresholds. Scored: the declining GPU's GEMM trend
flagged (recall), flags that are it (precision), and flags anywhere else (``hflag``, in the
``hdrain`` column: history drains nothing, its flags are the healthy parts it would name).
Rows: 4 sweeps (3 losses: the fall is 3 × step) and 5 sweeps (4 × step).
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from pathlib import Path

from gpudiag.analysis.thresholds import default_thresholds
from gpudiag.run.fanout import SweepOptions
from gpudiag.run.hostprobe import ProbeOptions
from gpudiag.run.request import Judging, LinkOptions, Reach, SweepRequest
from gpudiag.run.sweep import run_sweep
from gpudiag.sim import FleetFile
from gpudiag.store.store import Store
from gpudiag.store.trend import host_trends

NODES = 8
GPUS = 8
HISTORY_PROBES = ("gemm", "membw")
WINDOWS = (4, 5)  # sweeps in a row's series
STEP_PCT = 2.0  # the declining GPU's loss a sweep
FIGURE = "gemm.tflops bf16"


def _names() -> list[str]:
    return [f"node{i:04d}" for i in range(1, NODES + 1)]


def history_rows(folder: Path, seed: int, cv: float, sweeps: int, host: str, gpu: int) -> dict[str, list[dict]]:
    """Each host's history rows (newest first) over ``sweeps`` simulated sweeps, GPU ``gpu`` of
    ``host`` losing STEP_PCT a sweep after the first."""
    rows: dict[str, list[dict]] = {name: [] for name in _names()}
    for index in range(sweeps):
        faults = [] if index == 0 else [{"kind": "slow_gpu", "host": host, "gpu": gpu,
                                         "factor": 1 - index * STEP_PCT / 100}]
        fleet = folder / f"fleet{index}.json"
        fleet.write_text(json.dumps({"nodes": NODES, "name_format": "node{:04d}", "gpus_per_node": GPUS,
                                     "seed": 1000 * seed + index, "noise": {"gemm_cv": cv, "membw_cv": cv},
                                     "faults": faults}))
        store = folder / f"sweep{index}.db"
        request = SweepRequest(hosts_argument=None, reach=Reach(stand_in=FleetFile(str(fleet))),
                               judging=Judging(store_path=str(store)), links=LinkOptions(mode="none"),
                               sweep=SweepOptions(probe=ProbeOptions(names=HISTORY_PROBES, duration_s=0.2)))
        run_sweep(request)
        with Store.open(store, readonly=True) as opened:
            for name in rows:
                rows[name] = opened.host_history(name, 1) + rows[name]
    return rows


def run_history_row(cv: float, sweeps: int, seeds: int) -> None:
    """One printed row (detection.py's columns) over ``seeds`` series of ``sweeps`` sweeps."""
    thresholds = default_thresholds()
    hits = flags = true_flags = elsewhere = 0
    seconds = 0.0
    for seed in range(1, seeds + 1):
        rng = random.Random(f"history:{cv}:{sweeps}:{seed}")
        host, gpu = rng.choice(_names()), rng.randrange(GPUS)
        with tempfile.TemporaryDirectory() as folder:
            started = time.perf_counter()
            rows = history_rows(Path(folder), seed, cv, sweeps, host, gpu)
            seconds += (time.perf_counter() - started) / sweeps
        found = [(name, trend.figure, trend.gpu) for name, history in rows.items()
                 for trend in host_trends(name, history, [], thresholds.history_degradation_pct,
                                          thresholds.history_min_sweeps, thresholds.history_slope_z).degradations]
        planted = (host, FIGURE, gpu)
        hits += planted in found
        flags += len(found)
        true_flags += found.count(planted)
        elsewhere += sum(1 for place in found if place[0] != host)
    precision = f"{true_flags / flags:.3f}" if flags else "  -  "
    label = f"history {sweeps}sw"
    print(f"{label:<16} {cv:>5.3f} {STEP_PCT * (sweeps - 1):>5g} {'slow_degradation':<14} {precision:>9} "
          f"{hits / seeds:>7.3f} {seeds:>6} {'-':>6} {'-':>6} {elsewhere:>6} {seconds / seeds:>7.1f}", flush=True)


def run_history(cvs: list[float], seeds: int) -> None:
    """Every history row: each window at each CV."""
    for cv in cvs:
        for sweeps in WINDOWS:
            run_history_row(cv, sweeps, seeds)
