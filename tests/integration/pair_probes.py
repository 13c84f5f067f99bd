"""The pair probes' test harness: a ``python -m probes`` net-server or net-client as its own process
on 127.0.0.1, as a controller starts them on two nodes (from the bundle root), each with the tests'
secret; and a peer played by the test itself, speaking the protocol (probes/net/auth.py). Used by
test_net_pair.py and test_net_pair_messages.py (the ``probes`` fixture is in conftest.py)."""

from __future__ import annotations

import json
import os
import queue
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from sshd_hosts import marked_environment, marked_pids, process_ids_matching

from probes.context import Deadline
from probes.net.auth import Handshake, PairSecret, canonical, new_nonce
from probes.net.common import PROTOCOL, Channel

BUNDLE_ROOT = Path(__file__).resolve().parents[2]
DIRECTIONS = {"client_to_server", "server_to_client"}

# A stand-in for perftest's ib_write_bw: the same command line, a TCP handshake between server and
# client on -p, then a report in ib_write_bw's layout (this machine has neither perftest nor an HCA) whose
# average is $FAKE_IB_WRITE_BW_GBPS (default 391.50) Gb/s.
FAKE_IB_WRITE_BW = '''#!{python}
import os, socket, sys
args = sys.argv[1:]
if "--help" in args:
    print("Usage: ib_write_bw [options] <server>")
    sys.exit(0)
values, host, i = {{}}, None, 0
while i < len(args):
    if args[i] in ("-d", "-i", "-p", "-q", "-s", "-D", "-x"):
        values[args[i]] = args[i + 1]
        i += 2
    elif args[i].startswith("-"):
        i += 1
    else:
        host, i = args[i], i + 1
port = int(values["-p"])
if host is None:  # listening before it says so, as ib_write_bw does: the client may connect at once
    listener = socket.create_server(("", port))
    listener.settimeout(20)
    print("************************************")
    print("* Waiting for client to connect... *")
    print("************************************", flush=True)
    conn, _ = listener.accept()
else:
    conn = socket.create_connection((host, port), timeout=10)
conn.sendall(b"x")
conn.recv(1)
conn.close()
rule = "-" * 87
print(rule)
print("                    RDMA_Write BW Test")
print(" Dual-port       : OFF\\t\\tDevice         : " + values["-d"])
print(" Number of qps   : " + values["-q"] + "\\t\\tTransport type : IB")
print(" Mtu             : 4096[B]")
print(" Link type       : IB")
print(rule)
print(" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]")
gbps = os.environ.get("FAKE_IB_WRITE_BW_GBPS", "391.50")
print(" " + values["-s"] + "      20000            0.00              " + gbps + "  \\t\\t   0.046675")
print(rule)
'''


# Every process a test of this module starts (a probe, a rail worker it starts, a tool) carries this
# marker in its environment, orphans too: found by it, never by a name another test run may share.
MARKER = uuid.uuid4().hex


def own_processes(text: str) -> list[int]:
    """This module's live processes (marked) whose command line contains ``text``."""
    return sorted(process_ids_matching(re.escape(text), marked_pids(MARKER)))


