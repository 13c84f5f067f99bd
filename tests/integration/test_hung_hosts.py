"""Hosts that hang while connecting (a tarpit: tarpit.py) are ``timeout`` at ``--host-timeout``, and
their fan-out slots go to the next hosts then, not when paramiko would give up (its banner
timeout is 15 s); what paramiko logs about them is one line per host at most, never a traceback.

Timings are asserted against the old behaviour with a wide margin, never against a tight figure:
a wave of hosts used to take the 15 s banner timeout, and now takes the host timeout (2 s here).
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tarpit import DEAF, GARBLED, SILENT, Tarpit

from gpudiag.transport import ConnectTimedOut, ssh
from gpudiag.transport.ssh import SshConnector, SshSettings
from gpudiag.transport.sshconfig import ResolvedHost

ROOT = Path(__file__).resolve().parents[2]
HOST_TIMEOUT_S = 2.0
FANOUT = 16
BANNER_TIMEOUT_S = 15.0  # paramiko's, and SshSettings' default: what a hung host's slot used to cost


def _resolved(address: str, port: int) -> ResolvedHost:
    return ResolvedHost(label=f"{address}:{port}", hostname=address, user="nobody", port=port, identity_files=(),
                        proxy_jump=None, connect_timeout_s=10.0, known_hosts_files=(),
                        strict_host_key_checking="yes")


@pytest.mark.parametrize("kind", [SILENT, DEAF])
def test_connecting_to_a_hung_host_ends_when_the_hosts_time_is_up(kind: str):
    # silent: accepted, no banner (paramiko waited its 15 s banner timeout); deaf: never accepted
    # (the TCP connect waited its 10 s ConnectTimeout)
    with Tarpit(2, deaf_share=0.5, subnet=90) as tarpit:
        address, port, _ = next(host for host in tarpit.hosts if host[2] == kind)
        connector = SshConnector(SshSettings(), resolve_jump=lambda hop, via: _resolved(hop.host, port))
        started = time.monotonic()
        try:
            with pytest.raises(ConnectTimedOut, match="time limit"):
                connector.connect(_resolved(address, port), within_s=1.0)
        finally:
            connector.close()
        assert time.monotonic() - started < 8.0  # its 1 s, never the transport's own 10 or 15 s
    assert ConnectTimedOut.status == "timeout"


def test_a_reader_that_gives_up_on_the_banner_as_the_hosts_time_ends_logs_nothing_above_debug(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    # On a loaded machine the connecting thread can close a host out of time later than paramiko's
    # reader gives up on its banner (the reader waits READER_MARGIN_S longer; once CI saw it give up
    # first). Here the reader gives up first on purpose, 0.1 s before the host's time ends: what it
    # logs then is the host's timeout, for the outcome to say, not an error line of paramiko's.
    monkeypatch.setattr(ssh, "READER_MARGIN_S", -0.1)
    caplog.set_level(logging.DEBUG, logger="paramiko")
    with Tarpit(1, deaf_share=0.0, subnet=94) as tarpit:
        address, port, _ = tarpit.hosts[0]
        connector = SshConnector(SshSettings(), resolve_jump=lambda hop, via: _resolved(hop.host, port))
        try:
            with pytest.raises(ConnectTimedOut, match="time limit"):
                connector.connect(_resolved(address, port), within_s=1.0)
        finally:
            connector.close()
    banner = [record for record in caplog.records if "protocol banner" in record.getMessage()]
    assert banner and all(record.levelno == logging.DEBUG for record in banner), \
        [(record.levelname, record.getMessage()) for record in caplog.records]
    assert not [record for record in caplog.records if record.levelno > logging.DEBUG], caplog.text


def _closed_port(address: str) -> int:
    """A port on ``address`` nothing listens on: connecting to it is refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def _sweep(hosts_file: Path, tmp_path: Path, *options: str) -> tuple[subprocess.CompletedProcess[str], float, dict]:
    config = tmp_path / "ssh_config"
    config.write_text("")
    known = tmp_path / "known_hosts"
    known.write_text("")
    document = tmp_path / "sweep.json"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "gpudiag", "sweep", "--hosts", str(hosts_file), "--ssh-config", str(config),
         "--known-hosts", str(known), "--fanout", str(FANOUT), "--host-timeout", f"{HOST_TIMEOUT_S:g}",
         "--links", "none", "--probes", "facts", "--no-store", "--json", str(document), *options],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    elapsed = time.monotonic() - started
    assert document.exists(), done.stderr[-2000:]
    return done, elapsed, json.loads(document.read_text())


