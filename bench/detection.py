"""Detection benchmark: precision and recall of the whole pipeline on simulated fleets.

For each fleet size, noise level and slowdown, a fleet is generated with random faults of every
node/GPU kind on a share of its nodes, swept through the real pipeline (plan, runner, analysis
with re-tests) over the simulated transport, and the findings compared with the faults. The
analysis never sees the faults: they are only used here, to score.

Printed: precision and recall per fault kind and per slowdown size, and the share of healthy
hosts flagged on fault-free fleets. Targets at noise CV <= 1 %: precision and recall >= 0.99
for slowdowns >= 10 %, >= 0.95 at 5 %, and <= 1 % of healthy hosts flagged.

slow_nic and slow_link act on the pairwise network probes, which this version does not run yet;
they are left out of the fault mix.

Usage: python bench/detection.py [--sizes 64 256 1024] [--cvs 0.005 0.01 0.02]
                                 [--slowdowns 3 5 10 20 50] [--fault-share 0.05] [--seeds 1]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpudiag.nodeprobe import ProbeOptions  # noqa: E402
from gpudiag.plan import SweepRequest, run_plan  # noqa: E402
from gpudiag.progress import QuietProgress  # noqa: E402
from gpudiag.sweep import SweepOptions  # noqa: E402

SIZED_KINDS = ("slow_gpu", "throttled", "slow_node")  # faults with a slowdown factor
FIXED_KINDS = ("degraded_pcie", "nvlink_down")  # faults that are a state, not a size
GPU_KINDS = {"slow_gpu", "throttled", "degraded_pcie", "nvlink_down"}
REASONS = ("hw_thermal", "hw_slowdown", "hw_power_brake")
PROBES = ("facts", "telemetry", "gemm", "membw", "pcie")


def fleet_file(size: int, cv: float, slowdown_pct: float | None, share: float, seed: int) -> dict:
    """A fleet of ``size`` 8-GPU nodes; ``share`` of them get one fault each (none if slowdown is None)."""
    rng = random.Random(f"{size}:{cv}:{slowdown_pct}:{seed}")
    names = [f"node{i:04d}" for i in range(1, size + 1)]
    faults = []
    if slowdown_pct is not None:
        chosen = rng.sample(names, max(1, round(share * size)))
        kinds = SIZED_KINDS + FIXED_KINDS
        for index, host in enumerate(chosen):
            faults.append(_fault(kinds[index % len(kinds)], host, 1 - slowdown_pct / 100, rng))
    return {"nodes": size, "name_format": "node{:04d}", "gpus_per_node": 8, "seed": seed,
            "noise": {"gemm_cv": cv, "membw_cv": cv, "link_cv": 2 * cv}, "faults": faults}


def _fault(kind: str, host: str, factor: float, rng: random.Random) -> dict:
    gpu = rng.randrange(8)
    if kind == "slow_gpu":
        return {"kind": kind, "host": host, "gpu": gpu, "factor": factor}
    if kind == "throttled":
        return {"kind": kind, "host": host, "gpu": gpu, "reason": rng.choice(REASONS), "factor": factor}
    if kind == "slow_node":
        return {"kind": kind, "host": host, "factor": factor}
    if kind == "degraded_pcie":
        return {"kind": kind, "host": host, "gpu": gpu, "width": rng.choice((8, 4))}
    return {"kind": kind, "host": host, "gpu": gpu, "link": rng.randrange(18)}


def sweep(fleet: dict) -> tuple[list[dict], float]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fleet.json"
        path.write_text(json.dumps(fleet))
        request = SweepRequest(hosts_argument=None, simulate_path=str(path),
                               sweep=SweepOptions(probe=ProbeOptions(names=PROBES), fanout=64))
        started = time.perf_counter()
        result = run_plan(request, io.StringIO(), QuietProgress())
        return [f.to_dict() for f in result.findings if f.kind != "unchecked"], time.perf_counter() - started


def score(faults: list[dict], findings: list[dict]) -> dict[str, list[int]]:
    """Per kind: [true positives, findings of that kind, faults of that kind, faults detected]."""
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    expected = {_place(f["kind"], f["host"], f.get("gpu")) for f in faults}
    found = {_place(f["kind"], f["host"], f.get("gpu")) for f in findings}
    for kind, host, gpu in found:
        tally[kind][1] += 1
        tally[kind][0] += (kind, host, gpu) in expected
    for kind, host, gpu in expected:
        tally[kind][2] += 1
        tally[kind][3] += (kind, host, gpu) in found
    return tally


def _place(kind: str, host: str, gpu: int | None) -> tuple[str, str, int | None]:
    return kind, host, gpu if kind in GPU_KINDS else None


def ratio(numerator: int, denominator: int) -> str:
    return f"{numerator / denominator:.3f}" if denominator else "  -  "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--cvs", type=float, nargs="+", default=[0.005, 0.01, 0.02])
    parser.add_argument("--slowdowns", type=float, nargs="+", default=[3, 5, 10, 20, 50])
    parser.add_argument("--fault-share", type=float, default=0.05)
    parser.add_argument("--seeds", type=int, default=1)
    arguments = parser.parse_args()
    print(f"{'nodes':>5} {'CV':>5} {'slow%':>5} {'kind':<14} {'precision':>9} {'recall':>7} {'faults':>6} "
          f"{'sweep s':>7}")
    for size in arguments.sizes:
        for cv in arguments.cvs:
            for slowdown in arguments.slowdowns:
                totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
                seconds = 0.0
                for seed in range(1, arguments.seeds + 1):
                    fleet = fleet_file(size, cv, slowdown, arguments.fault_share, seed)
                    findings, took = sweep(fleet)
                    seconds += took
                    for kind, counts in score(fleet["faults"], findings).items():
                        totals[kind] = [a + b for a, b in zip(totals[kind], counts, strict=True)]
                for kind in sorted(totals):
                    tp, found, faults, detected = totals[kind]
                    print(f"{size:>5} {cv:>5.3f} {slowdown:>5g} {kind:<14} {ratio(tp, found):>9} "
                          f"{ratio(detected, faults):>7} {faults:>6} {seconds / arguments.seeds:>7.1f}")
            flagged, hosts = 0, 0
            for seed in range(1, arguments.seeds + 1):
                findings, _ = sweep(fleet_file(size, cv, None, 0.0, seed))
                flagged += len({f["host"] for f in findings})
                hosts += size
            print(f"{size:>5} {cv:>5.3f} {'none':>5} {'healthy hosts flagged':<22} {flagged}/{hosts} "
                  f"= {100 * flagged / hosts:.2f} %")
    print("targets at CV <= 1 %: precision and recall >= 0.99 for slowdowns >= 10 %, >= 0.95 at 5 %; "
          "<= 1 % of healthy hosts flagged")


if __name__ == "__main__":
    main()
