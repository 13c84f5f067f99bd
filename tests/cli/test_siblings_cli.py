"""A GPU judged against its siblings, and thresholds that scale with the noise, through the real
pipeline (CLI, plan, re-test, analysis) on simulated fleets: one slow GPU in a 1-node job with no
baseline, a broken GPU on a starved host, and a healthy fleet at CV 3 % (issue 16)."""

import json
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpudiag.cli.main import main

GPUS = 8


def _fleet(tmp_path: Path, nodes: int, faults=(), cv: float = 0.005, seed: int = 5, link_cv: float = 0.01) -> str:
    path = tmp_path / f"fleet-{nodes}-{seed}.json"
    path.write_text(json.dumps({"nodes": nodes, "seed": seed, "gpus_per_node": GPUS, "faults": list(faults),
                                "noise": {"gemm_cv": cv, "membw_cv": cv, "link_cv": link_cv}}))
    return str(path)


def _sweep(fleet: str, *args: str) -> tuple[int, list[dict]]:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "out.json"
        result = CliRunner().invoke(main, ["sweep", "--simulate", fleet, "-q", "--no-store", "--json", str(out),
                                           *args], catch_exceptions=False)
        return result.exit_code, json.loads(out.read_text())["findings"]


def _places(findings: list[dict]) -> set[tuple]:
    return {(f["kind"], f["host"], f["gpu"]) for f in findings}


@pytest.mark.parametrize(("slowdown_pct", "severity", "exit_code"), [(8, "fail", 1), (5, "warn", 0)])
def test_one_gpu_slower_than_its_seven_siblings_in_a_1_node_job_is_found_without_a_baseline(
        tmp_path: Path, slowdown_pct: int, severity: str, exit_code: int):
    # No fleet (one host) and no baseline: the SKU figure's 3 % spread hides less than 9 %, and
    # before the siblings judged it this job passed. deficit_fail is 6 %: 8 % fails, 5 % warns.
    fault = {"kind": "slow_gpu", "host": "node001", "gpu": 6, "factor": 1 - slowdown_pct / 100}
    code, findings = _sweep(_fleet(tmp_path, 1, [fault]), "--links", "none")
    (found,) = findings
    assert (found["kind"], found["host"], found["gpu"], found["metric"]) == ("slow_gpu", "node001", 6, "gemm.tflops")
    assert found["reference_source"] == "siblings" and found["confirmed"] and found["severity"] == severity
    assert slowdown_pct - 1 < found["deficit_pct"] < slowdown_pct + 1 and code == exit_code


@pytest.mark.parametrize(("nodes", "seed"), [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3), (2, 4), (2, 5)])
def test_at_2_pct_noise_a_gpu_10_pct_below_its_siblings_is_confirmed_by_its_re_test_runs(tmp_path: Path,
                                                                                         nodes: int, seed: int):
    # Judged on the first run and one more at one run's spread (seven siblings' MAD, rough), a
    # GPU 10 % slow at 2 % noise was dropped about one time in five, and the job exited 0.
    fault = {"kind": "slow_gpu", "host": "node001", "gpu": 2, "factor": 0.9}
    code, findings = _sweep(_fleet(tmp_path, nodes, [fault], cv=0.02, seed=seed), "--links", "none")
    assert _places(findings) == {("slow_gpu", "node001", 2)} and code == 1


def test_a_2_node_job_names_the_slow_gpu_and_no_other(tmp_path: Path):
    fault = {"kind": "slow_gpu", "host": "node002", "gpu": 1, "factor": 0.9}
    code, findings = _sweep(_fleet(tmp_path, 2, [fault], cv=0.01))
    assert _places(findings) == {("slow_gpu", "node002", 1)} and code == 1


def test_a_starved_host_with_a_broken_gpu_is_a_slow_node_and_that_gpus_slow_gpu(tmp_path: Path):
    faults = [{"kind": "slow_node", "host": "node007", "factor": 0.7},
              {"kind": "slow_gpu", "host": "node007", "gpu": 2, "factor": 0.7}]
    code, findings = _sweep(_fleet(tmp_path, 16, faults, cv=0.01), "--links", "none")
    assert _places(findings) == {("slow_node", "node007", None), ("slow_gpu", "node007", 2)} and code == 1
    gpu = next(f for f in findings if f["kind"] == "slow_gpu")
    # judged against its siblings, which share the starved host: its own 30 %, not the host's
    assert gpu["reference_source"] == "siblings" and gpu["severity"] == "fail" and 27 < gpu["deficit_pct"] < 33


