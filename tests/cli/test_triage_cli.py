"""``gpudiag triage`` on a simulated fleet, through the real pipeline: the simulated node prints the
records the real bundle would (its xid probe included), and the triage sees only those records,
never the fleet file's faults."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gpudiag.cli.main import main

FAULTS: list[dict[str, Any]] = [
    {"kind": "xid", "host": "node002", "gpu": 3, "code": 79, "count": 2, "recovery_action": 2},
    {"kind": "throttled", "host": "node003", "gpu": 5, "reason": "hw_thermal", "factor": 0.7},
    {"kind": "kernel_log_unreadable", "host": "node004"},
    {"kind": "xid", "host": "node005", "gpu": 1, "code": 13, "count": 3},
    {"kind": "xid", "host": "node005", "gpu": 6, "code": 4242},
]


def _run(*args: str) -> Result:
    return CliRunner().invoke(main, ["triage", *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("triage") / "fleet.json"
    path.write_text(json.dumps({"nodes": 5, "faults": FAULTS}))
    return path


def _triage(fleet: Path, host: str, tmp_path: Path, *more: str) -> tuple[Result, dict[str, Any]]:
    document = tmp_path / f"{host}.json"
    result = _run("--simulate", str(fleet), "--host", host, "--no-store", "-q", "--duration", "30",
                  "--json", str(document), *more)
    return result, json.loads(document.read_text())


def test_a_gpu_that_fell_off_the_bus_says_reboot_and_reseat_with_evidence(fleet, tmp_path):
    result, document = _triage(fleet, "node002", tmp_path)
    assert result.exit_code == 1
    first = document["problems"][0]
    assert first["severity"] == "fail" and first["action"] == "reboot" and first["gpu"] == 3
    assert "reseat" in first["next_step"] and "RMA" in first["next_step"]
    assert "Xid 79" in first["title"] and "fallen off the bus" in first["title"]
    evidence = " ".join(first["evidence"])
    assert "logged 2 times" in evidence and "PCI 00000000:5D:00.0" in evidence
    assert "recovery action 2 (NODE_REBOOT)" in evidence  # NVML's pending action backs it up
    event = document["xid"]["events"][0]
    assert event["gpu"] == 3 and event["gpu_uuid"].startswith("GPU-") and event["gpu_uuid"] in evidence
    text = result.output
    assert text.startswith("gpudiag triage node002: 1 problem (1 to act on) · exit 1")
    assert "next: reboot — drain, reboot; reseat, then RMA if it repeats" in text


def test_a_throttled_gpu_says_check_cooling(fleet, tmp_path):
    result, document = _triage(fleet, "node003", tmp_path)
    assert result.exit_code == 1
    (problem,) = document["problems"]
    assert problem["gpu"] == 5 and problem["next_step"] == "check cooling" and problem["severity"] == "fail"
    assert "HW thermal slowdown" in problem["evidence"][0]
    assert "confirmed by a re-test" in problem["evidence"][1]
    assert document["retested"] is True
    # the GPU named so that it can be found on the node (NVML's index, PCI bus id, UUID)
    assert re.search(r"throttled on GPU 5 \(PCI [0-9A-F]{8}:[0-9A-F]{2}:00\.0, GPU-[0-9a-f-]{36}\)", problem["title"])
    # the verb said once: "next: drain — check cooling", and how without "drain if it persists"
    entry = result.output[result.output.index("throttled on GPU 5"):]
    entry = entry[:entry.index("evidence")]
    assert entry.count("drain") == 1 and "next: drain — check cooling" in entry and "how: check the cooling" in entry


def test_with_no_retest_a_slow_gpu_is_unconfirmed_and_unchecked_never_a_pass(tmp_path):
    """A GPU slow with no reason NVML shows needs its re-test: without one it is no verdict (exit 3)."""
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps({"nodes": 2, "faults": [{"kind": "slow_gpu", "host": "node002", "gpu": 4,
                                                         "factor": 0.7}]}))
    result, document = _triage(slow, "node002", tmp_path, "--no-retest")
    assert result.exit_code == 3, result.output
    assert document["retested"] is False
    (problem,) = document["problems"]
    assert (problem["severity"], problem["gpu"]) == ("warn", 4)
    (not_checked,) = document["not_checked"]
    assert not_checked.startswith("gemm.tflops was 30") and "it was not re-tested (--no-retest)" in not_checked
    confirmed, _ = _triage(slow, "node002", tmp_path)  # the same GPU, re-tested: slow again, a fail
    assert confirmed.exit_code == 1, confirmed.output


def test_a_healthy_node_says_nothing_found_and_what_was_checked(fleet, tmp_path):
    result, document = _triage(fleet, "node001", tmp_path)
    assert result.exit_code == 0
    assert document["problems"] == [] and document["not_checked"] == []
    assert "Nothing found in the measurements, the telemetry, the kernel log or the recovery actions" in result.output
    checked = " | ".join(document["checked"])
    for item in ("8 x NVIDIA H100 80GB HBM3", "gemm", "p2p", "telemetry", "kernel log", "0 Xid lines",
                 "NVML recovery action of 8 GPUs", "compared with the SKU figures"):
        assert item in checked
    assert document["probes"] == ["facts", "telemetry", "gemm", "membw", "p2p", "pcie", "smclock", "xid"]
    assert document["duration_s"] == 30


def test_an_unreadable_kernel_log_says_so_and_is_no_pass(fleet, tmp_path):
    result, document = _triage(fleet, "node004", tmp_path)
    assert result.exit_code == 3
    (gap,) = document["not_checked"]
    assert gap.startswith("the kernel log (Xid history): the kernel log could not be read")
    assert "Operation not permitted" in gap
    assert "Nothing found in what could be checked" in result.output
    assert "Not checked (not a pass):" in result.output and document["xid"]["log_read"] is False


def test_an_application_xid_is_a_warning_and_an_unknown_code_is_named_not_dropped(fleet, tmp_path):
    result, document = _triage(fleet, "node005", tmp_path)
    assert result.exit_code == 0  # nothing to act on: warnings only
    titles = [problem["title"] for problem in document["problems"]]
    assert len(titles) == 2 and all(problem["severity"] == "warn" for problem in document["problems"])
    unknown = next(problem for problem in document["problems"] if "4242" in problem["title"])
    assert "unknown Xid 4242" in unknown["title"] and "not in gpudiag's Xid catalog" in unknown["title"]
    assert unknown["action"] == "inspect" and unknown["gpu"] == 6
    engine = next(problem for problem in document["problems"] if "Xid 13" in problem["title"])
    assert engine["next_step"].startswith("ignore unless it repeats") and "logged 3 times" in engine["evidence"][0]


def test_the_host_argument_and_json_on_stdout(fleet):
    result = _run("node002", "--simulate", str(fleet), "--no-store", "-q", "--duration", "30", "--json", "-")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["schema"] == "gpudiag.triage/1" and document["host"] == "node002"
    assert document["exit_code"] == 1
    # the analysis's one finding is the pending recovery (xid), which the triage's problems explain
    assert [(f["kind"], f["metric"]) for f in document["findings"]] == [("xid", "xid.recovery_action")]


def test_judged_against_the_stored_baseline_and_the_hosts_own_history(tmp_path):
    healthy, slow = tmp_path / "healthy.json", tmp_path / "slow.json"
    healthy.write_text(json.dumps({"nodes": 4}))
    slow.write_text(json.dumps({"nodes": 4, "faults": [{"kind": "slow_gpu", "host": "node001", "gpu": 2,
                                                        "factor": 0.8}, {"kind": "slow_node", "host": "node001",
                                                                         "factor": 0.5}]}))
    store = tmp_path / "gpudiag.db"
    for _ in range(2):
        sweep = CliRunner().invoke(main, ["sweep", "--simulate", str(healthy), "--store", str(store), "--links",
                                          "none", "-q"], catch_exceptions=False)
        assert sweep.exit_code == 0
    built = CliRunner().invoke(main, ["baseline", "build", "--last", "2", "--name", "default", "--store", str(store)])
    assert built.exit_code == 0
    document_path = tmp_path / "triage.json"
    result = _run("--simulate", str(slow), "node001", "--store", str(store), "-q", "--json", str(document_path))
    document = json.loads(document_path.read_text())
    assert result.exit_code == 1 and document["baseline"] == "default"
    analysed = [p for p in document["problems"] if p["source"].startswith("analysis")]
    slow_node = next(p for p in analysed if "slow node on node001" in p["title"])
    assert "(baseline, " in slow_node["evidence"][1]
    # GPU 2, slow beside its siblings on top of the node's slowness, keeps a finding of its own
    assert any("slow gpu on GPU 2" in p["title"] for p in analysed)
    history = next(p for p in document["problems"] if p["source"] == "history")
    assert "below this host's own history" in history["title"]
    # the worst first: the starved host's pinned copies run at half their speed of before
    assert history["evidence"][0].startswith(("pcie.bandwidth", "GPU 0 pcie.bandwidth"))
    assert "50.0 % below" in history["evidence"][0] and int(history["title"].split()[0]) >= 3
    assert len(document["history"]) == 2 and "the host's history: 2 stored sweeps" in document["checked"]


@pytest.mark.parametrize(("args", "says"), [
    (("--no-store",), "name the host"),
    (("node999", "--no-store"), "not a node of the simulated fleet"),
    (("node001", "--host", "node002", "--no-store"), "two hosts given"),
    (("node001", "--no-store", "--baseline", "x"), "--no-store reads no store"),
    (("node001", "--store", "/nonexistent/gpudiag.db"), "no such store"),
])
def test_bad_input_is_exit_2_before_anything_runs(fleet, args, says):
    result = CliRunner().invoke(main, ["triage", "--simulate", str(fleet), *args])
    assert result.exit_code == 2 and says in result.output


def test_an_xid_fault_needs_its_code(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"nodes": 2, "faults": [{"kind": "xid", "host": "node001", "gpu": 0}]}))
    result = CliRunner().invoke(main, ["triage", "--simulate", str(path), "node001", "--no-store"])
    assert result.exit_code == 2 and "faults[0].code: missing" in result.output
