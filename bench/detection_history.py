"""The ``history`` rows of bench/detection.py: a part sliding over successive simulated sweeps,
seen by ``gpudiag history``'s trend (gpudiag.store.trend) as a ``watch`` before it crosses the
line, or a ``fail`` (a slow degradation) once past it; and how often a flat part is either.

A series: an 8-node fleet swept 6 times, each sweep with a fleet seed of its own (fresh noise at
the row's CV, in GEMM and memory bandwidth alike), through the real pipeline into one real Store,
back to back (several sweeps start in the same second: their ids keep their order). After a
healthy first sweep, one GPU of one node loses ``step`` percent of its GEMM speed a sweep
(``gpu``), and every GPU of another node does too (``node``: the node's median is the part);
both chosen by the seed. The other six nodes are flat. Each host's rows are read back as
``Store.host_history`` gives them, and its first 3, 4, 5 and 6 sweeps are judged as a history of
that many sweeps (``host_trends`` with the shipped thresholds): each window is a series of its
own, the longer ones the shorter ones continued.

Printed per CV, window (``3sw``: 3 sweeps) and step (``slow%``: the loss a sweep), for ``gpu``
and ``node``: ``kind``, the verdicts the part got (``watch``, ``fail`` or both); ``recall``,
the series whose part was watched or failed (a sliding part is right when flagged);
``precision``, the flags on the part (the node's GPUs count as the node) among those and the
flags elsewhere; ``faults``, the series; ``hdrain``, flags elsewhere (history drains nothing: the
flat parts it would name). Then per CV and window, ``healthy``: the six flat nodes of every
series, each GPU's two figures and the node's median (18 parts a node): how many were watched
and failed, per part and per node (a node with any).

How soon a slide can be told from noise is bound by the slope's own uncertainty: ``z``, the
expected slope of a part's own line over its standard error (step × √Σ(x − x̄)² / CV; Theil–Sen's
is 5-8 % wider, and the trend's z says so: gpudiag.store.trendfit.THEIL_SEN_SPREAD), is printed
in the label where it is under 4, where no bar that keeps flat parts quiet finds the part 19
times in 20 on its own line. A GPU is also judged against its siblings
with its start held to their level (gpudiag.store.trendfit.SiblingSlope): there the slope's z is
step × √Σx² / (CV × ~1.1, the siblings' median's own noise), 1.5 to 1.7 times as far; a node's
median has no siblings, but a median's noise (CV × 1.25 / √8), 2.3 times as far.

``--smoke``: one series of 5 sweeps at the first CV, 3 % a sweep, judged as 5 sweeps.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpudiag.analysis.thresholds import default_thresholds
from gpudiag.run.fanout import SweepOptions
from gpudiag.run.hostprobe import ProbeOptions
from gpudiag.run.request import Judging, LinkOptions, Reach, SweepRequest
from gpudiag.run.sweep import run_sweep
from gpudiag.sim import FleetFile
from gpudiag.store.store import Store
from gpudiag.store.trend import WATCH_SLOPE_Z, fleet_trends

NODES = 8
GPUS = 8
HISTORY_PROBES = ("gemm", "membw")
WINDOWS = (3, 4, 5, 6)  # sweeps in a judged history
STEPS_PCT = (1.0, 2.0, 3.0)  # a sliding part's loss a sweep
FIGURE = "gemm.tflops bf16"
FLAGS = ("watch", "fail")
# Below this expected slope z a part cannot be found 19 times in 20 at a bar that keeps flat parts quiet.
HARD_Z = 4.0


def _names() -> list[str]:
    return [f"node{i:04d}" for i in range(1, NODES + 1)]


@dataclass(frozen=True)
class Planted:
    """A series' sliding parts: GPU ``gpu`` of ``gpu_host``, and every GPU of ``node_host``."""

    gpu_host: str
    gpu: int
    node_host: str

    def faults(self, loss_pct: float) -> list[dict]:
        if loss_pct <= 0:
            return []
        factor = 1 - loss_pct / 100
        return [{"kind": "slow_gpu", "host": self.gpu_host, "gpu": self.gpu, "factor": factor},
                *({"kind": "slow_gpu", "host": self.node_host, "gpu": gpu, "factor": factor} for gpu in range(GPUS))]

    def part(self, host: str, figure: str, gpu: int | None) -> str | None:
        """``gpu`` or ``node`` where (host, figure, gpu) is a sliding part, else None."""
        if figure != FIGURE:
            return None
        if (host, gpu) == (self.gpu_host, self.gpu):
            return "gpu"
        return "node" if host == self.node_host else None


