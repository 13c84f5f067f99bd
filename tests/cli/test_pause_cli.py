"""``gpudiag sweep --pause`` and ``--suspects`` on a simulated fleet whose GPUs a paused job holds
(the ``paused_job`` fault): probes sized under the job's memory, GPUs without room ``unchecked``
(never passed), the suspects and their reference peers, and the input errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpudiag.cli.main import main
from gpudiag.exitcodes import ExitCode
from gpudiag.pause import PAUSE_BUDGET_S, pause_budget_s
from gpudiag.store.store import Store

NODES = 8
HOSTS = [f"node{index:03d}" for index in range(1, NODES + 1)]


def _fleet(tmp_path: Path, *faults: dict[str, Any]) -> str:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": NODES, "faults": list(faults)}))
    return str(path)


def _sweep(tmp_path: Path, fleet: str, *args: str) -> tuple[Any, dict]:
    document = tmp_path / "sweep.json"
    result = CliRunner().invoke(main, ["sweep", "--simulate", fleet, "--no-store", "--json", str(document),
                                       "--json-detail", "full", "-q", *args], catch_exceptions=False)
    return result, json.loads(document.read_text()) if document.exists() else {}


def _records(document: dict, host: str, probe: str) -> list[dict]:
    entry = next(h for h in document["hosts"] if h["host"] == host)
    return [r for r in entry["results"] if r["probe"] == probe]


def test_a_job_holding_most_memory_gets_probes_sized_under_what_it_left(tmp_path):
    fleet = _fleet(tmp_path, {"kind": "paused_job", "host": "node002", "used_mib": 76000})
    result, document = _sweep(tmp_path, fleet, "--pause")
    assert result.exit_code == ExitCode.OK, result.output
    for record in _records(document, "node002", "gemm"):
        figures = record["details"]["pause"]
        assert record["status"] == "ok" and figures["gpus_visible"] == 1
        assert figures["free_mib"] == figures["total_mib"] - 76000 and figures["compute_processes"] == 1
        assert figures["max_gpu_mem_mib"] < figures["free_mib"] - 640  # a context and headroom kept back
        assert 3 * record["params"]["m"] ** 2 * 2 <= figures["max_gpu_mem_mib"] << 20
    assert {r["details"]["pause"]["compute_processes"] for r in _records(document, "node001", "membw")} == {0}


def test_a_gpu_too_full_or_exclusive_is_unchecked_with_the_reason_never_passed(tmp_path):
    fleet = _fleet(tmp_path, {"kind": "paused_job", "host": "node003", "used_mib": 80900, "gpu": 2},
                   {"kind": "paused_job", "host": "node003", "used_mib": 30000, "gpu": 4, "exclusive": True})
    result, document = _sweep(tmp_path, fleet, "--pause")
    assert result.exit_code == ExitCode.UNCHECKED
    unchecked = {(f["host"], f["gpu"], f["metric"]): f["evidence"] for f in document["findings"]
                 if f["kind"] == "unchecked"}
    assert {(host, gpu) for host, gpu, _ in unchecked} == {("node003", 2), ("node003", 4)}
    assert "MiB free of" in unchecked[("node003", 2, "gemm.tflops")]
    assert "the paused job holds the rest" in unchecked[("node003", 2, "gemm.tflops")]
    assert "compute mode exclusive_process" in unchecked[("node003", 4, "gemm.tflops")]
    assert document["summary"]["exit_code"] == 3


def test_without_pause_the_same_job_makes_the_probes_fail(tmp_path):
    fleet = _fleet(tmp_path, {"kind": "paused_job", "host": "node003", "used_mib": 30000, "gpu": 4,
                              "exclusive": True})
    result, document = _sweep(tmp_path, fleet)
    assert result.exit_code == ExitCode.UNCHECKED
    assert any("busy or unavailable" in f["evidence"] for f in document["findings"])


def test_suspects_are_probed_with_reference_peers_and_the_output_says_which(tmp_path):
    fleet = _fleet(tmp_path, {"kind": "slow_gpu", "host": "node006", "gpu": 1, "factor": 0.8})
    result, document = _sweep(tmp_path, fleet, "--pause", "--suspects", "node[003,006]")
    assert {key: document["focus"][key] for key in ("suspects", "references")} == {
        "suspects": ["node003", "node006"], "references": ["node001", "node004", "node005", "node008"]}
    assert document["focus"]["extra_peers"]["pair_tests"] == 0  # the references decided: no further peer
    assert sorted(h["host"] for h in document["hosts"]) == sorted(["node003", "node006", "node001", "node004",
                                                                   "node005", "node008"])
    assert result.exit_code == ExitCode.FAIL
    assert {(f["kind"], f["host"], f["gpu"]) for f in document["findings"] if f["severity"] == "fail"} == {
        ("slow_gpu", "node006", 1)}
    focus = "focus: suspects node[003,006] · references node[001,004-005,008]"
    assert focus in result.output
    for form in ("md", "html"):  # every report format says it, from the document
        report = CliRunner().invoke(main, ["report", str(tmp_path / "sweep.json"), "--format", form])
        assert report.exit_code == 0 and focus in report.output, report.output
    for suspect in ("node003", "node006"):  # each suspect's links are tested against references
        peers = {link["a"] if link["b"] == suspect else link["b"] for link in document["links"]
                 if suspect in (link["a"], link["b"])}
        assert peers and peers <= set(document["focus"]["references"])


def test_ranks_name_positions_in_the_host_list_and_references_can_be_fewer(tmp_path):
    result, document = _sweep(tmp_path, _fleet(tmp_path), "--suspects", "rank:0,7", "--reference-peers", "1",
                              "--links", "none")
    assert result.exit_code == ExitCode.OK
    assert document["focus"] == {"suspects": ["node001", "node008"], "references": ["node003", "node006"]}


@pytest.mark.parametrize(("args", "says"), [
    (("--suspects", "node0[07-09]"), "node009 is not one of the 8 hosts swept"),
    (("--suspects", "rank:3,8"), "rank 8 is out of range: the host list has 8 hosts, ranks 0-7"),
    (("--suspects", "rank:x"), "'x' is not a rank"),
    (("--pause", "--net-backend", "nccl"), "--net-backend nccl with --pause"),
])
def test_bad_suspects_and_nccl_with_pause_are_input_errors(tmp_path, args, says):
    result, document = _sweep(tmp_path, _fleet(tmp_path), *args)
    assert result.exit_code == ExitCode.USAGE and says in result.output and "fix:" in result.output
    assert document == {}


def test_pause_shortens_the_default_deadline_and_keeps_a_given_one(tmp_path):
    fleet = _fleet(tmp_path)
    for args, deadline_s in ((("--pause",), 60.0), (("--pause", "--deadline", "90"), 90.0), ((), 600.0)):
        store = tmp_path / f"store{deadline_s:g}.db"
        result = CliRunner().invoke(main, ["sweep", "--simulate", fleet, "--store", str(store), "--links", "none",
                                           "-q", *args], catch_exceptions=False)
        assert result.exit_code == ExitCode.OK, result.output
        with Store.open(str(store)) as opened:
            options = opened.list_sweeps()[0]["options"]
        assert (options["deadline_s"], options["pause"]) == (deadline_s, bool(args))


def test_the_run_wide_budget_bounds_a_pause_and_what_it_cut_is_unchecked(tmp_path):
    result, document = _sweep(tmp_path, _fleet(tmp_path), "--pause", "--budget", "1")
    assert result.exit_code == ExitCode.UNCHECKED
    assert {h["status"] for h in document["hosts"]} == {"timeout"}
    assert all("--budget 1 s" in h["error"] for h in document["hosts"])
    assert pause_budget_s(True, None) == PAUSE_BUDGET_S and pause_budget_s(False, None) is None
    assert pause_budget_s(True, 30.0) == 30.0
