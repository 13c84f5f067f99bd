"""``gpudiag sweep --pause --suspects`` over real OpenSSH servers whose two reference peers are slow on
every GPU: the further nodes of the job are reached over SSH as the sweep's own hosts are (a connection
of their own, the bundle staged, the facts through the identity check), probed, and join the
references; the re-test of the slow references runs over the sweep's own connection, a further node's
over its own. Each host answers the bundle as a simulated node would (``sim_node_python.py``): six
nodes node01..node06, ``--suspects node03`` with references node02 and node05 (15 % slow on every
GPU), the further nodes node04, node01 and node06 in that order; node01 has no sshd, and one GPU of
node06 is slow (its re-test reaches it over the further nodes' connection)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from sim_node_python import simulated_node_python

from gpudiag.cli.main import main

# The pair tests run over loopback on this machine's two cores: measured, not judged (their figures
# say nothing of a fabric), so only whether each pair could be tested is under test here.
LINKS_NOT_JUDGED = ('{"schema": "gpudiag.thresholds/1", "link_deficit": {"value": 95.0, "unit": "percent"}, '
                    '"link_robust_z": {"value": -1000.0, "unit": "sigma"}}')


def test_slow_references_are_named_with_further_nodes_reached_over_ssh(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(6)
    faults = [{"kind": "slow_gpu", "host": host, "gpu": gpu, "factor": 0.85}
              for host in ("node02", "node05") for gpu in range(8)]
    faults.append({"kind": "slow_gpu", "host": "node06", "gpu": 2, "factor": 0.7})  # a further node's own GPU
    python = simulated_node_python(tmp_path / "nodes", {"nodes": 6, "name_format": "node{:02d}", "seed": 3,
                                                        "faults": faults},
                                   {name: fleet.host(name).address for name in fleet.host_names()})
    fleet.host("node01").stop()
    known_hosts = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=known_hosts)
    out, thresholds = tmp_path / "sweep.json", tmp_path / "thresholds.json"
    thresholds.write_text(LINKS_NOT_JUDGED)
    result = CliRunner(env={"COLUMNS": "200"}).invoke(main, [
        "sweep", "--hosts", str(fleet.write_hosts_file(tmp_path / "hosts")), "--ssh-config", str(config),
        "--known-hosts", str(known_hosts), "--python", python, "--probes", "gemm", "--thresholds", str(thresholds),
        "--links", "screen", "--net-backend", "tcp", "--net-duration", "0.3", "--net-streams", "2",
        "--net-address", "iface:lo", "--pause", "--suspects", "node03", "--host-timeout", "60", "--no-store",
        "--json", str(out)], catch_exceptions=False)
    document = json.loads(out.read_text())
    peers = document["focus"]["node_peers"]
    assert peers["hosts"] == ["node04", "node06"] and peers["max_hosts"] == 4, result.output
    assert peers["not_probed"]["node01"].startswith("unreachable: ")
    assert {host["host"]: host["status"] for host in document["hosts"]} == dict.fromkeys(
        ["node02", "node03", "node04", "node05", "node06"], "ok")
    # (five hosts' tcp pairs are too few for a fleet level, and tcp has no line-rate floor: not compared)
    named = sorted((f["kind"], f["host"], f["severity"], f["confirmed"]) for f in document["findings"]
                   if not (f["kind"] == "unchecked" and f["metric"] == "link.tcp" and f["basis"] == "comparison"))
    assert named == [("slow_gpu", "node06", "fail", True), ("slow_node", "node02", "fail", True),
                     ("slow_node", "node05", "fail", True)], result.output
    assert result.exit_code == 1
    # the further nodes take part in the pair tests too, over their own sessions
    tested = {host for link in document["links"] if link["value"] is not None for host in (link["a"], link["b"])}
    assert {"node04", "node06"} <= tested and all(link["error"] is None for link in document["links"])
