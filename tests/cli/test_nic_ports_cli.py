"""NIC ports found without traffic, through the real pipeline (CLI, plan, simulated fleet,
analysis, store) in every mode: a port at half rate, one DOWN and one whose symbol errors keep
growing across two sweeps are ``nic_port`` findings on the right host and port; a healthy fleet
has none; the pre-flight and ``--pause`` run the same checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from gpudiag.cli.main import main

FAST = ("--probes", "gemm,telemetry", "--duration", "0.2", "--links", "none")
HALF_RATE = {"kind": "nic_port", "host": "node002", "rail": 3, "width": 2}
DOWN = {"kind": "nic_port", "host": "node005", "rail": 6, "state": "DOWN"}


def _fleet(tmp_path: Path, *faults: dict[str, Any], name: str = "fleet.json", **fields: Any) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"nodes": 8, "seed": 3, "faults": list(faults), **fields}))
    return str(path)


def _sweep(fleet: str, out: Path, *args: str) -> tuple[int, list[dict[str, Any]]]:
    result = CliRunner().invoke(main, ["sweep", "--simulate", fleet, "-q", "--json", str(out), *FAST, *args],
                                catch_exceptions=False)
    return result.exit_code, [f for f in json.loads(out.read_text())["findings"] if f["kind"] == "nic_port"]


def test_half_rate_down_and_growing_symbol_errors_are_found_on_their_host_and_port(tmp_path):
    store, out = tmp_path / "gpudiag.db", tmp_path / "sweep.json"

    def sweep(symbol_errors: int) -> tuple[int, dict[str, dict[str, Any]]]:
        errors = {"kind": "nic_port", "host": "node007", "rail": 1, "counter": "symbol_error", "count": symbol_errors}
        fleet = _fleet(tmp_path, HALF_RATE, DOWN, errors, name=f"fleet-{symbol_errors}.json")
        code, found = _sweep(fleet, out, "--store", str(store))
        return code, {f["host"]: f for f in found}

    code, first = sweep(50)  # below the floor: not yet a finding
    assert code == 1 and sorted(first) == ["node002", "node005"]
    code, second = sweep(6050)  # 6000 more since the previous sweep
    assert code == 1 and sorted(second) == ["node002", "node005", "node007"]
    half, down, errors = second["node002"], second["node005"], second["node007"]
    assert (half["severity"], half["action"], half["value"], half["reference"]) == ("fail", "drain", 200, 400)
    assert half["evidence"].startswith("mlx5_3 port 1: ACTIVE at 200 Gbit/s (2X NDR)")
    assert (down["severity"], down["action"]) == ("fail", "drain")
    assert down["evidence"].startswith("mlx5_6 port 1: DOWN (physical state Polling)")
    assert (errors["severity"], errors["action"], errors["value"]) == ("warn", "inspect", 6000)
    assert errors["evidence"].startswith("mlx5_1 port 1: symbol errors grew by 6000 since the previous sweep")


def test_a_healthy_fleet_has_no_port_finding(tmp_path):
    code, found = _sweep(_fleet(tmp_path), tmp_path / "sweep.json", "--no-store")
    assert (code, found) == (0, [])


def test_the_preflight_drains_a_node_with_a_port_down(tmp_path):
    fleet = _fleet(tmp_path, {**DOWN, "host": "n3"}, name_format="n{}", nodes=4)
    result = CliRunner().invoke(main, ["preflight", "--no-store", "-q", "--simulate", fleet], catch_exceptions=False,
                                env={"SLURM_JOB_NODELIST": "", "SLURM_NODELIST": ""})
    assert result.exit_code == 1, result.output
    would = [line for line in result.stdout.splitlines() if line.startswith("would run: ")]
    assert len(would) == 1 and "NodeName=n3 " in would[0] and "nic_port" in would[0]


def test_a_paused_job_still_gets_its_ports_checked(tmp_path):
    fleet = _fleet(tmp_path, HALF_RATE, {"kind": "paused_job", "host": "node002", "used_mib": 60000})
    code, found = _sweep(fleet, tmp_path / "sweep.json", "--no-store", "--pause")
    assert code == 1 and [(f["host"], f["severity"]) for f in found] == [("node002", "fail")]


def test_a_port_trained_down_or_lost_since_the_previous_sweep_is_found_where_its_peers_changed_too(tmp_path):
    # a 1-node job whose eight ports all trained at half width after a switch change: no peer runs
    # faster, so only the port's own previous sweep says it; rail 4 also went down
    store, out = tmp_path / "gpudiag.db", tmp_path / "sweep.json"
    code, first = _sweep(_fleet(tmp_path, nodes=1, name="before.json"), out, "--store", str(store))
    assert code == 0 and first == []
    faults = [{"kind": "nic_port", "host": "node001", "rail": rail, "width": 2} for rail in range(8) if rail != 4]
    faults.append({"kind": "nic_port", "host": "node001", "rail": 4, "state": "DOWN"})
    code, second = _sweep(_fleet(tmp_path, *faults, nodes=1, name="after.json"), out, "--store", str(store))
    assert code == 1
    by_port = {f["evidence"].split(":", 1)[0]: f for f in second}
    assert sorted(by_port) == [f"mlx5_{rail} port 1" for rail in range(8)]
    half = by_port["mlx5_0 port 1"]
    assert (half["severity"], half["action"], half["value"], half["reference"]) == ("fail", "drain", 200, 400)
    assert "ran at 400 Gbit/s in the previous sweep: trained down since" in half["evidence"]
    down = by_port["mlx5_4 port 1"]
    assert down["severity"] == "fail" and "DOWN" in down["evidence"]  # its peers are up: they say so
    # every port down since the previous sweep: no peer is up, its own history says it
    fresh = tmp_path / "fresh.db"
    _sweep(_fleet(tmp_path, nodes=1, name="before.json"), out, "--store", str(fresh))
    everything = [{"kind": "nic_port", "host": "node001", "rail": rail, "state": "DOWN"} for rail in range(8)]
    code, third = _sweep(_fleet(tmp_path, *everything, nodes=1, name="down.json"), out, "--store", str(fresh))
    assert code == 1 and len(third) == 8 and {f["severity"] for f in third} == {"fail"}
    assert all("up at 400 Gbit/s in the previous sweep" in f["evidence"] for f in third)
    # without the previous sweep, eight ports at one rate are level with each other: nothing to say
    code, alone = _sweep(_fleet(tmp_path, *faults[:-1], nodes=1, name="alone.json"), out, "--no-store")
    assert alone == []