@pytest.mark.parametrize(("cv", "seed"), [(0.025, 5), (0.03, 3), (0.03, 4)])
def test_on_a_noisy_fleet_a_starved_hosts_gpu_10_pct_below_its_siblings_is_named_by_their_re_test_runs(
        tmp_path: Path, cv: float, seed: int):
    # One run at 2-3 % noise cannot show 10 % below seven siblings past the bar: the GPU was a
    # fleet suspect, its host a slow_node, and its own deficit vanished into the node's. Now its
    # siblings' screen asks for re-test runs, and their mean finds it.
    faults = [{"kind": "slow_node", "host": "node007", "factor": 0.7},
              {"kind": "slow_gpu", "host": "node007", "gpu": 5, "factor": 0.9}]
    code, findings = _sweep(_fleet(tmp_path, 16, faults, cv=cv, seed=seed, link_cv=0.005), "--links", "none")
    assert _places(findings) == {("slow_node", "node007", None), ("slow_gpu", "node007", 5)} and code == 1
    gpu = next(f for f in findings if f["kind"] == "slow_gpu")
    assert gpu["reference_source"] == "siblings" and gpu["severity"] == "fail"


def test_a_starved_host_alone_is_one_slow_node_not_broken_up_into_gpus(tmp_path: Path):
    code, findings = _sweep(_fleet(tmp_path, 16, [{"kind": "slow_node", "host": "node007", "factor": 0.7}], cv=0.01),
                            "--links", "none")
    assert _places(findings) == {("slow_node", "node007", None)} and code == 1


def test_a_node_slow_on_every_gpu_in_a_1_node_job_is_not_judged_by_its_siblings(tmp_path: Path):
    # All eight alike: the siblings see nothing; the SKU figure finds the node.
    faults = [{"kind": "slow_gpu", "host": "node001", "gpu": gpu, "factor": 0.8} for gpu in range(GPUS)]
    code, findings = _sweep(_fleet(tmp_path, 1, faults), "--links", "none")
    assert _places(findings) == {("slow_node", "node001", None)} and code == 1
    assert findings[0]["reference_source"] == "sku"


def _gpus_at_fail(findings: list[dict]) -> set[tuple]:
    named = set()
    for f in findings:
        if f["severity"] == "fail":
            named |= {(f["host"], f["gpu"]), (f.get("peer") or f["host"], f.get("peer_gpu"))} \
                if f["gpu"] is not None else {(f["host"], gpu) for gpu in range(GPUS)}
    return {part for part in named if part[1] is not None}


NOISY = ("--probes", "facts,telemetry,gemm,membw,pcie,p2p", "--links", "none")


def test_a_healthy_256_node_fleet_at_cv_3_pct_names_at_most_0_1_pct_of_its_gpus_at_fail_and_no_p2p_pair(
        tmp_path: Path):
    # One seed: a noisy fleet's sweep re-tests nearly every host in six runs (30 s here); the
    # benchmark (bench/detection.py --scenarios cv3) counts more seeds.
    code, findings = _sweep(_fleet(tmp_path, 256, cv=0.03, seed=1), *NOISY)
    assert len(_gpus_at_fail(findings)) <= 0.001 * 256 * GPUS
    # a noise dip in one P2P figure is judged on the mean of its several re-test runs alone
    assert not [f for f in findings if f["kind"] == "slow_link"]
    assert code in (0, 1)


def test_no_p2p_pair_of_a_healthy_64_node_fleet_at_cv_3_pct_is_named(tmp_path: Path):
    # This seed named one healthy pair (a warning): it dipped 4.9 sigma in its first run and was
    # confirmed by the mean of that run and one more. (Seed 7 named one whose key's level a crowd
    # at its top set a spread high: tests/unit/controller/analysis/test_reference.py.)
    code, findings = _sweep(_fleet(tmp_path, 64, cv=0.03, seed=3), *NOISY)
    assert not [f for f in findings if f["kind"] == "slow_link"] and code == 0


