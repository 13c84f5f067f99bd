"""Xids in sweeps (``--probes`` naming ``xid``): planted in a simulated fleet, they reach the
sweep through the xid probe's records, as on a real node, and become ``xid`` findings of the GPU
named by NVML's index, UUID and bus id. A recovery action NVML reports pending is the driver's
word now (a fail with its verb); a logged Xid on a GPU with nothing pending is a warning (it was
recovered since, or NVML cannot say), never a drain; application errors give no finding; an
unreadable kernel log is unchecked, never a pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from gpudiag.cli.main import main

PROBES = "facts,telemetry,xid,gemm"


def _sweep(tmp_path: Path, faults: list[dict[str, Any]], probes: str = PROBES) -> tuple[Result, dict[str, Any]]:
    fleet, out = tmp_path / "fleet.json", tmp_path / "out.json"
    fleet.write_text(json.dumps({"nodes": 8, "seed": 5, "faults": faults}))
    argv = ["sweep", "--simulate", str(fleet), "--probes", probes, "--duration", "0.2", "-q", "--no-store",
            "--links", "none", "--json", str(out)]
    result = CliRunner().invoke(main, argv, catch_exceptions=False)
    return result, json.loads(out.read_text())


def _xids(document: dict[str, Any]) -> list[tuple[Any, ...]]:
    return sorted((f["host"], f["gpu"], f["severity"], f["action"], f["metric"])
                  for f in document["findings"] if f["kind"] == "xid")


def test_a_pending_recovery_action_fails_and_a_recovered_xid_is_only_watched(tmp_path: Path):
    result, document = _sweep(tmp_path, [
        {"kind": "xid", "host": "node003", "gpu": 2, "code": 79, "recovery_action": 2},
        {"kind": "xid", "host": "node005", "gpu": 4, "code": 94, "count": 3},
        {"kind": "xid", "host": "node006", "gpu": 1, "code": 13, "count": 40}])
    assert result.exit_code == 1
    assert _xids(document) == [("node003", 2, "fail", "reboot", "xid.recovery_action"),
                               ("node005", 4, "warn", "watch", "xid.xid")]
    pending = next(f for f in document["findings"] if f["host"] == "node003")
    assert pending["gpu_uuid"].startswith("GPU-") and pending["pci_bus_id"].startswith("00000000:")
    assert "recovery action 2 (NODE_REBOOT) pending" in pending["evidence"]
    assert "Xid 79" in pending["evidence"] and "1 time," in pending["evidence"]
    recovered = next(f for f in document["findings"] if f["host"] == "node005")
    assert "Xid 94" in recovered["evidence"] and "3 times" in recovered["evidence"]
    assert "recovered since" in recovered["evidence"]
    assert not any(f["host"] == "node006" for f in document["findings"])  # Xid 13: the application's


def test_only_the_pending_recovery_drains_in_the_pre_flight_exclude_list(tmp_path: Path):
    result, document = _sweep(tmp_path, [
        {"kind": "xid", "host": "node003", "gpu": 2, "code": 48, "recovery_action": 1},
        {"kind": "xid", "host": "node007", "gpu": 0, "code": 79}])
    assert result.exit_code == 1
    fails = {f["host"] for f in document["findings"] if f["severity"] == "fail"}
    assert fails == {"node003"}
    assert _xids(document) == [("node003", 2, "fail", "reset_gpu", "xid.recovery_action"),
                               ("node007", 0, "warn", "watch", "xid.xid")]


def test_a_gpu_gone_from_the_bus_is_missing_and_its_xid_cannot_be_called_recovered(tmp_path: Path):
    result, document = _sweep(tmp_path, [{"kind": "gpu_missing", "host": "node004", "gpu": 6},
                                         {"kind": "xid", "host": "node004", "gpu": 6, "code": 79}])
    assert result.exit_code == 1
    kinds = {(f["kind"], f["severity"]) for f in document["findings"] if f["host"] == "node004"}
    assert ("missing_gpu", "fail") in kinds and ("xid", "warn") in kinds
    xid = next(f for f in document["findings"] if f["kind"] == "xid")
    assert xid["action"] == "inspect" and "NVML could not say" in xid["evidence"]


def test_an_unreadable_kernel_log_is_unchecked_not_a_pass(tmp_path: Path):
    result, document = _sweep(tmp_path, [{"kind": "kernel_log_unreadable", "host": "node002"}])
    assert result.exit_code == 3
    gaps = [f for f in document["findings"] if f["kind"] == "unchecked" and f["host"] == "node002"]
    assert gaps and any("kernel" in f["evidence"] or "xid" in (f["metric"] or "") for f in gaps)


def test_without_the_xid_probe_no_xid_is_read(tmp_path: Path):
    result, document = _sweep(tmp_path, [{"kind": "xid", "host": "node003", "gpu": 2, "code": 79,
                                          "recovery_action": 2}], probes="facts,telemetry,gemm")
    assert result.exit_code == 0 and _xids(document) == []
