"""Pair probes that get malformed messages from a peer that proved itself, and how long a pair
process lives: its accept window and the lifeline to its controller (the harness: pair_probes.py)."""

from __future__ import annotations

import socket
import subprocess
import threading
import time

import pytest
from pair_probes import (
    SECRET,
    Probe,
    closed_by_peer,
    connect,
    prove_hello,
    start_probe,
)

from probes.context import Deadline
from probes.net.auth import new_nonce
from probes.net.common import PROTOCOL, Channel

# --- every message checked: a proved peer that sends wrong types -----------------------------------

HELLO = {"streams": 1, "duration_s": 0.3}


@pytest.mark.parametrize(("params", "after", "said"), [
    ({"streams": "abc", "duration_s": 0.3}, None, "'streams' must be an integer from 1 to 256"),
    ({"streams": 10 ** 30, "duration_s": 0.3}, None, "'streams' must be an integer from 1 to 256"),
    ({"streams": 1, "duration_s": [1]}, None, "'duration_s' must be a number"),
    ({"streams": 1, "duration_s": 0.3, "trace_hops": 17}, None, "'trace_hops' must be an integer from 0 to 16"),
    (HELLO, b'{"phase": 7}\n', "'phase' must be one of client_to_server, server_to_client"),
    (HELLO, b'{"phase": "client_to_server", "x": NaN}\n', "not a JSON message"),
    (HELLO, b'["phase"]\n', "not a JSON object"),
    (HELLO, b'{"error": {"nested": true}}\n', "'error' must be a string"),
])
def test_a_proved_client_sending_wrong_types_ends_the_tcp_test_with_an_error(probes: list[Probe], params: dict,
                                                                            after: bytes | None, said: str):
    server = start_probe(probes, "net-server", "--backend", "tcp", "--bind", "127.0.0.1", "--deadline", "60")
    port = server.next_json()["port"]
    channel = connect(port)
    answer, handshake = prove_hello(channel, params)
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
    server = start_probe(probes, "net-server", "--backend", "tcp", "--bind", "127.0.0.1", "--deadline", "60")
    port = server.next_json()["port"]
    stranger = connect(port)
    stranger.receive()
    stranger.sock.sendall(hello)
    assert closed_by_peer(stranger.sock) == b""
    client = start_probe(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{port}",
                         "--duration", "0.3")
    assert {record["status"] for record in client.finish(timeout_s=30)[1]} == {"ok"}
    assert "Traceback" not in server.stderr()


@pytest.mark.parametrize(("phase", "said"), [
    ({"phase": "client_to_server", "rails": "all of them"}, "'rails' must be a list of at most 64 rail numbers"),
    ({"phase": "server_to_client", "ports": {"0": 40000}}, "'ports' of rail 0 must be a list of 2 distinct TCP ports"),
    ({"phase": "server_to_client", "ports": {"0": [40000]}}, "'ports' of rail 0 must be a list of 2 distinct"),
    ({"phase": "server_to_client", "ports": {"0": [40000, 40000]}}, "'ports' of rail 0 must be a list of 2"),
    ({"phase": "server_to_client", "ports": {"0": [40000, 70000]}}, "'ports' of rail 0 must be a list of 2"),
    ({"phase": "server_to_client", "ports": {"x": [40000, 40001]}}, "'ports' names rail 'x'"),
])
def test_a_proved_perftest_client_sending_wrong_types_ends_the_test_with_an_error(probes: list[Probe], phase: dict,
                                                                                 said: str):
    server = start_probe(probes, "net-server", "--backend", "perftest", "--bind", "127.0.0.1", "--deadline", "60",
                         env={"PATH": "/nonexistent"})
    channel = connect(server.next_json()["port"])
    reply, _ = prove_hello(channel, {"streams": 2, "duration_s": 1.0, "message_bytes": 1 << 20}, backend="perftest")
    assert reply["accepted"] is True
    channel.receive()  # the session reply
    channel.send(phase)
    status, rest, _ = server.finish(timeout_s=30)
    channel.close()
    assert status == 0 and said in rest[-1]["reason"], rest
    assert "Traceback" not in server.stderr()