def test_a_gpu_with_nvlinks_down_at_cv_3_pct_is_found_by_its_pairs_re_test_runs_without_telemetry(tmp_path: Path):
    faults = [{"kind": "nvlink_down", "host": "node007", "gpu": 3, "link": link} for link in range(4)]
    code, findings = _sweep(_fleet(tmp_path, 64, faults, cv=0.03, seed=1), "--probes", "facts,gemm,membw,p2p",
                            "--links", "none")
    assert _places(findings) == {("slow_gpu", "node007", 3)} and code == 1
    (found,) = findings
    assert "slow with 7 of 7 NVLink partners" in found["evidence"] and "the mean of 6 re-test runs" in found["evidence"]


@pytest.mark.parametrize("seed", [1, 2])
def test_an_8_pct_slow_gpu_at_cv_3_pct_is_found_by_its_re_test_runs_and_no_other_part_is_named(
        tmp_path: Path, seed: int):
    # At CV 3 % an 8 % deficit is 2.7 sigma of one run: one re-test run confirmed it about one
    # sweep in five (bench/detection.py --scenarios cv3). The noisy key's wide screen and its
    # several re-test runs, judged on their mean alone (gpudiag.analysis.noisy), find it.
    fault = {"kind": "slow_gpu", "host": f"node0{40 + seed}", "gpu": 2 + seed, "factor": 0.92}
    code, findings = _sweep(_fleet(tmp_path, 64, [fault], cv=0.03, seed=seed), *NOISY)
    assert _places(findings) == {("slow_gpu", fault["host"], fault["gpu"])}
    (found,) = findings
    assert found["confirmed"] and "the mean of 6 re-test runs" in found["evidence"]
    assert 5 < found["deficit_pct"] < 11 and code == (1 if found["severity"] == "fail" else 0)


@pytest.mark.parametrize("seed", [1, 7, 11])
def test_a_node_10_pct_slow_on_every_gpu_in_a_noisy_2_node_job_is_one_slow_node(tmp_path: Path, seed: int):
    # SKU figures alone at 3 % noise: some of the node's GPUs pass the bar, and the one noise
    # pushed furthest sat more than deficit_warn below its node's median. It was judged unlike
    # its node, and the node's deficit came out as a few per-GPU drains.
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": 2, "seed": seed, "gpus_per_node": GPUS, "name_format": "node{:04d}",
                                "noise": {"gemm_cv": 0.03, "membw_cv": 0.03, "link_cv": 0.06},
                                "faults": [{"kind": "slow_gpu", "host": "node0002", "gpu": gpu, "factor": 0.9}
                                           for gpu in range(GPUS)]}))
    code, findings = _sweep(str(path), "--probes", "facts,telemetry,gemm,membw,pcie")
    assert _places(findings) == {("slow_node", "node0002", None)} and code == 1


@pytest.mark.parametrize(("seed", "host", "gpu"), [(12, "node0014", 6), (15, "node0012", 4)])
def test_a_starved_hosts_gpu_level_with_its_siblings_in_its_first_run_is_found_on_its_re_test_runs(
        tmp_path: Path, seed: int, host: str, gpu: int):
    # 16 nodes at CV 3 %, one host starved (every GPU about 9 % under the fleet) and one of its
    # GPUs 10 % slower still. Its first run read level with its siblings (3 sigma lucky), and the
    # re-test, which ran the whole host again, had it 9 % under their means: it was folded into
    # its host's slow_node and never named, as the re-test judged it against the fleet alone.
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": 16, "name_format": "node{:04d}", "gpus_per_node": GPUS, "seed": seed,
                                "noise": {"gemm_cv": 0.03, "membw_cv": 0.03, "link_cv": 0.06},
                                "faults": [{"kind": "slow_node", "host": host, "factor": 0.7},
                                           {"kind": "slow_gpu", "host": host, "gpu": gpu, "factor": 0.9}]}))
    code, findings = _sweep(str(path), "--probes", "facts,telemetry,gemm,membw,pcie", "--links", "none")
    named = {(f["kind"], f["host"], f["gpu"]) for f in findings if f["severity"] in ("fail", "warn")}
    assert named == {("slow_node", host, None), ("slow_gpu", host, gpu)} and code == 1
    (slow,) = [f for f in findings if f["kind"] == "slow_gpu"]
    assert "re-test" in slow["evidence"] and "siblings" in slow["evidence"]
