"""Pair probes run for real on 127.0.0.1: a net-server and a net-client as separate processes,
as a controller starts them on two nodes (``python -m probes net-...`` from the bundle root)."""

from __future__ import annotations

import json
import os
import queue
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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


class Probe:
    """One ``python -m probes`` process; its stdout lines gathered on a thread."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "probes", *args], cwd=BUNDLE_ROOT, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        env={**os.environ, **(env or {})})
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


@pytest.fixture
def probes() -> Iterator[list[Probe]]:
    started: list[Probe] = []
    yield started
    for probe in started:
        probe.stop()


def _start(probes: list[Probe], *args: str, env: dict[str, str] | None = None) -> Probe:
    probe = Probe(*args, env=env)
    probes.append(probe)
    return probe


def _processes_naming(text: str) -> list[int]:
    """Pids of the processes whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in command and entry.name != str(os.getpid()):
                found.append(int(entry.name))
    return found


def _pair(probes: list[Probe], backend: str, *client_args: str, server_args: tuple[str, ...] = (),
          env: dict[str, str] | None = None, server_env: dict[str, str] | None = None,
          client_env: dict[str, str] | None = None) -> tuple[dict, list[dict], Probe]:
    server = _start(probes, "net-server", "--backend", backend, "--bind", "127.0.0.1", "--deadline", "60",
                    *server_args, env={**(env or {}), **(server_env or {})})
    listening = server.next_json(timeout_s=30)
    client = _start(probes, "net-client", "--backend", backend, "--connect", f"127.0.0.1:{listening['port']}",
                    "--duration", "0.3", "--deadline", "60", *client_args, env={**(env or {}), **(client_env or {})})
    status, records, _ = client.finish(timeout_s=60)
    assert status == 0, client.process.stderr.read() if client.process.stderr else ""
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
    assert _processes_naming(f"--store 127.0.0.1:{listening['port']}") == []


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
