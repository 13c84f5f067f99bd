"""A small job (3 to 7 nodes) is its own fleet, through the real pipeline (CLI, plan, re-test,
analysis) on simulated fleets (issue 16: a slow part in a small job is never exit 0). Before,
a 4-node job whose one node ran 8 % slow on every GPU was judged by the SKU figure alone, whose
3 % spread hides less than 9 %: it passed in 3 of 5 seeds with nothing said."""

import json
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpudiag.cli.main import main

GPUS = 8


def _fleet(tmp_path: Path, nodes: int, faults=(), cv: float = 0.01, seed: int = 1) -> str:
    path = tmp_path / f"fleet-{nodes}-{seed}.json"
    path.write_text(json.dumps({"nodes": nodes, "seed": seed, "gpus_per_node": GPUS, "faults": list(faults),
                                "noise": {"gemm_cv": cv, "membw_cv": cv, "link_cv": 0.01}}))
    return str(path)


def _run(command: str, fleet: str, *args: str) -> tuple[int, dict]:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "out.json"
        result = CliRunner().invoke(main, [command, "--simulate", fleet, "-q", "--no-store", "--json", str(out),
                                           *args], catch_exceptions=False)
        return result.exit_code, json.loads(out.read_text())


def _places(findings: list[dict]) -> set[tuple]:
    return {(f["kind"], f["host"], f["gpu"]) for f in findings}


def _slow_node(host: str, factor: float) -> list[dict]:
    return [{"kind": "slow_gpu", "host": host, "gpu": gpu, "factor": factor} for gpu in range(GPUS)]


@pytest.mark.parametrize(("nodes", "seed"), [(3, 2), (4, 3), (4, 5), (7, 1)])
def test_a_node_8_pct_slow_on_every_gpu_in_a_small_job_is_its_slow_node_judged_by_the_other_nodes(
        tmp_path: Path, nodes: int, seed: int):
    slow = f"node{nodes:03d}"
    code, document = _run("sweep", _fleet(tmp_path, nodes, _slow_node(slow, 0.92), seed=seed), "--links", "none")
    assert _places(document["findings"]) == {("slow_node", slow, None)} and code == 1
    (found,) = document["findings"]
    assert found["reference_source"] == "fleet" and found["severity"] == "fail" and 6 < found["deficit_pct"] < 10


def test_a_pre_flight_of_a_4_node_job_excludes_its_slow_node_and_no_other(tmp_path: Path):
    code, document = _run("preflight", _fleet(tmp_path, 4, _slow_node("node002", 0.92), seed=3), "--links", "none")
    assert _places(document["findings"]) == {("slow_node", "node002", None)} and code == 1
    assert document["impact"]["exclude"] == ["node002"]
    (drain,) = document["preflight"]["drain"]
    assert drain["command"].startswith("scontrol update NodeName=node002 State=DRAIN")


def test_a_gpu_8_pct_slow_in_a_3_node_job_is_named_and_no_other(tmp_path: Path):
    fault = {"kind": "slow_gpu", "host": "node002", "gpu": 5, "factor": 0.92}
    code, document = _run("sweep", _fleet(tmp_path, 3, [fault], seed=4), "--links", "none")
    assert _places(document["findings"]) == {("slow_gpu", "node002", 5)} and code == 1


@pytest.mark.parametrize(("nodes", "seed"), [(3, 16), (5, 4), (6, 8)])
def test_a_healthy_small_job_at_3_pct_noise_names_nothing(tmp_path: Path, nodes: int, seed: int):
    # The seeds where the densest window found a crowd at the top (3 nodes, seed 16: a GPU on
    # every node) or a slow fleet of one node's lucky runs (5 nodes, seed 4: a fail), and where
    # the siblings alone named healthy GPUs (6 nodes, seed 8).
    code, document = _run("sweep", _fleet(tmp_path, nodes, cv=0.03, seed=seed), "--links", "none")
    assert document["findings"] == [] and code == 0


