"""The real attack of a node on another's identity: a hostile node Python on a real sshd host that
runs the true bundle and rewrites its facts to give another host's name. The sweep sets it aside
(``identity_conflict``, exit 3), and the host it names keeps its own status, facts and series in
the document, the textfile and the store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sshd_hosts import SshdFleet

ROOT = Path(__file__).resolve().parents[2]


def _impostor_wrapper(tmp_path: Path, fleet: SshdFleet, impostor: str, victim: str) -> str:
    """A node Python that, on ``impostor``, runs the real one and rewrites the hostname its facts
    give to ``victim``; the real one, untouched, everywhere else."""
    wrapper = tmp_path / "python"
    wrapper.write_text(
        f'#!/bin/sh\ncase "$SSH_CONNECTION" in\n'
        f'  *" {fleet.host(impostor).address} "*) {sys.executable} "$@" | '
        f"sed 's/\"hostname\": \"[^\"]*\"/\"hostname\": \"{victim}\"/' ;;\n"
        f'  *) exec {sys.executable} "$@" ;;\nesac\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_a_node_rewriting_its_facts_to_another_hosts_name_is_set_aside_over_real_ssh(make_sshd_fleet,
                                                                                      tmp_path: Path):
    fleet = make_sshd_fleet(3)
    known = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=known)
    hosts = fleet.write_hosts_file(tmp_path / "hosts.txt")
    document, prom, store = tmp_path / "sweep.json", tmp_path / "sweep.prom", tmp_path / "gpudiag.db"
    run = subprocess.run(
        [sys.executable, "-m", "gpudiag", "sweep", "--hosts", str(hosts), "--ssh-config", str(config),
         "--known-hosts", str(known), "--python", _impostor_wrapper(tmp_path, fleet, "node02", "node03"),
         "--probes", "facts", "--links", "none", "--json", str(document), "--prom-file", str(prom),
         "--store", str(store), "-q"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 3, run.stdout[-3000:] + run.stderr[-3000:]
    entries = {host["host"]: host for host in json.loads(document.read_text())["hosts"]}
    assert {name: host["status"] for name, host in entries.items()} == {
        "node01": "ok", "node02": "identity_conflict", "node03": "ok"}
    assert entries["node02"]["facts"] == {} and "'node03', the name of node03" in entries["node02"]["error"]
    own = entries["node03"]["facts"]["hostname"]
    assert own != "node03"  # the sshd hosts share this machine's hostname: node03's own word is kept
    text = prom.read_text()
    assert 'Hostname="node03"' not in text  # no series says node03 of any host, the impostor's least of all
    assert f'gpudiag_host_status{{Hostname="{own}",host="node03",status="ok"}} 1.0' in text
    assert 'gpudiag_host_status{Hostname="node02",host="node02",status="identity_conflict"} 1.0' in text
    history = subprocess.run([sys.executable, "-m", "gpudiag", "history", "node02", "--store", str(store), "--json",
                              "-"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    (stored,) = json.loads(history.stdout)["sweeps"]
    assert stored["status"] == "identity_conflict" and stored["figures"] == []
