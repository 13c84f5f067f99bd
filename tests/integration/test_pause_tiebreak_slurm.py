"""A paused job's tie-break through the real ``srun`` (slurm_cluster.py: four nodes on this machine): the job's
node that the sweep did not probe is reached as its own nodes are (the bundle staged where the nodes find it,
its facts run in an srun step) and pair-tested through one-node steps inside the job.

Every node of the test cluster is this machine, so no node's link can be made slower than another's: the sweep
is told a line rate no loopback pair reaches, every pair is slow and no host is known good, a tie. What is
tested is that the further peer is reached and measured over srun; the verdicts are the netns test's
(test_pause_tiebreak_netns.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from slurm_cluster import SlurmCluster, requires_slurm
from test_sweep_ssh import NO_COMPARISON

pytestmark = requires_slurm


def test_a_further_peer_is_reached_and_pair_tested_through_srun_inside_the_job(clean_slurm_cluster: SlurmCluster,
                                                                                tmp_path: Path):
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text(NO_COMPARISON)
    out = tmp_path / "slurm.json"
    # n2 the suspect, n1 and n4 its references: n3 is the job's one further node.
    argv = ["salloc", "--quiet", "-N4", sys.executable, "-m", "gpudiag", "sweep", "--launcher", "slurm",
            "--probes", "facts", "--python", sys.executable, "--no-store", "--thresholds", str(thresholds), "-q",
            "--slurm-bundle-dir", str(tmp_path / "bundles"), "--json", str(out), "--pause", "--suspects", "n2",
            "--links", "screen", "--net-backend", "tcp", "--net-duration", "0.3", "--net-streams", "1",
            "--net-line-rate", "1000"]
    done = subprocess.run(argv, env=clean_slurm_cluster.env(), capture_output=True, text=True, timeout=300,
                          check=False, stdin=subprocess.DEVNULL)
    document = json.loads(out.read_text())
    assert {host["host"] for host in document["hosts"]} == {"n1", "n2", "n4"}, done.stderr
    extra = document["focus"]["extra_peers"]
    assert extra["tried"] == [{"host": "n3", "status": "ok", "error": None}], done.stderr
    assert extra["peers"] == ["n3"] and 0 < extra["pair_tests"] <= extra["max_pair_tests"]
    with_n3 = [link for link in document["links"] if "n3" in (link["a"], link["b"])]
    assert with_n3 and all(link["value"] is not None for link in with_n3), with_n3  # measured through srun
    assert done.returncode in (1, 3)  # a tie no peer can break here is never a pass
