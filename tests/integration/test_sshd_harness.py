"""The sshd harness itself, checked with real clients: paramiko and the OpenSSH ``ssh`` binary.

The fixtures fail a test whose fleet leaves any process running after its stop.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import paramiko
import pytest
from sshd_hosts import (
    MakeSshdFleet,
    SshdFleet,
    TestHost,
    pid_is_running,
)

SSH = "/usr/bin/ssh"


def _connect(fleet: SshdFleet, host: TestHost, known_hosts: Path) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(host.address, host.port, username=fleet.user, key_filename=str(fleet.client_key_path),
                   look_for_keys=False, allow_agent=False, timeout=10)
    return client


def _run(client: paramiko.SSHClient, command: str) -> str:
    _, stdout, _ = client.exec_command(command, timeout=10)
    return stdout.read().decode().strip()


def _presented_key(client: paramiko.SSHClient) -> str:
    key = client.get_transport().get_remote_server_key()
    return f"{key.get_name()} {key.get_base64()}"


def _ssh(config: Path, host: str, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SSH, "-F", str(config), "-o", "BatchMode=yes", host, command],
                          capture_output=True, text=True, timeout=30)


def test_every_host_presents_its_own_key_and_runs_commands(sshd_fleet: SshdFleet, tmp_path: Path) -> None:
    known_hosts = sshd_fleet.write_known_hosts(tmp_path / "known_hosts")
    assert [host.name for host in sshd_fleet.hosts] == [f"node{index:02d}" for index in range(1, 9)]
    assert len({host.host_public_key_line for host in sshd_fleet.hosts}) == 8
    assert len({(host.address, host.port) for host in sshd_fleet.hosts}) == 8
    for host in sshd_fleet.hosts:
        with _connect(sshd_fleet, host, known_hosts) as client:
            assert _presented_key(client) == host.host_public_key_line
            assert _run(client, "echo ok") == "ok"


def test_the_openssh_client_logs_in_with_the_written_config(sshd_fleet: SshdFleet, tmp_path: Path) -> None:
    node03 = sshd_fleet.host("node03")
    known_hosts = sshd_fleet.write_known_hosts(tmp_path / "known_hosts", [node03])
    config = sshd_fleet.write_ssh_config(tmp_path / "ssh_config", [node03], known_hosts_path=known_hosts)
    assert node03.known_hosts_line() == f"[{node03.address}]:{node03.port} {node03.host_public_key_line}"
    done = _ssh(config, "node03", "echo ok")
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr
    hosts_file = sshd_fleet.write_hosts_file(tmp_path / "hosts", ["node01", "node03"])
    assert hosts_file.read_text() == "node01\nnode03\n"


def test_a_host_that_rejects_the_client_key_fails_authentication(
        make_sshd_fleet: MakeSshdFleet, tmp_path: Path) -> None:
    fleet = make_sshd_fleet(2)
    known_hosts = fleet.write_known_hosts(tmp_path / "known_hosts")
    fleet.host("node01").reject_client_key()
    with pytest.raises(paramiko.AuthenticationException):
        _connect(fleet, fleet.host("node01"), known_hosts)
    with _connect(fleet, fleet.host("node02"), known_hosts) as client:
        assert _run(client, "echo ok") == "ok"


def test_a_regenerated_host_key_is_presented_and_the_old_entry_is_refused(
        make_sshd_fleet: MakeSshdFleet, tmp_path: Path) -> None:
    fleet = make_sshd_fleet(1)
    host = fleet.host("node01")
    old_known_hosts = fleet.write_known_hosts(tmp_path / "old_known_hosts")
    old_key, old_pid = host.host_public_key_line, host.process.pid
    host.regenerate_host_key_and_restart()
    assert host.host_public_key_line != old_key and not pid_is_running(old_pid)
    with pytest.raises(paramiko.BadHostKeyException):
        _connect(fleet, host, old_known_hosts)
    config = fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=old_known_hosts)
    done = _ssh(config, "node01", "true")
    assert done.returncode == 255 and "REMOTE HOST IDENTIFICATION HAS CHANGED" in done.stderr
    with _connect(fleet, host, fleet.write_known_hosts(tmp_path / "new_known_hosts")) as client:
        assert _presented_key(client) == host.host_public_key_line


def test_the_unused_endpoint_refuses_connections(sshd_fleet: SshdFleet) -> None:
    address, port = sshd_fleet.unused_endpoint()
    assert (address, port) not in {(host.address, host.port) for host in sshd_fleet.hosts}
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((address, port), timeout=5).close()


def test_a_jump_through_the_bastion_is_forwarded_by_it(make_sshd_fleet: MakeSshdFleet, tmp_path: Path) -> None:
    # sshd logs forwarded channels only from DEBUG1 on; at VERBOSE the bastion shows just the login
    fleet = make_sshd_fleet(2, log_level="DEBUG1")
    bastion, target = fleet.host("node01"), fleet.host("node02")
    known_hosts = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = fleet.write_ssh_config(tmp_path / "ssh_config", extra_by_host={"node02": "ProxyJump node01"},
                                    known_hosts_path=known_hosts)
    done = _ssh(config, "node02", "true")
    assert done.returncode == 0, done.stderr
    bastion_log = bastion.log_path.read_text()
    assert re.search(rf"server_request_direct_tcpip: .* target {re.escape(target.address)} port {target.port}\b",
                     bastion_log), bastion_log
    assert "Starting session" not in bastion_log  # the bastion forwarded; it ran nothing
    assert "Starting session: command" in target.log_path.read_text()


def test_stopping_the_fleet_ends_every_process_it_started(make_sshd_fleet: MakeSshdFleet, tmp_path: Path) -> None:
    fleet = make_sshd_fleet(2)
    directory = fleet.directory
    command = "sleep 3171"
    with _connect(fleet, fleet.host("node02"), fleet.write_known_hosts(tmp_path / "known_hosts")) as client:
        client.exec_command(command)  # an open session with a command still running
        deadline = time.monotonic() + 10
        while not fleet.processes_matching(f"^{command}$") and time.monotonic() < deadline:
            time.sleep(0.02)
        fleet_pids = fleet.process_ids()
        listener_pids = {host.process.pid for host in fleet.hosts}
        sessions = fleet.processes_matching(f"^{command}$")  # found by the fleet's marker, not by name
        assert len(sessions) == 1 and listener_pids < fleet_pids and sessions <= fleet_pids
        fleet.stop()
    assert not [pid for pid in fleet_pids if pid_is_running(pid)]
    assert not fleet.processes_matching(f"^{command}$")
    assert directory is not None and not directory.exists()


@pytest.mark.parametrize("count", [8, 64])
def test_a_fleet_starts_quickly_and_every_host_answers(make_sshd_fleet: MakeSshdFleet, count: int) -> None:
    started = time.monotonic()
    fleet = make_sshd_fleet(count, first_address="127.0.2.1")
    start_s = time.monotonic() - started
    print(f"\n{count} sshd hosts started in {start_s:.2f} s")
    assert start_s < 10.0
    known_hosts = fleet.write_known_hosts(fleet.directory / "known_hosts")

    def echo(host: TestHost) -> str:
        with _connect(fleet, host, known_hosts) as client:
            return _run(client, "echo ok")

    with ThreadPoolExecutor(max_workers=16) as pool:
        assert list(pool.map(echo, fleet.hosts)) == ["ok"] * count
    started = time.monotonic()
    fleet.stop()
    print(f"{count} sshd hosts stopped in {time.monotonic() - started:.2f} s")


def test_a_process_a_session_left_behind_is_still_found_as_the_fleets(make_sshd_fleet: MakeSshdFleet,
                                                                      tmp_path: Path) -> None:
    """An orphan (its session gone, its parent now init) is no descendant of the fleet's sshd any
    more; the marker sshd put into its environment still names it the fleet's, and no other's."""
    fleet, other = make_sshd_fleet(1), make_sshd_fleet(1, first_address="127.0.2.1")
    with _connect(fleet, fleet.hosts[0], fleet.write_known_hosts(tmp_path / "known_hosts")) as client:
        assert _run(client, "nohup sleep 3172 >/dev/null 2>&1 & echo started") == "started"
    # The session's processes end after the client has gone, when sshd gets to it: the sleep is
    # an orphan once its parent (the session's shell or sshd's session process) has exited.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (not (found := fleet.processes_matching("^sleep 3172$"))
                                           or set(found) & fleet.process_ids()):
        time.sleep(0.02)
    (orphan,) = fleet.processes_matching("^sleep 3172$")
    assert orphan not in fleet.process_ids()  # out of the fleet's process tree
    assert not other.processes_matching("^sleep 3172$")
    os.kill(orphan, signal.SIGKILL)
