"""Pair tests between real sshd hosts when a node, a stranger or the controller misbehaves.

Each hostile node is a ``--python`` wrapper that misbehaves on one host only (it knows its host by
the address SSH reached it on, from SSH_CONNECTION) and runs the real Python elsewhere. The sweep
runs as a child process where it must be killed, else through click's CliRunner. Every process a
test looks for is its own: the wrapper notes the PID of each command it runs (the PID stays when it
execs the real Python or a sleeper), so a process is followed even after its SSH session ended and
it left the sshd's tree; never found by name machine-wide.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from sshd_hosts import SshdFleet, descendant_pids, pid_is_running

from gpudiag.cli.main import main
from probes.context import Deadline
from probes.net.auth import new_nonce
from probes.net.common import PROTOCOL, Channel

# The hosts share this machine's CPUs: no node figure is compared, and the load is no starved node.
NO_COMPARISON = ('{"schema": "gpudiag.thresholds/1", "min_peers": {"value": 100000, "unit": "count"}, '
                 '"small_fleet_min_hosts": {"value": 100000, "unit": "count"}, '
                 '"host_load_per_cpu": {"value": 1000000, "unit": "ratio"}}')
LINK_KINDS = ("slow_nic", "slow_link", "link_error", "fleet_shift")


@pytest.fixture(autouse=True)
def _end_leftovers(tmp_path: Path):
    """After each test, end what its wrapper started and is still running (a failed test's)."""
    yield
    pids = (tmp_path / "pids").read_text().split() if (tmp_path / "pids").exists() else []
    for pid in pids:
        command = Path(f"/proc/{pid}/cmdline")
        try:
            if pid_is_running(int(pid)) and (b" probes " in command.read_bytes().replace(b"\0", b" ")
                                             or command.read_bytes().startswith(b"sleep")):
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            continue


def _files(fleet: SshdFleet, tmp_path: Path, names: list[str] | None = None) -> dict[str, Path]:
    known_hosts = fleet.write_known_hosts(tmp_path / "known_hosts")
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text(NO_COMPARISON)
    return {"known_hosts": known_hosts, "thresholds": thresholds, "json": tmp_path / "sweep.json",
            "config": fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=known_hosts),
            "hosts": fleet.write_hosts_file(tmp_path / "hosts.txt", names)}


def _argv(files: dict[str, Path], python: str, *extra: str) -> list[str]:
    return ["sweep", "--hosts", str(files["hosts"]), "--ssh-config", str(files["config"]),
            "--known-hosts", str(files["known_hosts"]), "--thresholds", str(files["thresholds"]),
            "--python", python, "--probes", "facts", "--json", str(files["json"]), "-q",
            "--links", "full", "--net-backend", "tcp", "--net-duration", "0.3", "--net-streams", "1", *extra]


def _sweep(files: dict[str, Path], python: str, *extra: str) -> tuple[int, dict, str]:
    result = CliRunner().invoke(main, _argv(files, python, *extra), catch_exceptions=False)
    document = json.loads(files["json"].read_text()) if files["json"].exists() else {}
    return result.exit_code, document, result.output


def _wrapper(tmp_path: Path, cases: dict[str, str] | None = None) -> str:
    """A node Python that notes its PID in ``tmp_path/pids``: on the host whose address is a key of
    ``cases``, the shell text there runs first (it may ``exec`` something else); the real Python
    otherwise. ``$1..`` are the probe bundle's arguments (``$3`` the command: net-server, ...)."""
    # SSH_CONNECTION is "client-address client-port server-address server-port": the host's own address
    lines = ["#!/bin/sh", f'echo $$ >> {tmp_path / "pids"}', 'here="${SSH_CONNECTION% *}"; here="${here##* }"']
    for address, text in (cases or {}).items():
        lines.append(f'if [ "$here" = "{address}" ]; then\n{text}\nfi')
    lines.append(f'exec {sys.executable} "$@"')
    path = tmp_path / "python"
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return str(path)


