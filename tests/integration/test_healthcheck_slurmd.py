"""The shipped health check (examples/slurm/healthcheck.sh) as slurmd itself runs it
(HealthCheckProgram), on a real Slurm cluster of this test's own (slurm_cluster.py): the failing
node of a simulated fleet is drained with gpudiag's reason, the healthy ones stay idle, and a node
gpudiag drained that passes now is returned to service while one drained by hand stays drained."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from slurm_cluster import SlurmCluster, requires_slurm
from sshd_hosts import pid_is_running

pytestmark = requires_slurm

ROOT = Path(__file__).resolve().parents[2]
HEALTHCHECK = ROOT / "examples" / "slurm" / "healthcheck.sh"


def _wait_for(what: str, ready: Callable[[], bool], cluster: SlurmCluster, log: Path, timeout_s: float) -> None:
    """Poll ``ready`` until it holds; fails after ``timeout_s`` with the node states and the health check's log."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} not within {timeout_s} s: {cluster.node_states()}\n"
                         f"{log.read_text() if log.exists() else '(no health check log)'}")


def test_slurmd_runs_the_health_check_which_drains_on_fail_and_undrains_what_passes(tmp_path: Path):
    """slurmd itself runs the shipped healthcheck.sh (HealthCheckProgram, at its start and every 5 s on the
    IDLE nodes, drained ones included): the failing node is drained with gpudiag's reason, the healthy nodes
    stay idle; a node gpudiag drained that passes now is returned to service, one drained by hand stays
    drained. The cluster is this test's own, so its checks touch no other test's nodes."""
    tmp_path.chmod(0o755)
    fleet = {"nodes": 4, "name_format": "n{}", "faults": [{"kind": "slow_gpu", "host": "n2", "gpu": 3, "factor": 0.7}]}
    (tmp_path / "fleet.json").write_text(json.dumps(fleet))
    log = tmp_path / "healthcheck.log"
    (tmp_path / "healthcheck.conf").write_text(
        f'GPUDIAG="{sys.executable} -m gpudiag"\nGPUDIAG_HERE=""\nGPUDIAG_BUDGET=45\n'
        f'GPUDIAG_ARGS="--simulate {tmp_path / "fleet.json"} --no-store"\nGPUDIAG_LOG={log}\n')
    # slurmd gives a health check SLURMD_NODENAME and nothing else: a real node's scontrol reads
    # /etc/slurm/slurm.conf, this cluster's file is named in the environment of the slurmd running the check.
    wrapper = tmp_path / "healthcheck"
    wrapper.write_text("#!/bin/sh\n"
                       "SLURM_CONF=$(tr '\\0' '\\n' </proc/$PPID/environ | sed -n 's/^SLURM_CONF=//p')\n"
                       f"export SLURM_CONF\nGPUDIAG_HEALTHCHECK_CONFIG={tmp_path / 'healthcheck.conf'} "
                       f"exec {HEALTHCHECK}\n")
    wrapper.chmod(0o755)
    cluster = SlurmCluster(4, health_check=str(wrapper), health_check_interval=5, health_check_node_state="IDLE")
    pids: set[int] = set()
    try:
        cluster.start()
        config = cluster.run(["scontrol", "show", "config"]).stdout
        assert f"HealthCheckProgram      = {wrapper}" in config and "HealthCheckNodeState    = IDLE" in config

        def n2_drained_the_rest_checked() -> bool:
            states, text = cluster.node_states(), log.read_text() if log.exists() else ""
            return (states["n2"][0] == "drained" and states["n2"][1].startswith("gpudiag:")
                    and "node n2: FAILED (gpudiag exit 1): gpudiag preflight: FAIL n2, exit 1, " in text
                    and all(f"node {name}: healthy (gpudiag exit 0)" in text for name in ("n1", "n3", "n4")))

        _wait_for("n2 drained by the health check, n1, n3 and n4 checked healthy", n2_drained_the_rest_checked,
                  cluster, log, 20.0)
        states = cluster.node_states()
        assert states["n2"][1].startswith("gpudiag: gemm: slow_gpu GPU 3 gemm.tflops -"), states
        assert {name: states[name] for name in ("n1", "n3", "n4")} == dict.fromkeys(("n1", "n3", "n4"), ("idle", ""))

        # n4 as if gpudiag had drained it before (it passes now); n1 drained by hand
        cluster.drain_as_gpudiag("n4", "gpudiag: gemm: slow_gpu GPU 5 gemm.tflops -20%")
        cluster.set_state("n1", "DRAIN", "bad cable")
        seen = len(log.read_text())

        def n4_returned_n1_kept() -> bool:
            later = log.read_text()[seen:]
            return (cluster.node_states()["n4"] == ("idle", "")
                    and "returned to service: scontrol update NodeName=n4 State=RESUME" in later
                    and 'left drained: n1: drained by someone else (reason: "bad cable")' in later
                    and "node n2: FAILED (gpudiag exit 1)" in later)

        _wait_for("n4 returned to service and n1 kept drained by a later health check", n4_returned_n1_kept,
                  cluster, log, 20.0)
        states = cluster.node_states()
        assert states["n1"] == ("drained", "bad cable"), states
        assert states["n2"][0] == "drained" and states["n2"][1].startswith("gpudiag: gemm: slow_gpu GPU 3"), states
        assert states["n3"] == ("idle", ""), states
    finally:
        pids = cluster.process_ids()
        cluster.stop()
    left = sorted(pid for pid in pids if pid_is_running(pid))
    assert not left, f"processes of the slurm test cluster still running after its stop: {left}"