def planted(cv: float, step: float, seed: int) -> Planted:
    rng = random.Random(f"history:{cv}:{step}:{seed}")
    gpu_host, node_host = rng.sample(_names(), 2)
    return Planted(gpu_host, rng.randrange(GPUS), node_host)


def history_rows(folder: Path, seed: int, cv: float, step: float, sweeps: int,
                 parts: Planted) -> dict[str, list[dict]]:
    """Each host's history rows (newest first) over ``sweeps`` simulated sweeps, ``parts``
    losing ``step`` percent a sweep after the first."""
    store = folder / "history.db"
    for index in range(sweeps):
        fleet = folder / f"fleet{index}.json"
        fleet.write_text(json.dumps({"nodes": NODES, "name_format": "node{:04d}", "gpus_per_node": GPUS,
                                     "seed": 1000 * seed + index, "noise": {"gemm_cv": cv, "membw_cv": cv},
                                     "faults": parts.faults(index * step)}))
        request = SweepRequest(hosts_argument=None, reach=Reach(stand_in=FleetFile(str(fleet))),
                               judging=Judging(store_path=str(store)), links=LinkOptions(mode="none"),
                               sweep=SweepOptions(probe=ProbeOptions(names=HISTORY_PROBES, duration_s=0.2)))
        run_sweep(request)
    with Store.open(store, readonly=True) as opened:
        return {name: opened.host_history(name, sweeps) for name in _names()}


@dataclass
class Tally:
    """One row's counts: series, the part flagged, its verdicts, flags on it, all flags, flags elsewhere."""

    series: int = 0
    found: int = 0
    verdicts: Counter = field(default_factory=Counter)
    true_flags: int = 0
    flags: int = 0
    elsewhere: int = 0
    seconds: float = 0.0


@dataclass
class Healthy:
    """The flat nodes' parts: judged, watched, failed; nodes judged, with any watch or fail."""

    parts: int = 0
    watch: int = 0
    fail: int = 0
    nodes: int = 0
    nodes_flagged: int = 0


def judge(rows: dict[str, list[dict]], window: int, parts: Planted, watch_z: float = WATCH_SLOPE_Z
          ) -> tuple[dict[str, str], list[tuple[str, str, str, int | None]], Healthy]:
    """The first ``window`` sweeps of every host judged: each sliding part's verdict, every flag
    (verdict, host, figure, GPU), and the flat nodes' tally."""
    thresholds = default_thresholds()
    verdicts: dict[str, str] = {}
    flags: list[tuple[str, str, str, int | None]] = []
    healthy = Healthy()
    hosts = fleet_trends({host: history[-window:] for host, history in rows.items()}, {},  # as a sweep judges
                          thresholds.history_degradation_pct, thresholds.history_min_sweeps,
                          thresholds.history_slope_z, warn_pct=thresholds.deficit_warn_pct, watch_z=watch_z)
    for host, trends in hosts.items():
        judged = [trend for figure in trends.figures for trend in (figure.median, *figure.gpus)]
        for trend in judged:
            part = parts.part(host, trend.figure, trend.gpu)
            if part == "gpu" or (part == "node" and trend.gpu is None):
                verdicts[part] = trend.verdict
            if trend.verdict in FLAGS:
                flags.append((trend.verdict, host, trend.figure, trend.gpu))
        if host not in (parts.gpu_host, parts.node_host):
            healthy.parts += len(judged)
            healthy.watch += sum(trend.verdict == "watch" for trend in judged)
            healthy.fail += sum(trend.verdict == "fail" for trend in judged)
            healthy.nodes += 1
            healthy.nodes_flagged += any(trend.verdict in FLAGS for trend in judged)
    return verdicts, flags, healthy


