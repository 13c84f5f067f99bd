"""A group finding comes from a group only: separate broken GPUs on two or three nodes of a small
run (a pre-flight of 4 to 16 nodes) are each their own finding, never a "fleet shift" that a
quarter of the hosts makes; a fleet a quarter of whose nodes are slow as a whole still is one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpudiag.cli.main import main
from gpudiag.sim import demo_fleet_path

GROUP_KINDS = {"fleet_shift", "software_regression"}


def _sweep(tmp_path: Path, fleet: dict, *args: str) -> dict:
    path, document = tmp_path / "fleet.json", tmp_path / "sweep.json"
    path.write_text(json.dumps(fleet))
    result = CliRunner().invoke(main, ["sweep", "--simulate", str(path), "--no-store", "--links", "none", "-q",
                                       "--probes", "facts,gemm,membw", "--json", str(document), *args])
    assert result.exit_code in (1, 3), result.output
    return json.loads(document.read_text())


@pytest.mark.parametrize("nodes", [4, 8, 16])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_separate_broken_gpus_are_each_their_own_finding_never_a_group(tmp_path: Path, nodes: int, seed: int):
    broken = [{"kind": "slow_gpu", "host": "node002", "gpu": 1, "factor": 0.85},
              {"kind": "slow_gpu", "host": f"node{nodes:03d}", "gpu": 4, "factor": 0.8},
              {"kind": "gpu_lost", "host": "node003", "gpu": 6}]
    document = _sweep(tmp_path, {"nodes": nodes, "seed": seed, "noise": {"gemm_cv": 0.01, "membw_cv": 0.01},
                                 "faults": broken[:3 if nodes > 4 else 2]})
    kinds = [(f["kind"], f["host"], f["gpu"]) for f in document["findings"]]
    assert not [k for k in kinds if k[0] in GROUP_KINDS], kinds
    assert ("slow_gpu", "node002", 1) in kinds and ("slow_gpu", f"node{nodes:03d}", 4) in kinds, kinds


def test_a_preflight_of_eight_demo_nodes_with_one_slow_gpu_makes_no_group(tmp_path: Path):
    result = CliRunner().invoke(main, ["preflight", "--simulate", str(demo_fleet_path()), "--hosts", "node[010-017]",
                                       "--no-store", "--json", str(tmp_path / "p.json"), "-q"])
    findings = json.loads((tmp_path / "p.json").read_text())["findings"]
    assert result.exit_code == 1 and not [f for f in findings if f["kind"] in GROUP_KINDS], findings


def test_a_quarter_of_a_fleet_slow_as_whole_nodes_is_still_one_shift(tmp_path: Path):
    faults = [{"kind": "slow_node", "host": f"node{i:03d}", "factor": 0.5} for i in range(1, 9)]
    document = _sweep(tmp_path, {"nodes": 32, "seed": 4, "faults": faults})
    shifts = [f for f in document["findings"] if f["kind"] == "fleet_shift"]
    assert [f["host"] for f in shifts] == ["node[001-008]"] and shifts[0]["action"] == "inspect"


@pytest.mark.parametrize(("nodes", "slow"), [(8, (0.88, 0.88)), (8, (0.75, 0.88)), (4, (0.85, 0.85))])
def test_two_slow_nodes_of_a_small_run_are_their_own_findings_never_a_shift(tmp_path: Path, nodes: int,
                                                                            slow: tuple[float, float]):
    # Two whole nodes slow in an 8-node pre-flight are a quarter of it: they were a fleet_shift
    # ("draining single nodes will not fix it") beside each one's slow_node, where draining does.
    faults = [{"kind": "slow_gpu", "host": host, "gpu": gpu, "factor": factor}
              for host, factor in zip(("node002", f"node{nodes:03d}"), slow, strict=True) for gpu in range(8)]
    document = _sweep(tmp_path, {"nodes": nodes, "seed": 5, "noise": {"gemm_cv": 0.01, "membw_cv": 0.01},
                                 "faults": faults})
    kinds = sorted((f["kind"], f["host"]) for f in document["findings"])
    assert kinds == [("slow_node", "node002"), ("slow_node", f"node{nodes:03d}")], kinds


def test_three_slow_nodes_of_twelve_are_a_shift_beside_their_own_findings(tmp_path: Path):
    faults = [{"kind": "slow_gpu", "host": f"node{i:03d}", "gpu": gpu, "factor": 0.8} for i in (2, 6, 10)
              for gpu in range(8)]
    document = _sweep(tmp_path, {"nodes": 12, "seed": 5, "noise": {"gemm_cv": 0.01, "membw_cv": 0.01},
                                 "faults": faults})
    kinds = sorted((f["kind"], f["host"]) for f in document["findings"])
    assert ("fleet_shift", "node[002,006,010]") in kinds
    assert [k for k in kinds if k[0] == "slow_node"] == [("slow_node", f"node{i:03d}") for i in (2, 6, 10)]


def test_three_nodes_of_twelve_slow_by_different_amounts_share_no_level_and_make_no_shift(tmp_path: Path):
    # 12, 15 and 25 % below: three separate slow nodes, each its own slow_node, no level a shared cause set.
    faults = [{"kind": "slow_gpu", "host": f"node{i:03d}", "gpu": gpu, "factor": factor}
              for i, factor in ((2, 0.88), (6, 0.85), (10, 0.75)) for gpu in range(8)]
    document = _sweep(tmp_path, {"nodes": 12, "seed": 5, "noise": {"gemm_cv": 0.01, "membw_cv": 0.01},
                                 "faults": faults})
    kinds = sorted((f["kind"], f["host"]) for f in document["findings"])
    assert kinds == [("slow_node", f"node{i:03d}") for i in (2, 6, 10)], kinds
