"""A small group's GPU-pair keys are shifted together or not at all (gpudiag.analysis.groups):
through the simulated fleet and the whole sweep."""

import json
from pathlib import Path

from gpudiag.run.fanout import SweepOptions
from gpudiag.run.hostprobe import ProbeOptions
from gpudiag.run.request import Reach, SweepRequest
from gpudiag.run.sweep import run_sweep
from gpudiag.sim import FleetFile

PROBES = ("facts", "telemetry", "p2p")


def _sweep(tmp_path: Path, fleet: dict):
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(fleet))
    return run_sweep(SweepRequest(hosts_argument=None, reach=Reach(stand_in=FleetFile(str(path))),
                                  sweep=SweepOptions(probe=ProbeOptions(names=PROBES), fanout=8)))


def _fleet(nodes: int, cv: float, seed: int, faults: list[dict], **fields) -> dict:
    return {"nodes": nodes, "name_format": "node{:04d}", "gpus_per_node": 8, "seed": seed,
            "noise": {"gemm_cv": cv, "membw_cv": cv, "link_cv": 2 * cv}, "faults": faults, **fields}


def test_one_gpu_pair_of_three_hosts_low_by_chance_is_no_fleet_shift(tmp_path):
    # Three H100 hosts among five of three models at 3 % noise: one pair key of 56, one figure a
    # host, read 7.2 % under the SKU figure on all three, and a healthy group was a fleet_shift.
    names = [f"node{i:04d}" for i in range(1, 6)]
    fleet = _fleet(5, 0.03, 14, [], overrides=[{"hosts": names[1:2], "gpu_model": "NVIDIA H200"},
                                              {"hosts": names[2:3], "gpu_model": "NVIDIA A100-SXM4-80GB"}])
    result = _sweep(tmp_path, fleet)
    assert [f for f in result.findings if f.kind in ("fleet_shift", "software_regression")] == []


def test_every_gpu_pair_of_a_small_job_15_pct_slow_is_one_shift_and_drains_nothing(tmp_path):
    faults = [{"kind": "slow_p2p", "host": f"node{h:04d}", "gpu": g, "peer_gpu": p, "factor": 0.85}
              for h in range(1, 5) for g in range(8) for p in range(g + 1, 8)]
    result = _sweep(tmp_path, _fleet(4, 0.01, 1, faults))
    shifts = [f for f in result.findings if f.kind == "fleet_shift"]
    assert len(shifts) == 1 and shifts[0].host == "node[0001-0004]" and "p2p.bandwidth" in shifts[0].evidence
    assert not [f for f in result.findings if f.action == "drain"]