def _lines_naming(stderr: str, label: str) -> list[str]:
    return [line for line in stderr.splitlines() if f"{label}:" in line or line.rstrip().endswith(label)]


def test_48_hung_hosts_at_fanout_16_end_in_waves_of_the_host_timeout_and_print_no_traceback(tmp_path: Path):
    refusing = [f"127.0.95.{index}" for index in (1, 2)]
    with Tarpit(48, subnet=91) as tarpit:
        hung = [f"{address}:{port}" for address, port, _ in tarpit.hosts]
        hosts_file = tarpit.write_hosts_file(tmp_path / "hosts.txt")
        closed = [f"{address}:{_closed_port(address)}" for address in refusing]
        hosts_file.write_text(hosts_file.read_text() + "".join(f"{label}\n" for label in closed))
        done, elapsed, document = _sweep(hosts_file, tmp_path, "-q")
        arrivals = tarpit.arrivals()
    assert done.returncode == 3, done.stderr[-2000:]
    statuses = {host["host"]: host["status"] for host in document["hosts"]}
    assert statuses == {**{label: "timeout" for label in hung}, **{label: "unreachable" for label in closed}}
    # 50 hosts at 16 at once: 4 waves of 2 s; each took 15 s (60 s) when a slot waited for paramiko
    assert elapsed < 4 * BANNER_TIMEOUT_S / 2, done.stderr[-2000:]
    # the 17th host started when a slot came free at the first wave's time limit, not at 15 s
    assert len(arrivals) > FANOUT and arrivals[FANOUT] - arrivals[0] < BANNER_TIMEOUT_S - 5.0
    assert "Traceback" not in done.stderr and "  File " not in done.stderr, done.stderr[-2000:]
    assert all(len(_lines_naming(done.stderr, label)) <= 1 for label in hung + closed), done.stderr[-2000:]
    assert len(done.stderr.splitlines()) <= len(hung + closed), done.stderr[-2000:]


def test_without_q_a_broken_hosts_ssh_failure_is_one_clean_line_naming_it_and_a_hung_hosts_none(tmp_path: Path):
    # 4 hosts answer garbage with an escape sequence in it (paramiko logged 20 lines of traceback for
    # each); 12 are silent: their timeout is the document's to say, not paramiko's
    with Tarpit(16, deaf_share=0.0, garbled=4, subnet=93) as tarpit:
        labels = {f"{address}:{port}": kind for address, port, kind in tarpit.hosts}
        done, _, document = _sweep(tarpit.write_hosts_file(tmp_path / "hosts.txt"), tmp_path)
    statuses = {host["host"]: host["status"] for host in document["hosts"]}
    assert statuses == {label: "unreachable" if kind == GARBLED else "timeout" for label, kind in labels.items()}
    assert "Traceback" not in done.stderr and "  File " not in done.stderr, done.stderr[-2000:]
    assert "\x1b" not in done.stderr and "not an ssh server" in done.stderr  # the node's words, made safe
    library = [line for line in done.stderr.splitlines() if "paramiko" in line]
    for label, kind in labels.items():
        naming = [line for line in library if line.startswith(f"gpudiag: {label}: paramiko.transport: ")]
        assert len(naming) == (1 if kind == GARBLED else 0), (label, library)
    assert len(library) == 4, library