def _left_running(tmp_path: Path) -> list[str]:
    """Command lines of the processes the wrapper started (net-server, net-client, a sleeper) still running."""
    pids = (tmp_path / "pids").read_text().split() if (tmp_path / "pids").exists() else []
    found = []
    for pid in pids:
        if not pid_is_running(int(pid)):
            continue
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if " -m probes " in command or command.startswith("sleep"):
            found.append(command)
    return found


def _wait_gone(tmp_path: Path, timeout_s: float) -> float:
    """Seconds until none of the wrapper's processes runs (fails after ``timeout_s``)."""
    started = time.monotonic()
    while _left_running(tmp_path):
        assert time.monotonic() - started < timeout_s, _left_running(tmp_path)
        time.sleep(0.1)
    return time.monotonic() - started


def _pair_processes(fleet: SshdFleet) -> list[str]:
    """Command lines of the pair servers and clients under the fleet's sshd processes now."""
    found = []
    for pid in descendant_pids(host.process.pid for host in fleet.hosts if host.process is not None):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if " -m probes net-" in command and not command.startswith("timeout"):
            found.append(command)
    return found


def _link_findings(document: dict) -> list[tuple[str, str, str | None]]:
    return sorted((f["kind"], f["host"], f["peer"]) for f in document["findings"] if f["kind"] in LINK_KINDS)


def _measured(document: dict) -> set[frozenset[str]]:
    return {frozenset((link["a"], link["b"])) for link in document["links"] if link["value"] is not None}


# --- the secret: a stranger first on the server's port ---------------------------------------------------