def test_a_perftest_client_may_ask_for_one_ib_write_bw_per_qp_up_to_a_bound(probes: list[Probe]):
    server = start_probe(probes, "net-server", "--backend", "perftest", "--bind", "127.0.0.1", "--deadline", "60",
                         env={"PATH": "/nonexistent"})
    channel = connect(server.next_json()["port"])
    prove_hello(channel, {"streams": 33, "duration_s": 1.0, "message_bytes": 1 << 20}, backend="perftest")
    status, rest, _ = server.finish(timeout_s=30)
    channel.close()
    assert status == 0 and "'streams' must be an integer from 1 to 32" in rest[-1]["reason"], rest


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
        closed_by_peer(conn, 60)

    def _drain(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=conn: closed_by_peer(c, 60), daemon=True).start()


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
    client = start_probe(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{fake.port}", "--duration",
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
    server = start_probe(probes, "net-server", "--backend", backend, "--bind", "127.0.0.1", "--deadline", "120",
                         "--accept-window", "2", env={"CUDA_VISIBLE_DEVICES": ""})
    assert server.next_json(timeout_s=60)["event"] == "listening"
    status, rest, waited = server.finish(timeout_s=30)
    assert status == 124 and waited < 20  # 2 s, not 120
    assert rest[-1]["reason"] == "no client came within the server's accept window of 2 s"


@pytest.mark.parametrize("backend", ["tcp", "nccl", "perftest"])
def test_a_server_whose_controller_is_gone_ends_at_once(probes: list[Probe], backend: str):
    server = start_probe(probes, "net-server", "--backend", backend, "--bind", "127.0.0.1", "--deadline", "120",
                         "--stdin-lifeline", env={"CUDA_VISIBLE_DEVICES": ""}, stdin=subprocess.PIPE)
    assert server.next_json(timeout_s=60)["event"] == "listening"
    time.sleep(0.5)
    assert server.process.poll() is None and server.process.stdin is not None
    server.process.stdin.close()  # what sshd does when the controller's connection dies
    status, rest, waited = server.finish(timeout_s=30)
    assert status == 129 and waited < 10
    assert rest[-1]["reason"] == "the controller is gone (stdin closed)"


def test_a_pair_test_in_flight_ends_on_both_sides_when_the_controller_is_gone(probes: list[Probe]):
    server = start_probe(probes, "net-server", "--backend", "tcp", "--bind", "127.0.0.1", "--deadline", "120",
                         "--stdin-lifeline", stdin=subprocess.PIPE)
    port = server.next_json()["port"]
    client = start_probe(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{port}", "--duration", "30",
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
    server = start_probe(probes, "net-server", "--backend", "tcp", "--bind", "127.0.0.1", "--deadline", "30",
                         "--stdin-lifeline")  # stdin /dev/null: its end of file says nothing of a controller
    port = server.next_json()["port"]
    time.sleep(1.0)
    assert server.process.poll() is None
    client = start_probe(probes, "net-client", "--backend", "tcp", "--connect", f"127.0.0.1:{port}",
                         "--duration", "0.3")
    assert {record["status"] for record in client.finish(timeout_s=30)[1]} == {"ok"}


def test_a_server_told_to_bind_an_address_not_its_own_refuses_to_listen(probes: list[Probe]):
    server = start_probe(probes, "net-server", "--backend", "tcp", "--bind", "192.0.2.1", "--deadline", "30")
    done = server.next_json()
    assert (done["event"], done["status"], done["cause"]) == ("done", "error", "bind")
    assert done["reason"].startswith("cannot listen on 192.0.2.1: ")
    assert server.finish(timeout_s=15)[0] == 0


@pytest.mark.parametrize("backend", ["nccl", "perftest"])
def test_every_backends_server_refuses_an_address_not_its_own(probes: list[Probe], backend: str):
    server = start_probe(probes, "net-server", "--backend", backend, "--bind", "192.0.2.1", "--deadline", "30",
                         env={"CUDA_VISIBLE_DEVICES": ""})
    done = server.next_json(timeout_s=60)
    assert (done["event"], done["status"], done["cause"]) == ("done", "error", "bind")
    assert done["reason"].startswith("cannot listen on 192.0.2.1: ")
