"""Pair probes run for real on 127.0.0.1: a net-server and a net-client as separate processes,
as a controller starts them on two nodes (``python -m probes net-...`` from the bundle root), each
with the test's secret. Strangers, impostors and peers that send malformed messages are played by
this test itself, speaking the protocol (probes/net_auth.py) with or without the secret."""

from __future__ import annotations

import json
import os
import queue
import re
import secrets
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshd_hosts import marked_environment, marked_pids, process_ids_matching

from probes.context import Deadline
from probes.net import PROTOCOL, Channel
from probes.net_auth import Handshake, PairSecret, canonical, new_nonce

BUNDLE_ROOT = Path(__file__).resolve().parents[2]
DIRECTIONS = {"client_to_server", "server_to_client"}

# A stand-in for perftest's ib_write_bw: the same command line, a TCP handshake between server and
# client on -p, then a report in ib_write_bw's layout (this machine has neither perftest nor an HCA).
FAKE_IB_WRITE_BW = '''#!{python}
import socket, sys
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
if host is None:
    print("************************************")
    print("* Waiting for client to connect... *")
    print("************************************", flush=True)
    listener = socket.create_server(("", port))
    listener.settimeout(20)
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
print(" " + values["-s"] + "      20000            0.00              391.50  \\t\\t   0.046675")
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
    the test holds (a controller's lifeline), or None for /dev/null."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, stdin: int | None = None) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "probes", *args], cwd=BUNDLE_ROOT, text=True,
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


@pytest.fixture
def probes() -> Iterator[list[Probe]]:
    started: list[Probe] = []
    yield started
    for probe in started:
        probe.stop()
    for pid in own_processes(" -m probes"):  # a rail worker or tool a killed probe left
        os.kill(pid, signal.SIGKILL)


def _start(probes: list[Probe], *args: str, env: dict[str, str] | None = None, token: str | None = TOKEN,
           stdin: int | None = None) -> Probe:
    probe = Probe(*args, *(() if token is None else ("--token", token)), env=env, stdin=stdin)
    probes.append(probe)
    return probe


def _pair(probes: list[Probe], backend: str, *client_args: str, server_args: tuple[str, ...] = (),
          env: dict[str, str] | None = None, server_env: dict[str, str] | None = None,
          client_env: dict[str, str] | None = None) -> tuple[dict, list[dict], Probe]:
    server = _start(probes, "net-server", "--backend", backend, "--bind", "127.0.0.1", "--deadline", "60",
                    *server_args, env={**(env or {}), **(server_env or {})})
    listening = server.next_json(timeout_s=30)
    client = _start(probes, "net-client", "--backend", backend, "--connect", f"127.0.0.1:{listening['port']}",
                    "--duration", "0.3", "--deadline", "60", *client_args, env={**(env or {}), **(client_env or {})})
    status, records, _ = client.finish(timeout_s=60)
    assert status == 0, client.stderr()
    assert TOKEN not in json.dumps([listening, *records])  # the secret is never printed
    return listening, records, server


def _assert_listening_first(listening: dict, backend: str) -> None:
    assert listening["event"] == "listening"
    assert listening["backend"] == backend
    assert isinstance(listening["port"], int) and 1024 <= listening["port"] < 65536  # ephemeral, never fixed


def _assert_both_directions_measured(records: list[dict], backend: str, device: str) -> None:
    assert {record["params"]["direction"] for record in records} == DIRECTIONS
    for record in records:
        assert (record["probe"], record["metric"], record["unit"], record["device"]) == (
            "net", "bandwidth", "Gbit/s", device)
        assert record["status"] == "ok", record["reason"]
        assert record["value"] > 0 and record["samples"] >= 1
        assert record["params"]["backend"] == backend
        assert "line_rate_gbps" in record["details"] and record["details"]["peer"].startswith("127.0.0.1:")


def _assert_server_ended_by_itself(server: Probe) -> None:
    status, rest, waited = server.finish(timeout_s=15)
    assert status == 0
    assert rest[-1]["event"] == "done" and rest[-1]["status"] == "ok", rest
    assert waited < 10


def test_tcp_pair_measures_both_directions_and_the_server_exits_by_itself(probes: list[Probe]):
    listening, records, server = _pair(probes, "tcp", "--streams", "4")
    _assert_listening_first(listening, "tcp")
    _assert_both_directions_measured(records, "tcp", "host")
    assert {record["params"]["streams"] for record in records} == {4}
    assert all(len(record["details"]["stream_gbps"]) == 4 for record in records)
    _assert_server_ended_by_itself(server)


def test_two_servers_get_different_ephemeral_ports(probes: list[Probe]):
    first = _start(probes, "net-server", "--backend", "tcp", "--deadline", "5").next_json()
    second = _start(probes, "net-server", "--backend", "tcp", "--deadline", "5").next_json()
    assert first["port"] != second["port"]
    assert first["bind"] == "*"  # no --bind: every address


@pytest.mark.skipif(not __import__("torch").distributed.is_available(), reason="torch without torch.distributed")
def test_nccl_backend_on_gloo_measures_both_directions_and_leaves_no_worker(probes: list[Probe]):
    env = {"CUDA_VISIBLE_DEVICES": ""}  # the gloo path, even on a machine with a GPU
    listening, records, server = _pair(probes, "nccl", env=env)
    _assert_listening_first(listening, "nccl")
    assert listening["collective"] == "gloo"
    _assert_both_directions_measured(records, "nccl", "rail:0")
    assert {record["params"]["collective"] for record in records} == {"gloo"}
    assert all(record["details"]["message_bytes"] >= 64 << 20 for record in records)
    _assert_server_ended_by_itself(server)
    assert own_processes("probes.net_nccl_worker") == []


# Two ranks on one machine: a different NCCL_HOSTID each makes NCCL treat them as two hosts, so it
# allows both on one GPU and carries their traffic over its network transport, as between two nodes.
TWO_HOSTS = {"server_env": {"NCCL_HOSTID": "gpudiag-net-server"}, "client_env": {"NCCL_HOSTID": "gpudiag-net-client"}}


@pytest.mark.gpu
def test_nccl_backend_on_a_gpu_over_nccl_sockets(probes: list[Probe]):
    listening, records, server = _pair(probes, "nccl", "--rails", "0", "--allow-socket",
                                       server_args=("--rails", "0", "--allow-socket"), **TWO_HOSTS)
    assert listening["collective"] == "nccl"
    _assert_both_directions_measured(records, "nccl", "rail:0")
    assert {(r["params"]["collective"], r["params"]["nccl_net"]) for r in records} == {("nccl", "any")}
    assert all(record["gpu_uuid"] for record in records)
    _assert_server_ended_by_itself(server)


@pytest.mark.gpu
@pytest.mark.skipif(Path("/sys/class/infiniband").exists(), reason="this machine has RDMA devices")
def test_nccl_without_ib_is_an_error_not_a_fall_back_to_sockets(probes: list[Probe]):
    _, records, server = _pair(probes, "nccl", "--rails", "0", server_args=("--rails", "0"), **TWO_HOSTS)
    assert {record["params"]["direction"] for record in records} == DIRECTIONS
    assert {record["status"] for record in records} == {"error"}
    assert {record["params"]["nccl_net"] for record in records} == {"IB"}
    server.finish(timeout_s=60)


def test_perftest_pair_runs_ib_write_bw_per_rail(probes: list[Probe], tmp_path: Path):
    tool = tmp_path / "bin" / "ib_write_bw"
    tool.parent.mkdir()
    tool.write_text(FAKE_IB_WRITE_BW.format(python=sys.executable))
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    sysfs = tmp_path / "sys"
    for hca in ("mlx5_0", "mlx5_1"):
        port = sysfs / "class" / "infiniband" / hca / "ports" / "1"
        port.mkdir(parents=True)
        (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
        (port / "state").write_text("4: ACTIVE\n")
        (port / "link_layer").write_text("InfiniBand\n")
    common = ("--sysfs-root", str(sysfs), "--ib-write-bw", str(tool))
    env = {"PATH": f"{tool.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    listening, records, server = _pair(probes, "perftest", *common, server_args=common, env=env)
    _assert_listening_first(listening, "perftest")
    assert [rail["hca"] for rail in listening["rails"]] == ["mlx5_0", "mlx5_1"]
    assert len(records) == 4
    for device in ("rail:0", "rail:1"):
        _assert_both_directions_measured([r for r in records if r["device"] == device], "perftest", device)
    assert {(r["params"]["hca"], r["value"], r["details"]["line_rate_gbps"]) for r in records} == {
        ("mlx5_0", 391.5, 400.0), ("mlx5_1", 391.5, 400.0)}
    _assert_server_ended_by_itself(server)


def test_perftest_without_ib_write_bw_is_skipped(probes: list[Probe], tmp_path: Path):
    empty = {"PATH": str(tmp_path)}  # no ib_write_bw anywhere on it
    server = _start(probes, "net-server", "--backend", "perftest", "--bind", "127.0.0.1", "--deadline", "30",
                    env=empty)
    listening = server.next_json()
    assert listening["unavailable"].startswith("ib_write_bw is not on PATH")
    client = _start(probes, "net-client", "--backend", "perftest", "--connect", f"127.0.0.1:{listening['port']}",
                    "--deadline", "30", env=empty)
    status, records, _ = client.finish(timeout_s=30)
    assert status == 0
    assert {record["params"]["direction"] for record in records} == DIRECTIONS
    assert {(record["status"], record["reason"]) for record in records} == {
        ("skipped", "ib_write_bw is not on PATH (install perftest)")}
    status, rest, _ = server.finish(timeout_s=15)
    assert status == 0 and (rest[-1]["event"], rest[-1]["status"]) == ("done", "skipped")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("backend", ["tcp", "nccl", "perftest"])
def test_a_client_pointed_at_a_closed_port_reports_an_error_quickly(probes: list[Probe], backend: str):
    port = _closed_port()
    client = _start(probes, "net-client", "--backend", backend, "--connect", f"127.0.0.1:{port}",
                    "--duration", "0.3", "--deadline", "60")
    status, records, waited = client.finish(timeout_s=30)
    assert status == 0
    assert waited < 10  # the interpreter (and torch, for nccl) starting, not a connect timeout
    assert records and {record["params"]["direction"] for record in records} == DIRECTIONS
    for record in records:
        assert record["status"] == "error" and record["value"] is None
        assert record["reason"] == f"connection refused by 127.0.0.1:{port} (nothing listening there)"


@pytest.mark.parametrize("backend", ["tcp", "nccl", "perftest"])
def test_a_server_whose_client_never_comes_exits_at_its_deadline(probes: list[Probe], backend: str):
    server = _start(probes, "net-server", "--backend", backend, "--bind", "127.0.0.1", "--deadline", "1.5",
                    env={"CUDA_VISIBLE_DEVICES": ""})
    listening = server.next_json()
    assert listening["event"] == "listening"
    status, rest, _ = server.finish(timeout_s=20)
    assert status == 124  # as `timeout` would
    assert rest[-1]["event"] == "done" and rest[-1]["status"] == "error"
    assert "no client came" in rest[-1]["reason"]
    with socket.socket() as sock:  # the port is released
        assert sock.connect_ex(("127.0.0.1", listening["port"])) != 0


def test_a_stray_connection_does_not_end_the_server(probes: list[Probe]):
    server = _start(probes, "net-server", "--backend", "tcp", "--bind", "127.0.0.1", "--deadline", "30")
    listening = server.next_json()
    with socket.create_connection(("127.0.0.1", listening["port"])) as stray:
        stray.sendall(b"GET / HTTP/1.0\r\n\r\n")
    client = _start(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{listening['port']}",
                    "--duration", "0.3", "--streams", "2")
    status, records, _ = client.finish(timeout_s=30)
    assert status == 0 and {record["status"] for record in records} == {"ok"}
    _assert_server_ended_by_itself(server)


# --- the secret: strangers, impostors, wrong secrets ---------------------------------------------

def _connect(port: int) -> Channel:
    return Channel(socket.create_connection(("127.0.0.1", port), timeout=10), Deadline.after(60))


def _prove_hello(channel: Channel, params: dict, backend: str = "tcp",
                 secret: PairSecret = SECRET) -> tuple[dict, Handshake]:
    """Play a client that knows ``secret``: read the greeting, send a proved hello; the server's
    answer and the session's nonces."""
    greeting = channel.receive()
    nonce = new_nonce()
    channel.send({"protocol": PROTOCOL, "backend": backend, "nonce": nonce, "params": params,
                  "proof": secret.proof("client-hello", backend, greeting["nonce"], nonce, canonical(params))})
    return channel.receive(), Handshake(greeting["nonce"], nonce)


def _closed_by_peer(sock: socket.socket, timeout_s: float = 10.0) -> bytes:
    """What the peer still sends until it closes the connection (fails if it never does)."""
    sock.settimeout(timeout_s)
    data = b""
    while piece := sock.recv(4096):
        data += piece
    return data


def test_a_stranger_connecting_first_does_not_take_the_session_and_learns_nothing(probes: list[Probe]):
    server = _start(probes, "net-server", "--backend", "tcp", "--bind", "127.0.0.1", "--deadline", "60")
    port = server.next_json()["port"]
    silent = socket.create_connection(("127.0.0.1", port))  # holds a handshake open all along
    stranger = _connect(port)
    greeting = stranger.receive()
    assert set(greeting) == {"protocol", "backend", "nonce", "proof"}  # no host name, no interface
    params = {"streams": 2, "duration_s": 0.3}
    stranger.send({"protocol": PROTOCOL, "backend": "tcp", "nonce": new_nonce(), "params": params,
                   "proof": "0" * 64})  # the shape of a hello, without the secret
    assert _closed_by_peer(stranger.sock) == b""  # dropped: not even an error message
    client = _start(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{port}", "--duration", "0.3",
                    "--streams", "2")
    status, records, _ = client.finish(timeout_s=30)
    assert status == 0 and {record["status"] for record in records} == {"ok"}
    _assert_server_ended_by_itself(server)
    assert "dropped a connection from 127.0.0.1: the hello does not prove the pair secret" in server.stderr()
    silent.close()


def test_a_client_with_another_secret_measures_nothing_and_the_right_one_still_can(probes: list[Probe]):
    server = _start(probes, "net-server", "--backend", "tcp", "--bind", "127.0.0.1", "--deadline", "60")
    port = server.next_json()["port"]
    wrong = _start(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{port}", "--duration", "0.3",
                   token=secrets.token_hex(32))
    status, records, _ = wrong.finish(timeout_s=30)
    assert status == 0 and {record["params"]["direction"] for record in records} == DIRECTIONS
    assert all(record["status"] == "error" and record["value"] is None for record in records)
    assert "does not prove the pair secret: not the server this test started" in records[0]["reason"]
    right = _start(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{port}", "--duration", "0.3")
    status, records, _ = right.finish(timeout_s=30)
    assert {record["status"] for record in records} == {"ok"}


@pytest.mark.parametrize("backend", ["tcp", "perftest"])
def test_a_client_says_nothing_to_an_impostor_at_the_servers_address(probes: list[Probe], backend: str):
    impostor = socket.create_server(("127.0.0.1", 0))
    heard: list[bytes] = []

    def pose() -> None:
        conn, _ = impostor.accept()
        conn.sendall(json.dumps({"protocol": PROTOCOL, "backend": backend, "nonce": new_nonce(),
                                 "proof": "f" * 64}).encode() + b"\n")
        heard.append(_closed_by_peer(conn, timeout_s=20))
        conn.close()

    poser = threading.Thread(target=pose, daemon=True)
    poser.start()
    client = _start(probes, "net-client", "--backend", backend, "--connect",
                    f"127.0.0.1:{impostor.getsockname()[1]}", "--duration", "0.3", env={"PATH": "/nonexistent"}
                    if backend == "perftest" else None)
    status, records, _ = client.finish(timeout_s=30)
    poser.join(25)
    impostor.close()
    assert status == 0 and records and all(record["value"] is None for record in records)
    assert all("does not prove the pair secret" in record["reason"] for record in records)
    assert heard == [b""]  # not even a hello


def test_the_secret_can_come_on_stdin_and_is_never_in_the_command_line(probes: list[Probe]):
    server = _start(probes, "net-server", "--backend", "tcp", "--bind", "127.0.0.1", "--deadline", "60",
                    "--stdin-lifeline", token="-", stdin=subprocess.PIPE)
    assert server.process.stdin is not None
    server.process.stdin.write(TOKEN + "\n")
    server.process.stdin.flush()  # and kept open: the rest of stdin is the lifeline
    port = server.next_json()["port"]
    assert TOKEN not in Path(f"/proc/{server.process.pid}/cmdline").read_text()
    client = _start(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{port}", "--duration", "0.3")
    status, records, _ = client.finish(timeout_s=30)
    assert {record["status"] for record in records} == {"ok"}
    _assert_server_ended_by_itself(server)


def test_without_a_secret_neither_end_starts(probes: list[Probe]):
    for command in (("net-server", "--backend", "tcp"), ("net-client", "--backend", "tcp", "--connect", "127.0.0.1:9")):
        probe = _start(probes, *command, token=None)
        status, rest, _ = probe.finish(timeout_s=30)
        assert status == 2 and rest == [] and "--token is required" in probe.stderr()
    short = _start(probes, "net-server", "--backend", "tcp", token="abc")
    assert short.finish(timeout_s=30)[0] == 2


@pytest.mark.skipif(not __import__("torch").distributed.is_available(), reason="torch without torch.distributed")
def test_nccl_a_strangers_hello_in_the_rendezvous_is_dropped_and_the_client_still_measures(probes: list[Probe]):
    from datetime import timedelta

    import torch

    env = {"CUDA_VISIBLE_DEVICES": ""}
    server = _start(probes, "net-server", "--backend", "nccl", "--bind", "127.0.0.1", "--deadline", "90", env=env)
    port = server.next_json(timeout_s=60)["port"]
    store = torch.distributed.TCPStore("127.0.0.1", port, None, False, timeout=timedelta(seconds=10))
    store.set("client/hello", json.dumps({"protocol": PROTOCOL, "address": "127.0.0.1", "rails": [0],
                                          "directions": ["client_to_server"], "duration_s": 0.3,
                                          "message_bytes": 64 << 20, "abort": None, "nonce": new_nonce(),
                                          "proof": "0" * 64}))
    deadline = time.monotonic() + 20
    while store.check(["client/hello"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not store.check(["client/hello"])  # dropped, and the server waits on
    client = _start(probes, "net-client", "--backend", "nccl", "--connect", f"127.0.0.1:{port}", "--duration", "0.3",
                    env=env)
    status, records, _ = client.finish(timeout_s=90)
    assert status == 0 and {record["status"] for record in records} == {"ok"}, records
    _assert_server_ended_by_itself(server)
    assert "dropped a client hello: no proof of the pair secret" in server.stderr()


# --- every message checked: a proved peer that sends wrong types -----------------------------------

HELLO = {"streams": 1, "duration_s": 0.3}


@pytest.mark.parametrize(("params", "after", "said"), [
    ({"streams": "abc", "duration_s": 0.3}, None, "'streams' must be an integer from 1 to 256"),
    ({"streams": 10 ** 30, "duration_s": 0.3}, None, "'streams' must be an integer from 1 to 256"),
    ({"streams": 1, "duration_s": [1]}, None, "'duration_s' must be a number"),
    (HELLO, b'{"phase": 7}\n', "'phase' must be one of client_to_server, server_to_client"),
    (HELLO, b'{"phase": "client_to_server", "x": NaN}\n', "not a JSON message"),
    (HELLO, b'["phase"]\n', "not a JSON object"),
    (HELLO, b'{"error": {"nested": true}}\n', "'error' must be a string"),
])
def test_a_proved_client_sending_wrong_types_ends_the_tcp_test_with_an_error(probes: list[Probe], params: dict,
                                                                            after: bytes | None, said: str):
    server = _start(probes, "net-server", "--backend", "tcp", "--bind", "127.0.0.1", "--deadline", "60")
    port = server.next_json()["port"]
    channel = _connect(port)
    answer, handshake = _prove_hello(channel, params)
    assert answer["accepted"] is True
    if after is not None:
        channel.receive()  # the session reply
        stream = socket.create_connection(("127.0.0.1", port))
        stream.sendall(handshake.stream_greeting(SECRET, 0))
        channel.sock.sendall(after)
    status, rest, waited = server.finish(timeout_s=30)
    channel.close()
    assert status == 0 and waited < 20
    assert (rest[-1]["event"], rest[-1]["status"]) == ("done", "error") and said in rest[-1]["reason"]
    assert "Traceback" not in server.stderr()


@pytest.mark.parametrize("hello", [b'{"protocol": "gpudiag-net/2", "params": {"streams": Infinity}}\n',
                                   b'[1, 2, 3]\n', b'{"protocol": "gpudiag-net/2", "backend": "tcp", "nonce": 5}\n',
                                   b"\xff\xfe not json at all\n"])
def test_a_malformed_hello_is_dropped_and_the_server_waits_on(probes: list[Probe], hello: bytes):
    server = _start(probes, "net-server", "--backend", "tcp", "--bind", "127.0.0.1", "--deadline", "60")
    port = server.next_json()["port"]
    stranger = _connect(port)
    stranger.receive()
    stranger.sock.sendall(hello)
    assert _closed_by_peer(stranger.sock) == b""
    client = _start(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{port}", "--duration", "0.3")
    assert {record["status"] for record in client.finish(timeout_s=30)[1]} == {"ok"}
    assert "Traceback" not in server.stderr()


def test_a_proved_perftest_client_sending_wrong_types_ends_the_test_with_an_error(probes: list[Probe]):
    server = _start(probes, "net-server", "--backend", "perftest", "--bind", "127.0.0.1", "--deadline", "60",
                    env={"PATH": "/nonexistent"})
    channel = _connect(server.next_json()["port"])
    reply, _ = _prove_hello(channel, {"streams": 1, "duration_s": 1.0, "message_bytes": 1 << 20}, backend="perftest")
    assert reply["accepted"] is True
    channel.receive()  # the session reply
    channel.send({"phase": "client_to_server", "rails": "all of them"})
    status, rest, _ = server.finish(timeout_s=30)
    channel.close()
    assert status == 0 and "'rails' must be a list of at most 64 rail numbers" in rest[-1]["reason"]
    assert "Traceback" not in server.stderr()


class FakeTcpServer:
    """A tcp pair server played by the test: it knows the secret (the handshake passes) and then
    sends ``replies`` (raw lines: the session reply; ``ready`` once the client's phase message came;
    the phase's result), draining the client's data connections meanwhile."""

    def __init__(self, replies: list[bytes]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.replies = replies
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        channel = Channel(conn, Deadline.after(60))
        nonce = new_nonce()
        channel.send({"protocol": PROTOCOL, "backend": "tcp", "nonce": nonce,
                      "proof": SECRET.proof("server-greeting", "tcp", nonce)})
        hello = channel.receive()
        channel.send({"accepted": True, "proof": SECRET.proof("server-session", "tcp", nonce, hello["nonce"])})
        threading.Thread(target=self._drain, daemon=True).start()
        for index, reply in enumerate(self.replies):
            if index == 1:  # "ready" answers the phase message
                try:
                    channel.receive()
                except (OSError, ValueError):
                    return
            conn.sendall(reply)
        _closed_by_peer(conn, 60)

    def _drain(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=conn: _closed_by_peer(c, 60), daemon=True).start()


SESSION = b'{"host": "fake", "interface": null, "line_rate_gbps": null}\n'


@pytest.mark.parametrize(("replies", "said"), [
    ([b'{"host": 5, "interface": null, "line_rate_gbps": null}\n'], "'host' must be a string"),
    ([b'{"host": "fake", "interface": null, "line_rate_gbps": Infinity}\n'], "not a JSON message"),
    ([b'{"host": "fake", "interface": null, "line_rate_gbps": 1e400}\n'], "not a JSON message"),
    ([SESSION, b'{"ready": "yes"}\n'], "did not say it is ready"),
    ([SESSION, b'{"ready": true}\n', b'{"received": {"bytes": "abc", "elapsed_s": 1, "interval_gbps": [], '
                                     b'"stream_gbps": []}}\n'], "'bytes' must be an integer"),
    ([SESSION, b'{"ready": true}\n', b'{"received": {"bytes": 100, "elapsed_s": 0.3, "interval_gbps": [1e300], '
                                     b'"stream_gbps": [1]}}\n'], "'interval_gbps' must be a list"),
    ([SESSION, b'{"ready": true}\n', b'{"received": {"bytes": 100, "elapsed_s": 0, "interval_gbps": [], '
                                     b'"stream_gbps": []}}\n'], "'elapsed_s' must be a number"),
    ([SESSION, b'{"ready": true}\n', b'{"received": [1, 2]}\n'], "holds neither 'received' nor 'failed'"),
])
def test_a_proved_server_sending_wrong_types_gives_error_records_never_a_figure(probes: list[Probe],
                                                                               replies: list[bytes], said: str):
    fake = FakeTcpServer(replies)
    client = _start(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{fake.port}", "--duration",
                    "0.3", "--streams", "1", "--direction", "client_to_server")
    status, records, waited = client.finish(timeout_s=30)
    fake.listener.close()
    assert status == 0 and waited < 20
    (record,) = records
    assert (record["status"], record["value"]) == ("error", None) and said in record["reason"], record
    assert "Traceback" not in client.stderr()


# --- short-lived: the accept window and the lifeline -----------------------------------------------

@pytest.mark.parametrize("backend", ["tcp", "nccl", "perftest"])
def test_a_server_never_reached_ends_at_its_accept_window_not_its_deadline(probes: list[Probe], backend: str):
    server = _start(probes, "net-server", "--backend", backend, "--bind", "127.0.0.1", "--deadline", "120",
                    "--accept-window", "2", env={"CUDA_VISIBLE_DEVICES": ""})
    assert server.next_json(timeout_s=60)["event"] == "listening"
    status, rest, waited = server.finish(timeout_s=30)
    assert status == 124 and waited < 20  # 2 s, not 120
    assert rest[-1]["reason"] == "no client came within the server's accept window of 2 s"


@pytest.mark.parametrize("backend", ["tcp", "nccl", "perftest"])
def test_a_server_whose_controller_is_gone_ends_at_once(probes: list[Probe], backend: str):
    server = _start(probes, "net-server", "--backend", backend, "--bind", "127.0.0.1", "--deadline", "120",
                    "--stdin-lifeline", env={"CUDA_VISIBLE_DEVICES": ""}, stdin=subprocess.PIPE)
    assert server.next_json(timeout_s=60)["event"] == "listening"
    time.sleep(0.5)
    assert server.process.poll() is None and server.process.stdin is not None
    server.process.stdin.close()  # what sshd does when the controller's connection dies
    status, rest, waited = server.finish(timeout_s=30)
    assert status == 129 and waited < 10
    assert rest[-1]["reason"] == "the controller is gone (stdin closed)"


def test_a_pair_test_in_flight_ends_on_both_sides_when_the_controller_is_gone(probes: list[Probe]):
    server = _start(probes, "net-server", "--backend", "tcp", "--bind", "127.0.0.1", "--deadline", "120",
                    "--stdin-lifeline", stdin=subprocess.PIPE)
    port = server.next_json()["port"]
    client = _start(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{port}", "--duration", "30",
                    "--deadline", "120", "--stdin-lifeline", stdin=subprocess.PIPE)
    time.sleep(2.0)  # the client is sending by now
    for probe in (server, client):
        assert probe.process.poll() is None and probe.process.stdin is not None
        probe.process.stdin.close()
    for probe in (server, client):
        status, rest, waited = probe.finish(timeout_s=30)
        assert status == 129 and waited < 10
    assert {(r["status"], r["reason"]) for r in rest} == {("error", "the controller is gone (stdin closed)")}


def test_dev_null_is_no_lifeline(probes: list[Probe]):
    server = _start(probes, "net-server", "--backend", "tcp", "--bind", "127.0.0.1", "--deadline", "30",
                    "--stdin-lifeline")  # stdin /dev/null: its end of file says nothing of a controller
    port = server.next_json()["port"]
    time.sleep(1.0)
    assert server.process.poll() is None
    client = _start(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{port}", "--duration", "0.3")
    assert {record["status"] for record in client.finish(timeout_s=30)[1]} == {"ok"}


def test_a_server_told_to_bind_an_address_not_its_own_refuses_to_listen(probes: list[Probe]):
    server = _start(probes, "net-server", "--backend", "tcp", "--bind", "192.0.2.1", "--deadline", "30")
    done = server.next_json()
    assert (done["event"], done["status"], done["cause"]) == ("done", "error", "bind")
    assert done["reason"].startswith("cannot listen on 192.0.2.1: ")
    assert server.finish(timeout_s=15)[0] == 0


@pytest.mark.parametrize("backend", ["nccl", "perftest"])
def test_every_backends_server_refuses_an_address_not_its_own(probes: list[Probe], backend: str):
    server = _start(probes, "net-server", "--backend", backend, "--bind", "192.0.2.1", "--deadline", "30",
                    env={"CUDA_VISIBLE_DEVICES": ""})
    done = server.next_json(timeout_s=60)
    assert (done["event"], done["status"], done["cause"]) == ("done", "error", "bind")
    assert done["reason"].startswith("cannot listen on 192.0.2.1: ")