def expected_z(step: float, cv: float, window: int) -> float:
    """The sliding part's slope over its standard error, were the noise known (least squares)."""
    spread = math.sqrt(sum((x - (window - 1) / 2) ** 2 for x in range(window)))
    return step * spread / (100 * cv)


def _kind(verdicts: Counter) -> str:
    shown = [verdict for verdict in FLAGS if verdicts[verdict]]
    return "+".join(shown) if shown else "none"


def _print_row(part: str, window: int, cv: float, step: float, tally: Tally) -> None:
    precision = f"{tally.true_flags / tally.flags:.3f}" if tally.flags else "  -  "
    z = expected_z(step, cv, window)
    label = f"history {part} {window}sw" + (f" z{z:.1f}" if z < HARD_Z else "")
    print(f"{label:<16} {cv:>5.3f} {step:>5g} {_kind(tally.verdicts):<14} {precision:>9} "
          f"{tally.found / tally.series:>7.3f} {tally.series:>6} {'-':>6} {'-':>6} {tally.elsewhere:>6} "
          f"{tally.seconds / tally.series:>7.1f}", flush=True)


def _print_healthy(window: int, cv: float, healthy: Healthy) -> None:
    print(f"{'history healthy ' + str(window) + 'sw':<16} {cv:>5.3f} {'none':>5} flat parts watched "
          f"{healthy.watch}/{healthy.parts} = {100 * healthy.watch / healthy.parts:.2f} %, failed {healthy.fail}/"
          f"{healthy.parts} = {100 * healthy.fail / healthy.parts:.2f} %; flat nodes with either "
          f"{healthy.nodes_flagged}/{healthy.nodes}", flush=True)


def run_history(cvs: Sequence[float], seeds: int, smoke: bool = False) -> None:
    """Every history row: each CV, window and step, for a GPU and a node; then each window's flat parts."""
    windows, steps = ((5,), (3.0,)) if smoke else (WINDOWS, STEPS_PCT)
    for cv in cvs[:1] if smoke else cvs:
        tallies = {(part, window, step): Tally() for part in ("gpu", "node") for window in windows for step in steps}
        healthy = {window: Healthy() for window in windows}
        for step in steps:
            for seed in range(1, seeds + 1):
                parts = planted(cv, step, seed)
                with tempfile.TemporaryDirectory() as folder:
                    started = time.perf_counter()
                    rows = history_rows(Path(folder), seed, cv, step, max(windows), parts)
                    seconds = (time.perf_counter() - started) / max(windows)
                for window in windows:
                    verdicts, flags, flat = judge(rows, window, parts)
                    for part in ("gpu", "node"):
                        tally = tallies[(part, window, step)]
                        tally.series += 1
                        tally.seconds += seconds
                        tally.verdicts[verdicts.get(part, "too_short")] += 1
                        tally.found += verdicts.get(part) in FLAGS
                        named = [parts.part(host, figure, gpu) for _, host, figure, gpu in flags]
                        tally.true_flags += named.count(part)
                        tally.elsewhere += named.count(None)
                        tally.flags += named.count(part) + named.count(None)
                    bucket = healthy[window]
                    for name in ("parts", "watch", "fail", "nodes", "nodes_flagged"):
                        setattr(bucket, name, getattr(bucket, name) + getattr(flat, name))
        for window in windows:
            for part in ("gpu", "node"):
                for step in steps:
                    _print_row(part, window, cv, step, tallies[(part, window, step)])
            _print_healthy(window, cv, healthy[window])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cvs", type=float, nargs="+", default=[0.005, 0.01, 0.02])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="one series of 5 sweeps at the first CV, in seconds")
    arguments = parser.parse_args()
    print(f"{'scenario':<16} {'CV':>5} {'slow%':>5} {'kind':<14} {'precision':>9} {'recall':>7} {'faults':>6} "
          f"{'shift':>6} {'exit':>6} {'hdrain':>6} {'sweep s':>7}", flush=True)
    run_history(arguments.cvs[:1] if arguments.smoke else arguments.cvs, 1 if arguments.smoke else arguments.seeds,
                arguments.smoke)


if __name__ == "__main__":
    main()
