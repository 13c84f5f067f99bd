"""Pair probes run for real on 127.0.0.1: a net-server and a net-client as separate processes,
as a controller starts them on two nodes (``python -m probes net-...`` from the bundle root), each
with the test's secret. Strangers, impostors and peers that send malformed messages are played by
this test itself, speaking the protocol (probes/net/auth.py) with or without the secret."""

from __future__ import annotations

import json
import os
import secrets
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pair_probes import (
    DIRECTIONS,
    FAKE_IB_WRITE_BW,
    TOKEN,
    Probe,
    assert_both_directions_measured,
    assert_listening_first,
    assert_server_ended_by_itself,
    closed_by_peer,
    closed_port,
    connect,
    own_processes,
    run_pair,
    start_probe,
)

from probes.net.auth import new_nonce
from probes.net.common import PROTOCOL


def test_tcp_pair_measures_both_directions_and_the_server_exits_by_itself(probes: list[Probe]):
    listening, records, server = run_pair(probes, "tcp", "--streams", "4")
    assert_listening_first(listening, "tcp")
    assert_both_directions_measured(records, "tcp", "host")
    assert {record["params"]["streams"] for record in records} == {4}
    assert all(len(record["details"]["stream_gbps"]) == 4 for record in records)
    assert_server_ended_by_itself(server)


def test_two_servers_get_different_ephemeral_ports(probes: list[Probe]):
    first = start_probe(probes, "net-server", "--backend", "tcp", "--deadline", "5").next_json()
    second = start_probe(probes, "net-server", "--backend", "tcp", "--deadline", "5").next_json()
    assert first["port"] != second["port"]
    assert first["bind"] == "*"  # no --bind: every address


@pytest.mark.skipif(not __import__("torch").distributed.is_available(), reason="torch without torch.distributed")
def test_nccl_backend_on_gloo_measures_both_directions_and_leaves_no_worker(probes: list[Probe]):
    env = {"CUDA_VISIBLE_DEVICES": ""}  # the gloo path, even on a machine with a GPU
    listening, records, server = run_pair(probes, "nccl", env=env)
    assert_listening_first(listening, "nccl")
    assert listening["collective"] == "gloo"
    assert_both_directions_measured(records, "nccl", "rail:0")
    assert {record["params"]["collective"] for record in records} == {"gloo"}
    assert all(record["details"]["message_bytes"] >= 64 << 20 for record in records)
    assert_server_ended_by_itself(server)
    assert own_processes("probes.net.nccl_worker") == []


# Two ranks on one machine: a different NCCL_HOSTID each makes NCCL treat them as two hosts, so it
# allows both on one GPU and carries their traffic over its network transport, as between two nodes.
TWO_HOSTS = {"server_env": {"NCCL_HOSTID": "gpudiag-net-server"}, "client_env": {"NCCL_HOSTID": "gpudiag-net-client"}}


@pytest.mark.gpu
def test_nccl_backend_on_a_gpu_over_nccl_sockets(probes: list[Probe]):
    listening, records, server = run_pair(probes, "nccl", "--rails", "0", "--allow-socket",
                                          server_args=("--rails", "0", "--allow-socket"), **TWO_HOSTS)
    assert listening["collective"] == "nccl"
    assert_both_directions_measured(records, "nccl", "rail:0")
    assert {(r["params"]["collective"], r["params"]["nccl_net"]) for r in records} == {("nccl", "any")}
    assert all(record["gpu_uuid"] for record in records)
    assert_server_ended_by_itself(server)


@pytest.mark.gpu
@pytest.mark.skipif(Path("/sys/class/infiniband").exists(), reason="this machine has RDMA devices")
def test_nccl_without_ib_is_an_error_not_a_fall_back_to_sockets(probes: list[Probe]):
    _, records, server = run_pair(probes, "nccl", "--rails", "0", server_args=("--rails", "0"), **TWO_HOSTS)
    assert {record["params"]["direction"] for record in records} == DIRECTIONS
    assert {record["status"] for record in records} == {"error"}
    assert {record["params"]["nccl_net"] for record in records} == {"IB"}
    server.finish(timeout_s=60)