@pytest.mark.parametrize(("nodes", "seed"), [(1, 3), (2, 2)])
def test_a_node_8_pct_slow_on_every_gpu_with_only_the_sku_figure_to_judge_it_is_not_passed(
        tmp_path: Path, nodes: int, seed: int):
    # One or two nodes, no baseline: 8 % is 2.7 of the SKU figure's 3 % spreads, too coarse to
    # fail the node and too far to pass it. It exited 0 with nothing said.
    slow = f"node{nodes:03d}"
    code, document = _run("sweep", _fleet(tmp_path, nodes, _slow_node(slow, 0.92), seed=seed), "--links", "none")
    (found,) = document["findings"]
    assert (found["kind"], found["host"], found["metric"], found["action"]) == ("unchecked", slow, "gemm.tflops",
                                                                                 "inspect")
    assert "% below the SKU figure" in found["evidence"] and "store a baseline" in found["evidence"] and code == 3
    assert document["impact"]["exclude"] == [slow]  # kept out of the job, never drained


def test_a_healthy_2_node_job_with_only_the_sku_figure_names_nothing(tmp_path: Path):
    code, document = _run("sweep", _fleet(tmp_path, 2, seed=2), "--links", "none")
    assert document["findings"] == [] and code == 0


def test_a_2_node_jobs_node_10_pct_slow_on_every_gpu_is_its_slow_node_when_a_gpus_re_test_clears_it_of_its_siblings(
        tmp_path: Path):
    # Against the SKU figure alone at 2 % noise: GPU 6 read 12 % low, its siblings screened it, its
    # re-test cleared it of them, and then it sat 3.4 % under its node's median, past the node's
    # own tight scatter: "not like its node", and the node was three slow_gpu findings, five of its
    # GPUs 9 % below the SKU figure passed. Cleared by its siblings, it is like its node.
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": 2, "name_format": "node{:04d}", "gpus_per_node": GPUS, "seed": 3,
                                "noise": {"gemm_cv": 0.02, "membw_cv": 0.02, "link_cv": 0.04},
                                "faults": _slow_node("node0002", 0.9)}))
    code, document = _run("sweep", str(path), "--probes", "facts,telemetry,gemm,membw,pcie", "--links", "none")
    assert _places(f for f in document["findings"] if f["severity"] != "info") == {("slow_node", "node0002", None)}
    assert code == 1


@pytest.mark.parametrize(("nodes", "slow", "seed"), [(4, ("node001", "node004"), 8), (4, ("node002", "node003"), 3),
                                                    (6, ("node001", "node003", "node005"), 2)])
def test_half_a_small_jobs_nodes_slow_are_each_named_against_the_faster_half(tmp_path: Path, nodes: int,
                                                                              slow: tuple[str, ...], seed: int):
    # fail-slows only pull values down: where the hosts split in half, the faster half is the level
    # (before, the median of four host medians sat between the halves, each 5 % off it, and the job passed)
    faults = [fault for host in slow for fault in _slow_node(host, 0.9)]
    code, document = _run("sweep", _fleet(tmp_path, nodes, faults, seed=seed), "--links", "none")
    assert _places(document["findings"]) == {("slow_node", host, None) for host in slow}
    assert all(f["severity"] == "fail" for f in document["findings"]) and code == 1


@pytest.mark.parametrize("seed", [20, 7])
def test_a_3_node_jobs_node_10_pct_slow_at_3_pct_noise_is_its_slow_node_not_one_of_its_gpus(tmp_path: Path, seed: int):
    # Seed 20: the node and one reference were re-tested, and the level their re-test found (the
    # median of both hosts' 16 means) fell between them, 3.7 % under the job's level; the node,
    # 5 % under that, was named by one GPU of eight as a slow_gpu.
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": 3, "name_format": "node{:04d}", "gpus_per_node": GPUS, "seed": seed,
                                "noise": {"gemm_cv": 0.03, "membw_cv": 0.03, "link_cv": 0.06},
                                "faults": _slow_node("node0003", 0.9)}))
    code, document = _run("sweep", str(path), "--links", "none")
    assert _places(document["findings"]) == {("slow_node", "node0003", None)} and code == 1
    (found,) = document["findings"]
    assert found["severity"] == "fail" and found["deficit_pct"] > 8
