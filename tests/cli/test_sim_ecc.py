"""GPU memory errors planted in a simulated fleet (the ``ecc`` fault) reach a sweep through the
telemetry probe's NVML readings, as on a real node, and become ``ecc`` findings: uncorrectable
errors are a fail (reset the GPU), a failed row remap a fail (drain: RMA), a pending remap alone
a warning (watch). A bad ``ecc`` fault is one line naming the file and field, exit 2."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gpudiag.cli.main import main
from gpudiag.sim import SimulatedFleet
from gpudiag.sim.fleetfile import load_fleet
from gpudiag.sim.nvml import TELEMETRY_COUNTS, gpu_telemetry

FAULTS = [{"kind": "ecc", "host": "node002", "gpu": 3, "uncorrectable": 2, "remapped_rows": 2, "pending": True},
          {"kind": "ecc", "host": "node004", "gpu": 1, "remapped_rows": 1, "pending": True},
          {"kind": "ecc", "host": "node006", "gpu": 5, "uncorrectable": 1, "aggregate": 9, "remap_failed": True}]


def _sweep(tmp_path: Path, faults: list[dict[str, Any]]) -> tuple[Result, Path]:
    fleet, out = tmp_path / "fleet.json", tmp_path / "out.json"
    fleet.write_text(json.dumps({"nodes": 8, "seed": 3, "faults": faults}))
    argv = ["sweep", "--simulate", str(fleet), "--duration", "0.2", "-q", "--no-store", "--links", "none",
            "--json", str(out)]
    return CliRunner().invoke(main, argv, catch_exceptions=False), out


def test_planted_memory_errors_are_ecc_findings_of_their_gpu_alone(tmp_path: Path):
    result, out = _sweep(tmp_path, FAULTS)
    document = json.loads(out.read_text())
    assert result.exit_code == 1 and document["summary"]["exit_code"] == 1
    found = sorted((f["kind"], f["host"], f["gpu"], f["severity"], f["action"], f["basis"])
                   for f in document["findings"])
    assert found == [("ecc", "node002", 3, "fail", "reset_gpu", "telemetry"),
                     ("ecc", "node004", 1, "warn", "watch", "telemetry"),
                     ("ecc", "node006", 5, "fail", "drain", "telemetry")]
    by_host = {f["host"]: f["evidence"] for f in document["findings"]}
    assert "2 uncorrectable ECC errors since the last reset" in by_host["node002"]
    assert "row remap pending (1 rows remapped" in by_host["node004"]
    assert "a row remap failed" in by_host["node006"]


def test_the_simulated_telemetry_prints_the_readings_the_real_probe_does(tmp_path: Path):
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": 8, "seed": 3, "faults": FAULTS}))
    simulated = SimulatedFleet(load_fleet(fleet))
    node = simulated.node_state("node006")
    records = gpu_telemetry(node, node.gpus[5], random.Random(0))
    readings = {r["metric"]: (r["value"], r["unit"]) for r in records if r["metric"] != "identity"}
    assert [readings[metric] for metric in TELEMETRY_COUNTS] == [(1, "count"), (9, "count"), (0, "count"),
                                                                   (0, "count"), (0, "bool"), (1, "bool")]
    healthy = gpu_telemetry(node, node.gpus[4], random.Random(0))
    assert all(r["value"] == 0 for r in healthy if r["metric"] in TELEMETRY_COUNTS)


def test_a_fleet_without_memory_errors_has_no_ecc_finding(tmp_path: Path):
    result, out = _sweep(tmp_path, [])
    assert result.exit_code == 0 and json.loads(out.read_text())["findings"] == []


@pytest.mark.parametrize(("fault", "message"), [
    ({"kind": "ecc", "host": "node002", "gpu": 3}, "faults[0]: an ecc fault needs uncorrectable"),
    ({"kind": "ecc", "host": "node002", "gpu": 3, "uncorrectable": 4, "aggregate": 2},
     "faults[0].aggregate: 2 is below uncorrectable 4"),
    ({"kind": "ecc", "host": "node002", "gpu": 3, "pending": "yes"}, "faults[0].pending"),
    ({"kind": "ecc", "host": "node002", "gpu": 9, "uncorrectable": 1}, "faults[0].gpu: 9 is out of range"),
])
def test_a_bad_ecc_fault_is_one_line_and_exit_2(tmp_path: Path, fault: dict[str, Any], message: str):
    result, _ = _sweep(tmp_path, [fault])
    assert result.exit_code == 2 and message in result.output, result.output
