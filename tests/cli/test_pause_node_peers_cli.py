"""A paused job whose reference peers are slow themselves, on every GPU: their level was the
suspects' fleet, so the sweep reported a ``fleet_shift`` of the references ("draining single
nodes will not fix it"), named neither of them, and the healthy suspect looked fast. Now further
nodes of the job are probed, as many as the sweep probed and one more, and the slow references
are named. Through ``gpudiag sweep --simulate F --pause --suspects node005`` on a 16-node job,
whose references are node004 and node013 and whose further nodes come node009, node006,
node014, node002, ... (gpudiag.pause.focus.spread)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gpudiag.cli.main import main


def _slow_node(host: str, factor: float = 0.85) -> list[dict[str, Any]]:
    return [{"kind": "slow_gpu", "host": host, "gpu": gpu, "factor": factor} for gpu in range(8)]


def _sweep(folder: Path, faults: list[dict[str, Any]], seed: int = 1, nodes: int = 16) -> tuple[Result, dict]:
    fleet, out = folder / "job.json", folder / "out.json"
    fleet.write_text(json.dumps({"nodes": nodes, "name_format": "node{:03d}", "seed": seed, "faults": faults}))
    result = CliRunner(env={"COLUMNS": "200"}).invoke(main, [
        "sweep", "--simulate", str(fleet), "--pause", "--suspects", "node005", "--probes", "gemm",
        "--duration", "0.2", "--no-store", "--json", str(out)], catch_exceptions=False)
    return result, json.loads(out.read_text())


def _named(document: dict[str, Any]) -> list[tuple[str, str, str]]:
    return sorted((f["kind"], f["host"], f["severity"]) for f in document["findings"])


@pytest.mark.parametrize(("slow", "seed"), [(["node004", "node013"], 1), (["node004", "node013"], 2),
                                            (["node005", "node004"], 3), (["node005", "node004", "node013"], 4)])
def test_slow_references_are_named_once_further_nodes_outnumber_them(tmp_path: Path, slow: list[str], seed: int):
    result, document = _sweep(tmp_path, [fault for host in slow for fault in _slow_node(host)], seed)
    assert _named(document) == sorted(("slow_node", host, "fail") for host in slow)
    assert result.exit_code == 1
    peers = document["focus"]["node_peers"]
    assert peers["hosts"] == ["node009", "node006", "node014", "node002"] and peers["max_hosts"] == 4
    assert peers["because"] and peers["because"][0].startswith("fleet_shift ")
    assert {host["host"] for host in document["hosts"]} == {"node004", "node005", "node013", *peers["hosts"]}
    assert "further nodes probed node[002,006,009,014]: 4 of at most 4" in result.output


def test_a_healthy_paused_job_and_one_slow_reference_probe_no_further_node(tmp_path: Path):
    _, healthy = _sweep(tmp_path, [])
    assert healthy["findings"] == [] and "node_peers" not in healthy["focus"]
    result, one = _sweep(tmp_path, _slow_node("node013"))
    assert _named(one) == [("slow_node", "node013", "fail")] and "node_peers" not in one["focus"]
    assert len(one["hosts"]) == 3 and result.exit_code == 1


def test_a_further_node_that_cannot_be_reached_is_said_and_takes_no_part(tmp_path: Path):
    faults = [*_slow_node("node004"), *_slow_node("node013"), {"kind": "unreachable", "host": "node006"}]
    result, document = _sweep(tmp_path, faults, seed=5)
    peers = document["focus"]["node_peers"]
    assert peers["hosts"] == ["node009", "node014", "node002"]
    assert peers["not_probed"]["node006"].startswith("unreachable: ")
    assert "node006" not in {host["host"] for host in document["hosts"]}  # never a pass, never blamed
    assert _named(document) == [("slow_node", "node004", "fail"), ("slow_node", "node013", "fail")]
    assert result.exit_code == 1


def test_a_small_job_probes_the_further_nodes_it_has_within_the_bound(tmp_path: Path):
    # 4 nodes, --suspects node003 with node001 and node004 as references (the job's one other node is
    # node002). All three slow alike: one further node cannot outnumber them.
    fleet, out = tmp_path / "job.json", tmp_path / "out.json"
    faults = [fault for host in ("node001", "node003", "node004") for fault in _slow_node(host)]
    fleet.write_text(json.dumps({"nodes": 4, "name_format": "node{:03d}", "seed": 6, "faults": faults}))
    result = CliRunner().invoke(main, ["sweep", "--simulate", str(fleet), "--pause", "--suspects", "node003",
                                       "--probes", "gemm", "--duration", "0.2", "--no-store", "--json", str(out)],
                                catch_exceptions=False)
    document = json.loads(out.read_text())
    assert document["focus"]["references"] == ["node001", "node004", "node002"]
    peers = document["focus"]["node_peers"]
    assert peers["hosts"] == ["node002"] and peers["max_hosts"] == 4
    assert "node002" not in {f["host"] for f in document["findings"] if f["action"] == "drain"}
    assert result.exit_code == 1


@pytest.mark.parametrize("factor", [0.6, 0.5])
def test_a_suspect_slow_by_half_on_every_gpu_at_2_pct_noise_is_its_slow_node(tmp_path: Path, factor: float):
    # Its re-test and a reference's: their GPUs' means two clusters. Taken as one, what lasts came
    # out 38 %, no GPU stood out against that, and the paused job passed, exit 0 (seeds 2 and 3).
    for seed in range(1, 7):
        fleet, out = tmp_path / "job.json", tmp_path / "out.json"
        fleet.write_text(json.dumps({"nodes": 8, "name_format": "node{:04d}", "seed": seed,
                                     "noise": {"gemm_cv": 0.02, "membw_cv": 0.02, "link_cv": 0.04},
                                     "faults": _slow_node("node0005", factor)}))
        result = CliRunner().invoke(main, [
            "sweep", "--simulate", str(fleet), "--pause", "--suspects", "node0005", "--probes",
            "facts,telemetry,gemm,membw,pcie", "--no-store", "--json", str(out)], catch_exceptions=False)
        assert _named(json.loads(out.read_text())) == [("slow_node", "node0005", "fail")], seed
        assert result.exit_code == 1
