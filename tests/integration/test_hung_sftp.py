"""Every phase of a host is inside its time limit: a real sshd whose SFTP server never answers (as on a
node whose home file system hangs) is ``timeout`` at ``--host-timeout``, naming the bundle copy, while the
other hosts are probed; nothing is left running on it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from quick_node import quick_facts_python
from sshd_hosts import SshdFleet, TestHost, descendant_pids

from gpudiag.bundle import locate_bundle
from gpudiag.hosts import HostSpec
from gpudiag.transport.fleet import FleetConnector
from gpudiag.transport.ssh import BundleCopyTimeout, SshSettings
from gpudiag.transport.sshconfig import SshOptions, resolve_all

ROOT = Path(__file__).resolve().parents[2]
HOST_TIMEOUT_S = 10.0  # the other hosts answer the facts probe at once (quick_node.py)
# These tests are about a host's time, not judging its figures (see test_sweep_ssh.py).
NO_COMPARISON = ('{"schema": "gpudiag.thresholds/1", "min_peers": {"value": 100000, "unit": "count"}, '
                 '"small_fleet_min_hosts": {"value": 100000, "unit": "count"}, '
                 '"host_load_per_cpu": {"value": 1000000, "unit": "ratio"}}')


def _hang_sftp(host: TestHost, tmp_path: Path) -> None:
    """The host's SFTP server reads its requests and never answers, its stdout open (the shell keeps it);
    it ends when the channel closes."""
    script = tmp_path / f"hung-sftp-{host.name}"
    script.write_text("#!/bin/sh\ncat >/dev/null\n")
    script.chmod(0o755)
    host.restart_with_sftp_subsystem(str(script))


def _sessions_left(host: TestHost, timeout_s: float = 10.0) -> set[int]:
    """The processes under the host's sshd listener once they are gone, or those left after ``timeout_s``."""
    assert host.process is not None
    deadline = time.monotonic() + timeout_s
    while (left := descendant_pids([host.process.pid])) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_a_host_whose_sftp_hangs_is_a_timeout_at_its_host_timeout_and_the_others_are_probed(
        make_sshd_fleet, tmp_path: Path):
    fleet: SshdFleet = make_sshd_fleet(3)
    hung = fleet.host("node02")
    _hang_sftp(hung, tmp_path)
    known = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=known)
    hosts = fleet.write_hosts_file(tmp_path / "hosts.txt")
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text(NO_COMPARISON)
    document = tmp_path / "sweep.json"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "gpudiag", "sweep", "--hosts", str(hosts), "--ssh-config", str(config),
         "--known-hosts", str(known), "--thresholds", str(thresholds), "--no-store", "--python",
         quick_facts_python(tmp_path),
         "--probes", "facts", "--links", "none", "--host-timeout", f"{HOST_TIMEOUT_S:g}", "--json",
         str(document), "-q"], capture_output=True, text=True, timeout=240, check=False, cwd=ROOT)
    elapsed = time.monotonic() - started
    assert done.returncode == 3, done.stderr[-2000:]
    assert elapsed < HOST_TIMEOUT_S + 30  # ended at its host timeout, not after minutes
    hosts_out = {host["host"]: host for host in json.loads(document.read_text())["hosts"]}
    assert {name: host["status"] for name, host in hosts_out.items()} == {
        "node01": "ok", "node02": "timeout", "node03": "ok"}, done.stderr[-2000:]
    error = hosts_out["node02"]["error"]
    assert "copying the probe bundle" in error and f"{HOST_TIMEOUT_S:g} s time limit" in error
    # the time from the hung copy to the host's timeout: its limit, give or take the watch's tick
    assert HOST_TIMEOUT_S <= hosts_out["node02"]["duration_s"] < HOST_TIMEOUT_S + 3.0
    assert not _sessions_left(hung), "a process of the hung host's sessions outlived the sweep"


def test_an_sftp_request_unanswered_for_its_timeout_ends_the_copy_as_a_timeout(make_sshd_fleet, tmp_path: Path):
    fleet: SshdFleet = make_sshd_fleet(1)
    (host,) = fleet.hosts
    _hang_sftp(host, tmp_path)
    known = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=known)
    options = SshOptions(config_file=str(config), known_hosts=str(known))
    spec = HostSpec(host.name)
    connector = FleetConnector(resolve_all([spec], options), options, SshSettings(sftp_timeout_s=2.0))
    session = connector.connect(spec)
    started = time.monotonic()
    try:
        with pytest.raises(BundleCopyTimeout, match="did not answer for 2 s while the probe bundle was copied"):
            session.prepare(locate_bundle())
        assert time.monotonic() - started < 2.0 + 10.0
        assert session.is_open()  # the connection itself is fine: other commands still run
        assert session.run(["echo", "still here"], 10.0).stdout == "still here\n"
    finally:
        session.close()
        connector.close()
    assert BundleCopyTimeout.status == "timeout"
    assert not _sessions_left(host)
