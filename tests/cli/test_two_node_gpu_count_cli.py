"""GPU counts in a job too small for its peers to agree on one, through ``gpudiag sweep
--simulate``: a 2-node job whose one node lost a GPU from the bus (its PCI bus and NVML count 7
too) beside a peer of 8 was said nothing and exited 0. Which of the two counts right their
majority cannot tell, so the smaller is `unchecked` (exit 3: kept out of the job, never drained
on its one peer's word); with a third node, the two that agree decide, and it is `missing_gpu`.
Two nodes that agree beside one with more decide nothing either: a 3-node job whose two nodes
each lost a GPU (7, 7 and 8) passed, and of 7, 7, 8 and 8 the order of the hosts decided."""

import json
from pathlib import Path

from click.testing import CliRunner

from gpudiag.cli.main import main


def _sweep(tmp_path: Path, nodes: int, faults: list[dict]) -> tuple[int, list[dict]]:
    fleet, out = tmp_path / "fleet.json", tmp_path / "out.json"
    fleet.write_text(json.dumps({"nodes": nodes, "name_format": "node{:04d}", "seed": 7, "faults": faults}))
    result = CliRunner().invoke(main, ["sweep", "--simulate", str(fleet), "--no-store", "--links", "none", "--probes",
                                       "facts,telemetry,gemm", "--json", str(out), "-q"], catch_exceptions=False)
    return result.exit_code, json.loads(out.read_text())["findings"]


def test_a_gpu_gone_from_the_bus_in_a_2_node_job_is_unchecked_never_passed(tmp_path: Path):
    code, findings = _sweep(tmp_path, 2, [{"kind": "gpu_missing", "host": "node0001", "gpu": 3}])
    assert [(f["kind"], f["host"]) for f in findings] == [("unchecked", "node0001")], findings
    assert "7 GPUs usable (torch), where a peer of the same model and platform has 8" in findings[0]["evidence"]
    assert code == 3


def test_with_a_third_node_the_two_that_agree_decide(tmp_path: Path):
    code, findings = _sweep(tmp_path, 3, [{"kind": "gpu_missing", "host": "node0001", "gpu": 3}])
    assert [(f["kind"], f["host"]) for f in findings] == [("missing_gpu", "node0001")]
    assert code == 1


def test_a_healthy_2_node_job_says_nothing_of_its_gpu_counts(tmp_path: Path):
    assert _sweep(tmp_path, 2, []) == (0, [])


def test_two_nodes_that_each_lost_a_gpu_beside_a_whole_one_are_unchecked_never_passed(tmp_path: Path):
    lost = [{"kind": "gpu_missing", "host": host, "gpu": 3} for host in ("node0001", "node0002")]
    code, findings = _sweep(tmp_path, 3, lost)
    assert sorted((f["kind"], f["host"]) for f in findings) == [("unchecked", "node0001"), ("unchecked", "node0002")]
    assert all("where a peer of the same model and platform has 8; most have 7, too few to be sure" in f["evidence"]
               for f in findings), findings
    assert code == 3


def test_a_tie_of_gpu_counts_decides_nothing_whatever_the_hosts_order(tmp_path: Path):
    # 7, 7, 8, 8 and 8, 8, 7, 7: the same two nodes unchecked, never missing_gpu on one order and
    # passed on the other
    for lost in (("node0001", "node0002"), ("node0003", "node0004")):
        code, findings = _sweep(tmp_path, 4, [{"kind": "gpu_missing", "host": host, "gpu": 3} for host in lost])
        assert sorted((f["kind"], f["host"]) for f in findings) == [("unchecked", host) for host in lost], findings
        assert code == 3

