"""Slow NICs among the slower hosts of a fleet of two line rates, through ``gpudiag sweep
--simulate``: four H100 nodes at 400 Gbit/s a rail and four A100 nodes at 200, two of the A100s'
NICs at 75 %. A pair between the two rates runs at 200, in the 200 Gbit/s group, and the screen
gave the 400 Gbit/s hosts their only such pairs with those two: their best pairs there were their
partners', and the group's best pairs read it below its line rate. The two NICs went unnamed
behind an unconfirmed `slow_network` (exit 3) in 12 sweeps of 20 at CV 1.5 %. A host a higher
line rate shows good no longer speaks for the lower group's level."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpudiag.cli.main import main


@pytest.mark.parametrize("seed", [14, 16])
def test_two_slow_nics_among_the_200_gbit_hosts_of_a_mixed_fleet_are_named_and_the_fabric_is_not(
        tmp_path: Path, seed: int):
    names = [f"node{i:04d}" for i in range(1, 9)]
    fleet, out = tmp_path / "fleet.json", tmp_path / "out.json"
    fleet.write_text(json.dumps({
        "nodes": 8, "name_format": "node{:04d}", "gpus_per_node": 8, "seed": seed,
        "noise": {"gemm_cv": 0.015, "membw_cv": 0.015, "link_cv": 0.03},
        "overrides": [{"hosts": names[4:], "gpu_model": "NVIDIA A100-SXM4-80GB"}],
        "faults": [{"kind": "slow_nic", "host": host, "factor": 0.75} for host in ("node0005", "node0008")]}))
    result = CliRunner().invoke(main, ["sweep", "--simulate", str(fleet), "--no-store", "--probes",
                                       "facts,telemetry,gemm,membw,pcie", "--json", str(out), "-q"],
                                catch_exceptions=False)
    findings = json.loads(out.read_text())["findings"]
    assert sorted((f["kind"], f["host"], f["severity"]) for f in findings) == [
        ("slow_nic", "node0005", "fail"), ("slow_nic", "node0008", "fail")], [
        (f["kind"], f["host"], f["evidence"][:300]) for f in findings]
    assert result.exit_code == 1