def _perftest_node(tmp_path: Path) -> tuple[tuple[str, ...], dict[str, str]]:
    """The stand-in ib_write_bw and a sysfs of two 400G HCAs: (the options of both ends, their environment)."""
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
    env = {"PATH": f"{tool.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return ("--sysfs-root", str(sysfs), "--ib-write-bw", str(tool)), env


def test_perftest_pair_runs_ib_write_bw_per_rail(probes: list[Probe], tmp_path: Path):
    common, env = _perftest_node(tmp_path)
    listening, records, server = run_pair(probes, "perftest", "--streams", "1", *common, server_args=common, env=env)
    assert_listening_first(listening, "perftest")
    assert [rail["hca"] for rail in listening["rails"]] == ["mlx5_0", "mlx5_1"]
    assert len(records) == 4
    for device in ("rail:0", "rail:1"):
        assert_both_directions_measured([r for r in records if r["device"] == device], "perftest", device)
    assert {(r["params"]["hca"], r["value"], r["details"]["line_rate_gbps"]) for r in records} == {
        ("mlx5_0", 391.5, 400.0), ("mlx5_1", 391.5, 400.0)}
    assert all(r["details"]["stream_gbps"] == [391.5] and r["details"]["qps"] == 1 for r in records)
    assert_server_ended_by_itself(server)


def test_perftest_runs_one_ib_write_bw_per_qp_and_reports_each(probes: list[Probe], tmp_path: Path):
    common, env = _perftest_node(tmp_path)
    env["FAKE_IB_WRITE_BW_GBPS"] = "120.25"
    _, records, server = run_pair(probes, "perftest", "--streams", "3", *common, server_args=common, env=env)
    assert len(records) == 4 and {r["status"] for r in records} == {"ok"}, records
    for record in records:  # three runs of one QP each per rail and direction: the figure is their sum
        assert record["params"]["streams"] == 3
        assert record["details"]["stream_gbps"] == [120.25] * 3, record
        assert record["value"] == 360.75 and record["details"]["qps"] == 3, record
    assert_server_ended_by_itself(server)
    assert own_processes("ib_write_bw") == []


def test_perftest_without_ib_write_bw_is_skipped(probes: list[Probe], tmp_path: Path):
    empty = {"PATH": str(tmp_path)}  # no ib_write_bw anywhere on it
    server = start_probe(probes, "net-server", "--backend", "perftest", "--bind", "127.0.0.1", "--deadline", "30",
                         env=empty)
    listening = server.next_json()
    assert listening["unavailable"].startswith("ib_write_bw is not on PATH")
    client = start_probe(probes, "net-client", "--backend", "perftest", "--connect", f"127.0.0.1:{listening['port']}",
                         "--deadline", "30", env=empty)
    status, records, _ = client.finish(timeout_s=30)
    assert status == 0
    assert {record["params"]["direction"] for record in records} == DIRECTIONS
    assert {(record["status"], record["reason"]) for record in records} == {
        ("skipped", "ib_write_bw is not on PATH (install perftest)")}
    status, rest, _ = server.finish(timeout_s=15)
    assert status == 0 and (rest[-1]["event"], rest[-1]["status"]) == ("done", "skipped")



@pytest.mark.parametrize("backend", ["tcp", "nccl", "perftest"])
def test_a_client_pointed_at_a_closed_port_reports_an_error_quickly(probes: list[Probe], backend: str):
    port = closed_port()
    client = start_probe(probes, "net-client", "--backend", backend, "--connect", f"127.0.0.1:{port}",
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
    server = start_probe(probes, "net-server", "--backend", backend, "--bind", "127.0.0.1", "--deadline", "1.5",
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
    server = start_probe(probes, "net-server", "--backend", "tcp", "--bind", "127.0.0.1", "--deadline", "30")
    listening = server.next_json()
    with socket.create_connection(("127.0.0.1", listening["port"])) as stray:
        stray.sendall(b"GET / HTTP/1.0\r\n\r\n")
    client = start_probe(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{listening['port']}",
                         "--duration", "0.3", "--streams", "2")
    status, records, _ = client.finish(timeout_s=30)
    assert status == 0 and {record["status"] for record in records} == {"ok"}
    assert_server_ended_by_itself(server)


# --- the secret: strangers, impostors, wrong secrets ---------------------------------------------


def test_a_stranger_connecting_first_does_not_take_the_session_and_learns_nothing(probes: list[Probe]):
    server = start_probe(probes, "net-server", "--backend", "tcp", "--bind", "127.0.0.1", "--deadline", "60")
    port = server.next_json()["port"]
    silent = socket.create_connection(("127.0.0.1", port))  # holds a handshake open all along
    stranger = connect(port)
    greeting = stranger.receive()
    assert set(greeting) == {"protocol", "backend", "nonce", "proof"}  # no host name, no interface
    params = {"streams": 2, "duration_s": 0.3}
    stranger.send({"protocol": PROTOCOL, "backend": "tcp", "nonce": new_nonce(), "params": params,
                   "proof": "0" * 64})  # the shape of a hello, without the secret
    assert closed_by_peer(stranger.sock) == b""  # dropped: not even an error message
    client = start_probe(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{port}",
                         "--duration", "0.3", "--streams", "2")
    status, records, _ = client.finish(timeout_s=30)
    assert status == 0 and {record["status"] for record in records} == {"ok"}
    assert_server_ended_by_itself(server)
    assert "dropped a connection from 127.0.0.1: the hello does not prove the pair secret" in server.stderr()
    silent.close()


def test_a_client_with_another_secret_measures_nothing_and_the_right_one_still_can(probes: list[Probe]):
    server = start_probe(probes, "net-server", "--backend", "tcp", "--bind", "127.0.0.1", "--deadline", "60")
    port = server.next_json()["port"]
    wrong = start_probe(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{port}", "--duration", "0.3",
                        token=secrets.token_hex(32))
    status, records, _ = wrong.finish(timeout_s=30)
    assert status == 0 and {record["params"]["direction"] for record in records} == DIRECTIONS
    assert all(record["status"] == "error" and record["value"] is None for record in records)
    assert "does not prove the pair secret: not the server this test started" in records[0]["reason"]
    right = start_probe(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{port}", "--duration", "0.3")
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
        heard.append(closed_by_peer(conn, timeout_s=20))
        conn.close()

    poser = threading.Thread(target=pose, daemon=True)
    poser.start()
    client = start_probe(probes, "net-client", "--backend", backend, "--connect",
                         f"127.0.0.1:{impostor.getsockname()[1]}", "--duration", "0.3", env={"PATH": "/nonexistent"}
                         if backend == "perftest" else None)
    status, records, _ = client.finish(timeout_s=30)
    poser.join(25)
    impostor.close()
    assert status == 0 and records and all(record["value"] is None for record in records)
    assert all("does not prove the pair secret" in record["reason"] for record in records)
    assert heard == [b""]  # not even a hello


def test_the_secret_can_come_on_stdin_and_is_never_in_the_command_line(probes: list[Probe]):
    server = start_probe(probes, "net-server", "--backend", "tcp", "--bind", "127.0.0.1", "--deadline", "60",
                         "--stdin-lifeline", token="-", stdin=subprocess.PIPE)
    assert server.process.stdin is not None
    server.process.stdin.write(TOKEN + "\n")
    server.process.stdin.flush()  # and kept open: the rest of stdin is the lifeline
    port = server.next_json()["port"]
    assert TOKEN not in Path(f"/proc/{server.process.pid}/cmdline").read_text()
    client = start_probe(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{port}",
                         "--duration", "0.3")
    status, records, _ = client.finish(timeout_s=30)
    assert {record["status"] for record in records} == {"ok"}
    assert_server_ended_by_itself(server)


def test_without_a_secret_neither_end_starts(probes: list[Probe]):
    for command in (("net-server", "--backend", "tcp"), ("net-client", "--backend", "tcp", "--connect", "127.0.0.1:9")):
        probe = start_probe(probes, *command, token=None)
        status, rest, _ = probe.finish(timeout_s=30)
        assert status == 2 and rest == [] and "--token is required" in probe.stderr()
    short = start_probe(probes, "net-server", "--backend", "tcp", token="abc")
    assert short.finish(timeout_s=30)[0] == 2


@pytest.mark.skipif(not __import__("torch").distributed.is_available(), reason="torch without torch.distributed")
def test_nccl_a_strangers_hello_in_the_rendezvous_is_dropped_and_the_client_still_measures(probes: list[Probe]):
    from datetime import timedelta

    import torch

    env = {"CUDA_VISIBLE_DEVICES": ""}
    server = start_probe(probes, "net-server", "--backend", "nccl", "--bind", "127.0.0.1", "--deadline", "90", env=env)
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
    client = start_probe(probes, "net-client", "--backend", "nccl", "--connect", f"127.0.0.1:{port}",
                         "--duration", "0.3", env=env)
    status, records, _ = client.finish(timeout_s=90)
    assert status == 0 and {record["status"] for record in records} == {"ok"}, records
    assert_server_ended_by_itself(server)
    assert "dropped a client hello: no proof of the pair secret" in server.stderr()