class Probe:
    """One ``python -m probes`` process; its stdout lines gathered on a thread. ``stdin``: a pipe
    the test holds (a controller's lifeline), or None for /dev/null; ``prefix``: what runs the
    interpreter (``ip netns exec NAME``, ``setpriv ...``); ``python``: the interpreter."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, stdin: int | None = None,
                 prefix: Sequence[str] = (), python: str = sys.executable) -> None:
        self.process = subprocess.Popen([*prefix, python, "-m", "probes", *args], cwd=BUNDLE_ROOT, text=True,
                                        stdin=subprocess.DEVNULL if stdin is None else stdin,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        env={**marked_environment(MARKER), **(env or {})})
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def next_json(self, timeout_s: float = 30.0) -> dict:
        line = self.lines.get(timeout=timeout_s)
        value = json.loads(line)
        self.seen.append(value)
        return value

    def finish(self, timeout_s: float) -> tuple[int, list[dict], float]:
        """Wait for the process to end on its own: (exit status, the rest of its JSON lines, seconds waited)."""
        started = time.monotonic()
        status = self.process.wait(timeout=timeout_s)
        waited = time.monotonic() - started
        time.sleep(0.05)
        rest = []
        while not self.lines.empty():
            rest.append(json.loads(self.lines.get()))
        return status, rest, waited

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stderr(self) -> str:
        assert self.process.stderr is not None
        return self.process.stderr.read()


# One secret per test module run is enough: every test starts its own server with it.
TOKEN = secrets.token_hex(32)
SECRET = PairSecret.from_hex(TOKEN)





def start_probe(probes: list[Probe], *args: str, env: dict[str, str] | None = None, token: str | None = TOKEN,
                stdin: int | None = None, prefix: Sequence[str] = (), python: str = sys.executable) -> Probe:
    probe = Probe(*args, *(() if token is None else ("--token", token)), env=env, stdin=stdin, prefix=prefix,
                  python=python)
    probes.append(probe)
    return probe


def run_pair(probes: list[Probe], backend: str, *client_args: str, server_args: tuple[str, ...] = (),
             env: dict[str, str] | None = None, server_env: dict[str, str] | None = None,
             client_env: dict[str, str] | None = None) -> tuple[dict, list[dict], Probe]:
    server = start_probe(probes, "net-server", "--backend", backend, "--bind", "127.0.0.1", "--deadline", "60",
                         *server_args, env={**(env or {}), **(server_env or {})})
    listening = server.next_json(timeout_s=30)
    client = start_probe(probes, "net-client", "--backend", backend, "--connect", f"127.0.0.1:{listening['port']}",
                         "--duration", "0.3", "--deadline", "60", *client_args,
                         env={**(env or {}), **(client_env or {})})
    status, records, _ = client.finish(timeout_s=60)
    assert status == 0, client.stderr()
    assert TOKEN not in json.dumps([listening, *records])  # the secret is never printed
    return listening, records, server


def assert_listening_first(listening: dict, backend: str) -> None:
    assert listening["event"] == "listening"
    assert listening["backend"] == backend
    assert isinstance(listening["port"], int) and 1024 <= listening["port"] < 65536  # ephemeral, never fixed


def assert_both_directions_measured(records: list[dict], backend: str, device: str) -> None:
    assert {record["params"]["direction"] for record in records} == DIRECTIONS, records
    for record in records:  # each assertion says the record: a failure on busy cores must say why
        assert record["status"] == "ok", record
        assert (record["probe"], record["metric"], record["unit"], record["device"]) == (
            "net", "bandwidth", "Gbit/s", device), record
        assert record["value"] > 0 and record["samples"] >= 1, record
        assert record["params"]["backend"] == backend, record
        assert "line_rate_gbps" in record["details"] and record["details"]["peer"].startswith("127.0.0.1:"), record


def assert_server_ended_by_itself(server: Probe) -> None:
    status, rest, waited = server.finish(timeout_s=15)
    assert status == 0
    assert rest[-1]["event"] == "done" and rest[-1]["status"] == "ok", rest
    assert waited < 10



def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])



def connect(port: int) -> Channel:
    return Channel(socket.create_connection(("127.0.0.1", port), timeout=10), Deadline.after(60))


def prove_hello(channel: Channel, params: dict, backend: str = "tcp",
                secret: PairSecret = SECRET) -> tuple[dict, Handshake]:
    """Play a client that knows ``secret``: read the greeting, send a proved hello; the server's
    answer and the session's nonces."""
    greeting = channel.receive()
    nonce = new_nonce()
    channel.send({"protocol": PROTOCOL, "backend": backend, "nonce": nonce, "params": params,
                  "proof": secret.proof("client-hello", backend, greeting["nonce"], nonce, canonical(params))})
    return channel.receive(), Handshake(greeting["nonce"], nonce)


def closed_by_peer(sock: socket.socket, timeout_s: float = 10.0) -> bytes:
    """What the peer still sends until it closes the connection (fails if it never does)."""
    sock.settimeout(timeout_s)
    data = b""
    while piece := sock.recv(4096):
        data += piece
    return data



def stop_probes(started: list[Probe]) -> None:
    """End the probes a test started, and any rail worker or tool a killed probe left."""
    for probe in started:
        probe.stop()
    for pid in own_processes(" -m probes"):
        os.kill(pid, signal.SIGKILL)