def _server_port(fleet: SshdFleet, timeout_s: float = 60.0) -> tuple[int, str]:
    """The TCP port a pair server under the fleet's sshd listens on, once one does, and its command line."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for pid in descendant_pids(host.process.pid for host in fleet.hosts if host.process is not None):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"net-server" in command and not command.startswith(b"timeout"):
                port = _listening_port(pid)
                if port is not None:
                    return port, command.decode(errors="replace").replace("\0", " ")
        time.sleep(0.02)
    raise AssertionError("no pair server listened")


def _listening_port(pid: int) -> int | None:
    try:
        inodes = {os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1] for fd in os.listdir(f"/proc/{pid}/fd")
                  if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:[")}
        rows = [line.split() for name in ("tcp", "tcp6")
                for line in Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]]
    except OSError:
        return None
    ports = [int(row[1].rsplit(":", 1)[1], 16) for row in rows if row[3] == "0A" and row[9] in inodes]
    return ports[0] if ports else None


def test_a_stranger_first_on_the_pair_servers_port_neither_takes_the_session_nor_learns_anything(
        make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(2)
    files = _files(fleet, tmp_path)
    # node01's client starts 3 s late: the stranger is surely first
    python = _wrapper(tmp_path, {fleet.host("node01").address: 'if [ "$3" = net-client ]; then sleep 3; fi'})
    said: list[object] = []

    def intrude() -> None:
        port, command = _server_port(fleet)
        said.append(command)
        silent = socket.create_connection(("127.0.0.1", port))  # and one that never speaks
        stranger = Channel(socket.create_connection(("127.0.0.1", port), timeout=10), Deadline.after(30))
        said.append(stranger.receive())
        stranger.send({"protocol": PROTOCOL, "backend": "tcp", "nonce": new_nonce(),
                       "params": {"streams": 1, "duration_s": 0.3}, "proof": "0" * 64})
        stranger.sock.settimeout(10)
        said.append(stranger.sock.recv(4096))  # b"": dropped without a word
        stranger.close()
        silent.close()

    intruder = threading.Thread(target=intrude, daemon=True)
    intruder.start()
    code, document, output = _sweep(files, python, "--net-address", "iface:lo")
    intruder.join(30)
    command, greeting, after = said
    assert isinstance(greeting, dict) and set(greeting) == {"protocol", "backend", "nonce", "proof"}
    assert after == b""
    assert _measured(document) == {frozenset(("node01", "node02"))}, output  # the test still measured
    assert not _link_findings(document)
    # two hosts over tcp: measured, but nothing to compare the pair with (no fleet, baseline or line rate tcp
    # reaches), which is said, exit 3, and is no finding against either end
    (gap,) = [f for f in document["findings"] if f["kind"] == "unchecked"]
    assert gap["metric"] == "link.tcp" and "not compared, not passed" in gap["evidence"] and code == 3
    # the secret came on stdin: neither the command line nor anything written shows one
    assert " --token - " in str(command) and not re.search(r"[0-9a-f]{64}", str(command))
    assert not re.search(r"[0-9a-f]{64}", files["json"].read_text() + output)


# --- reported addresses checked, the bind, malformed lines: only the liar's verdict changes ----------------

def test_addresses_a_node_reports_are_checked_and_only_that_nodes_verdict_changes(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(5)
    files = _files(fleet, tmp_path)
    node01_ssh = fleet.host("node01").address

    def reports(addresses: str) -> str:
        return (f'if [ "$3" = net-info ]; then echo \'{{"event": "interface", "interface": "lo", '
                f'"addresses": {addresses}}}\'; exit 0; fi')

    python = _wrapper(tmp_path, {
        fleet.host("node02").address: reports(f'["{node01_ssh}"]'),  # another host's SSH address
        fleet.host("node03").address: reports('["192.0.2.7"]'),  # an address that is not its own
        fleet.host("node04").address: reports('["127.0.0.50:9999"]'),  # not an address at all
    })
    code, document, output = _sweep(files, python, "--net-address", "iface:lo")
    assert code == 3, output
    left_out = {f["host"]: f["evidence"] for f in document["findings"]
                if f["kind"] == "unchecked" and "left out of the link rounds" in f["evidence"]}
    assert set(left_out) == {"node02", "node04"}
    assert f"{node01_ssh} is node01's SSH address" in left_out["node02"]
    assert "malformed answer" in left_out["node04"] and "'addresses[0]' must be an IP address" in left_out["node04"]
    # node03's address passed the controller's checks; its own kernel refused the bind
    assert _link_findings(document) == [("link_error", "node03", None)]
    (node03,) = [f for f in document["findings"] if f["kind"] == "link_error"]
    assert "cannot listen on 192.0.2.7" in node03["evidence"] and "node03's own end" in node03["evidence"]
    assert frozenset(("node01", "node05")) in _measured(document)
    assert not any(link["a"] in ("node02", "node04") or link["b"] in ("node02", "node04")
                   for link in document["links"])
    assert {h["host"]: h["status"] for h in document["hosts"]} == dict.fromkeys(fleet.host_names(), "ok")
    _wait_gone(tmp_path, timeout_s=10)


BAD_LISTENING = [
    '{"event": "listening", "backend": "tcp", "port": "abc", "protocol": "gpudiag-net/2"}',
    '{"event": "listening", "backend": "tcp", "port": Infinity, "protocol": "gpudiag-net/2"}',
    '{"event": "listening", "backend": "tcp", "port": 1e999, "protocol": "gpudiag-net/2"}',
    '{"event": "listening", "backend": "tcp", "port": 123456789012345678901234567890, "protocol": "gpudiag-net/2"}',
    '["listening", 40000]',
    '{"event": "listening", "backend": "tcp", "port": 40000, "protocol": "gpudiag-net/2", "bind": "$(reboot)"}',
]


@pytest.mark.parametrize("line", BAD_LISTENING)
def test_a_pair_server_printing_a_malformed_listening_line_is_its_own_link_error(make_sshd_fleet, tmp_path: Path,
                                                                                   line: str):
    fleet = make_sshd_fleet(3)
    files = _files(fleet, tmp_path)
    python = _wrapper(tmp_path, {fleet.host("node02").address:
                                 f"if [ \"$3\" = net-server ]; then echo '{line}'; exec sleep 60; fi"})
    code, document, output = _sweep(files, python, "--net-address", "iface:lo")
    assert code == 3, output  # not 4: no exception, and the document was written
    assert _link_findings(document) == [("link_error", "node02", None)]
    # (node02's runs: a healthy pair's run may fail once under load, and is run again: measured below)
    errors = [link["error"] for link in document["links"]
              if link["value"] is None and "node02" in (link["a"], link["b"])]
    assert errors and all("node02: the pair server did not start: its first line is no listening event" in error
                          for error in errors)
    assert frozenset(("node01", "node03")) in _measured(document)
    _wait_gone(tmp_path, timeout_s=10)  # the liar's sleeper was ended with its server


def test_a_pair_client_printing_malformed_records_is_its_own_link_error(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(3)
    files = _files(fleet, tmp_path)
    record = ('{"probe": "net", "device": "host", "metric": "bandwidth", "value": 9.5, "unit": "Gbit/s", '
              '"status": "ok", "params": {"backend": "tcp", "direction": "client_to_server"}}')
    # two figures for one direction and none for the other
    python = _wrapper(tmp_path, {fleet.host("node02").address:
                                 f"if [ \"$3\" = net-client ]; then echo '{record}'; echo '{record}'; exit 0; fi"})
    code, document, output = _sweep(files, python, "--net-address", "iface:lo")
    assert code == 3, output
    assert _link_findings(document) == [("link_error", "node02", None)]
    # (node02's runs: a healthy pair's run may fail once under load, and is run again: measured below)
    errors = [link for link in document["links"] if link["value"] is None and "node02" in (link["a"], link["b"])]
    assert errors and all(link["a"] == "node02" and link["fault"] == "node02" for link in errors)
    assert all("two records for client_to_server" in link["error"] for link in errors)
    assert frozenset(("node01", "node03")) in _measured(document)


# --- short-lived: a client that never comes, a controller that dies ---------------------------------------

def test_a_pair_server_whose_client_fails_is_ended_at_once(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(2)
    files = _files(fleet, tmp_path)
    python = _wrapper(tmp_path, {fleet.host("node01").address:
                                 'if [ "$3" = net-client ]; then echo "no route to the peer" >&2; exit 1; fi'})
    started = time.monotonic()
    code, document, output = _sweep(files, python, "--net-address", "iface:lo", "--links", "screen")
    elapsed = time.monotonic() - started
    assert code == 3, output
    (link,) = document["links"]
    assert link["value"] is None and "no route to the peer" in link["error"] and link["fault"] == "node01"
    assert elapsed < 40  # the server's deadline is 64 s: it was ended, not waited for
    seconds = _wait_gone(tmp_path, timeout_s=10)
    print(f"sweep with a failing pair client: {elapsed:.1f} s; its server gone {seconds:.1f} s after the sweep")


def test_pair_processes_end_within_seconds_when_the_controller_is_killed(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(2)
    files = _files(fleet, tmp_path)
    argv = _argv(files, _wrapper(tmp_path), "--net-address", "iface:lo")
    argv[argv.index("--net-duration") + 1] = "30"  # a long test: it is surely under way when killed
    controller = subprocess.Popen([sys.executable, "-m", "gpudiag", *argv], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while not any("net-client" in command for command in _pair_processes(fleet)):
            assert time.monotonic() < deadline and controller.poll() is None, "no pair test started"
            time.sleep(0.1)
        time.sleep(1.0)  # both ends are measuring
        controller.send_signal(signal.SIGKILL)
        controller.wait(10)
        seconds = _wait_gone(tmp_path, timeout_s=15)  # the server's deadline is 94 s away
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
    print(f"pair processes gone {seconds:.1f} s after the controller's SIGKILL")
