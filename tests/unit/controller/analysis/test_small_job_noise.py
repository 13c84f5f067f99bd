"""A 4-node job at 3 % noise through the simulated fleet and the whole sweep (first pass, re-test,
analysis): separate GPUs 10 % slow are each named, as a GPU, and a healthy job names nothing. A
MAD over 32 values is off by a fifth, and a spread read wide was kept as GPUs that differ by
themselves, so a slow GPU's mean of six runs was judged as coarse as two; and a node whose median
read 3.3 % low was named slow as a whole for its one slow GPU (4 of 20 such jobs missed a GPU)."""

import json
import random
from pathlib import Path

from gpudiag.run.fanout import SweepOptions
from gpudiag.run.hostprobe import ProbeOptions
from gpudiag.run.request import Reach, SweepRequest
from gpudiag.run.sweep import run_sweep
from gpudiag.sim import FleetFile

PROBES = ("facts", "telemetry", "gemm", "membw")


def _named(tmp_path: Path, seed: int, slow: list[tuple[str, int]], faults: tuple[dict, ...] = (),
           cv: float = 0.03, factor: float = 0.9) -> set[tuple[str, str, int | None]]:
    fleet = {"nodes": 4, "name_format": "node{:04d}", "gpus_per_node": 8, "seed": seed,
             "noise": {"gemm_cv": cv, "membw_cv": cv, "link_cv": 2 * cv},
             "faults": [{"kind": "slow_gpu", "host": host, "gpu": gpu, "factor": factor} for host, gpu in slow]
             + list(faults)}
    path = tmp_path / f"fleet{seed}.json"
    path.write_text(json.dumps(fleet))
    request = SweepRequest(hosts_argument=None, reach=Reach(stand_in=FleetFile(str(path))),
                           sweep=SweepOptions(probe=ProbeOptions(names=PROBES), fanout=8))
    findings = run_sweep(request).findings
    return {(f.kind, f.host, f.gpu) for f in findings if f.severity in ("fail", "warn")}


def _separate(tmp_path: Path, seeds: range, cv: float, factor: float) -> tuple[list, list]:
    """Two GPUs slow by ``factor`` on two nodes of a 4-node job, a job a seed: the parts missed
    and the parts named wrongly, each with its seed."""
    missed, wrong = [], []
    for seed in seeds:
        rng = random.Random(f"small-job:{seed}")
        slow = {("slow_gpu", host, rng.randrange(8)) for host in rng.sample([f"node{i:04d}" for i in range(1, 5)], 2)}
        named = _named(tmp_path, seed, [(host, gpu) for _, host, gpu in slow], cv=cv, factor=factor)
        wrong += [(seed, part) for part in named - slow]
        missed += [(seed, part) for part in slow - named]
    return missed, wrong


def test_separate_gpus_10_pct_slow_in_a_4_node_job_at_3_pct_noise_are_named_in_19_of_20_jobs_and_nothing_else(
        tmp_path):
    # 10 % at 3 % noise is 3.3 sigma in the first pass: the bar is 19 jobs of 20.
    missed, wrong = _separate(tmp_path, range(20), 0.03, 0.9)
    assert wrong == [] and len({seed for seed, _ in missed}) <= 1, (missed, wrong)


def test_separate_gpus_5_pct_slow_in_a_4_node_job_at_1_pct_noise_are_named_in_37_of_40(tmp_path):
    # 32 values at 1 % noise spread 0.8 to 1.3 % by chance: at 1.25 % a GPU 5 % slow had to read
    # 3.75 % low to be a suspect at all (the wide screen began at 1.29 %), and two re-test runs
    # planned for a 6 % deficit judged it at a bar of 4.5 sigma (6 or more of these 40 passed).
    # What is left: a first run under deficit_warn (2 % of them) is never a suspect.
    missed, wrong = _separate(tmp_path, range(20), 0.01, 0.95)
    assert wrong == [] and len(missed) <= 3, (missed, wrong)


def test_a_healthy_4_node_job_at_3_pct_noise_names_nothing(tmp_path):
    assert [seed for seed in range(100, 120) if _named(tmp_path, seed, [])] == []


def test_with_one_gpu_lost_the_jobs_level_still_rests_on_its_values_not_its_hosts(tmp_path):
    # One host of 7 GPUs among hosts of 8 made the level's count its 4 hosts: its error came out
    # three times a run's, and a GPU 15 % slow at 3 % noise passed in 5 jobs of 10.
    wrong = []
    for seed in range(10):
        rng = random.Random(f"lost:{seed}")
        lost, *slow_hosts = rng.sample([f"node{i:04d}" for i in range(1, 5)], 3)
        gone = {"kind": "gpu_lost", "host": lost, "gpu": rng.randrange(8)}
        slow = [{"kind": "slow_gpu", "host": host, "gpu": rng.randrange(8), "factor": factor}
                for host, factor in zip(slow_hosts, (0.85, 0.80), strict=True)]
        named = _named(tmp_path, seed, [], (gone, *slow))
        expected = {("slow_gpu", f["host"], f["gpu"]) for f in slow} | {("missing_gpu", lost, gone["gpu"])}
        if named != expected:
            wrong.append((seed, sorted(named, key=str)))
    assert wrong == []
