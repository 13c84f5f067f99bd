"""The pair server's door (probes/net/gate.py) and the handshake on top of it (probes/net/auth.py),
on real sockets on 127.0.0.x: a bounded set of waiting connections that crowds out its oldest for a
newcomer, the favoured address apart from strangers, one deadline for a whole first line, lines read
exactly up to their newline, and a client crowded out of its handshake that connects again. Each
wait has a generous deadline and nothing asserts how fast (the cores may be busy)."""

from __future__ import annotations

import json
import secrets
import socket
import threading
from collections.abc import Iterator

import pytest

from probes.context import Deadline
from probes.net.auth import Dropped, PairSecret, accept_client, client_handshake, open_session, plain_address
from probes.net.common import PROTOCOL, Channel
from probes.net.gate import Gate, Notes

SECRET = PairSecret.from_hex(secrets.token_hex(32))
WAIT_S = 30.0  # a deadline no healthy run comes near


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.create_server(("127.0.0.1", 0), backlog=64)
    yield sock
    sock.close()


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def _connect(listener: socket.socket, sockets: list[socket.socket], source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(listener.getsockname(), timeout=WAIT_S, source_address=(source, 0))
    sockets.append(sock)
    return sock


def _closed(sock: socket.socket, timeout_s: float = WAIT_S) -> bool:
    """Whether the peer closes ``sock`` within ``timeout_s`` (what it sends first is read and dropped)."""
    sock.settimeout(timeout_s)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except OSError:
        return True
    return True


def _open_now(sock: socket.socket) -> bool:
    """Whether ``sock`` is still open at the other end (nothing is waiting to be read: no end of file)."""
    sock.setblocking(False)
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


def _gate(listener: socket.socket, **options) -> Gate:  # noqa: ANN003
    settings = {"line_bytes": 64, "line_s": WAIT_S, "max_pending": 3, "notes": Notes("test"), **options}
    return Gate(listener, **settings)


def test_a_full_gate_crowds_out_the_one_that_waited_longest_never_the_newcomer(listener, sockets):
    with _gate(listener) as gate:
        first, second, third = (_connect(listener, sockets) for _ in range(3))  # silent
        newcomer = _connect(listener, sockets)
        newcomer.sendall(b"mine\n")
        arrival = gate.next_line(Deadline.after(WAIT_S))
        assert arrival.line == b"mine\n" and arrival.address == "127.0.0.1"
        arrival.sock.close()
        assert _closed(first)  # crowded out when the newcomer came
        assert _open_now(second) and _open_now(third) and gate.pending() == 2
    assert _closed(second) and _closed(third)  # closing the gate closes whoever still waits
    assert listener.gettimeout() is None  # and gives the listener back as it was


def test_strangers_never_crowd_out_the_favoured_address(listener, sockets):
    with _gate(listener, max_pending=2, favoured="127.0.0.1") as gate:
        favoured = _connect(listener, sockets, "127.0.0.1")  # silent for now
        strangers = [_connect(listener, sockets, "127.0.0.2") for _ in range(4)]
        strangers[-1].sendall(b"stranger\n")
        arrival = gate.next_line(Deadline.after(WAIT_S))
        assert (arrival.line, arrival.address) == (b"stranger\n", "127.0.0.2")
        arrival.sock.close()
        assert _closed(strangers[0]) and _closed(strangers[1])  # the strangers crowd out each other
        assert _open_now(favoured)
        favoured.sendall(b"favoured\n")
        arrival = gate.next_line(Deadline.after(WAIT_S))
        assert (arrival.line, arrival.address) == (b"favoured\n", "127.0.0.1")
        arrival.sock.close()


def test_a_first_line_has_one_deadline_for_all_its_bytes_not_one_per_read(listener, sockets):
    with _gate(listener, line_s=1.0) as gate:
        trickling = _connect(listener, sockets)
        stop = threading.Event()

        def trickle() -> None:  # a byte every 0.2 s: far inside any per-read timeout
            while not stop.wait(0.2):
                try:
                    trickling.sendall(b"x")
                except OSError:
                    return

        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        try:
            with pytest.raises(TimeoutError, match="no whole line here"):
                gate.next_line(Deadline.after(6.0), "no whole line here")
            assert gate.pending() == 0  # dropped at its deadline, bytes coming or not
        finally:
            stop.set()
            thread.join(10)
        assert _closed(trickling)


def test_a_line_is_read_up_to_its_newline_and_what_follows_stays_in_the_socket(listener, sockets):
    with _gate(listener, greet=lambda: (b"hi\n", "context")) as gate:
        peer = _connect(listener, sockets)
        peer.sendall(b"first line\nwhat follows")
        arrival = gate.next_line(Deadline.after(WAIT_S))
        assert (arrival.line, arrival.context) == (b"first line\n", "context")
        arrival.sock.settimeout(WAIT_S)  # blocking again, for its reader
        assert arrival.sock.recv(64) == b"what follows"
        arrival.sock.close()
        peer.settimeout(WAIT_S)
        assert peer.recv(64) == b"hi\n"  # the greeting went out on accept


def test_a_line_too_long_or_a_peer_gone_is_dropped(listener, sockets):
    with _gate(listener, line_bytes=8) as gate:
        long = _connect(listener, sockets)
        long.sendall(b"x" * 20)
        _connect(listener, sockets).close()
        with pytest.raises(TimeoutError):
            gate.next_line(Deadline.after(2.0))
        assert gate.pending() == 0
        assert _closed(long)


# --- the handshake through the gate ----------------------------------------------------------------

def _serve(listener: socket.socket, accepted: list, **options) -> threading.Thread:  # noqa: ANN003
    def run() -> None:
        try:
            accepted.append(accept_client(listener, "tcp", SECRET, **options))
        except (OSError, TimeoutError) as error:
            accepted.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_silent_strangers_by_the_score_do_not_keep_the_proved_client_out(listener, sockets):
    from probes.net.auth import MAX_PENDING

    accepted: list = []
    server = _serve(listener, accepted, deadline=Deadline.after(WAIT_S))
    for _ in range(2 * MAX_PENDING + 3):
        _connect(listener, sockets)
    channel, handshake = open_session("127.0.0.1", listener.getsockname()[1], "tcp", SECRET, {"streams": 1},
                                      "the server", Deadline.after(WAIT_S))
    server.join(WAIT_S)
    (winner,) = accepted
    assert not isinstance(winner, BaseException), winner
    assert winner[1].client_nonce == handshake.client_nonce and winner[1].client == "127.0.0.1"
    assert winner[1].params == {"streams": 1}
    winner[0].close()
    channel.close()


def test_the_proved_channel_has_the_sessions_deadline_not_the_accept_windows(listener):
    accepted: list = []
    window = Deadline.after(3.0)  # the client comes at once
    server = _serve(listener, accepted, deadline=window, session=Deadline.after(WAIT_S + 30))
    channel = Channel(socket.create_connection(listener.getsockname(), timeout=WAIT_S), Deadline.after(WAIT_S))
    client_handshake(channel, "tcp", SECRET, {"streams": 1}, "the server")
    server.join(WAIT_S)
    (winner,) = accepted
    assert not isinstance(winner, BaseException), winner
    server_channel = winner[0]
    # the accept window passes; a message that comes after it still comes in time (each wait of a
    # channel is cut at its deadline: at the window's, it would time out at once)
    sender = threading.Timer(window.left_s() + 0.5, lambda: channel.send({"phase": "client_to_server"}))
    sender.start()
    try:
        assert server_channel.receive(timeout_s=WAIT_S) == {"phase": "client_to_server"}
    finally:
        sender.join(WAIT_S)
        server_channel.close()
        channel.close()


def _proved_greeting() -> bytes:
    nonce = secrets.token_hex(16)
    return json.dumps({"protocol": PROTOCOL, "backend": "tcp", "nonce": nonce,
                       "proof": SECRET.proof("server-greeting", "tcp", nonce)}).encode() + b"\n"


def test_a_client_crowded_out_of_its_handshake_connects_again(listener):
    accepted: list = []

    def crowd_out_then_accept() -> None:
        conn, _ = listener.accept()  # as a crowded gate does: the greeting, then the connection closed
        conn.sendall(_proved_greeting())
        conn.close()
        accepted.append(accept_client(listener, "tcp", SECRET, Deadline.after(WAIT_S)))

    server = threading.Thread(target=crowd_out_then_accept, daemon=True)
    server.start()
    channel, handshake = open_session("127.0.0.1", listener.getsockname()[1], "tcp", SECRET, {"streams": 2},
                                      "the server", Deadline.after(WAIT_S))
    server.join(WAIT_S)
    ((server_channel, proved),) = accepted
    assert proved.client_nonce == handshake.client_nonce
    server_channel.close()
    channel.close()


def test_a_client_dropped_before_any_proof_does_not_connect_again(listener):
    def close_at_once() -> None:
        conn, _ = listener.accept()
        conn.close()

    thread = threading.Thread(target=close_at_once, daemon=True)
    thread.start()
    with pytest.raises(ConnectionResetError) as raised:
        open_session("127.0.0.1", listener.getsockname()[1], "tcp", SECRET, {"streams": 1}, "the server",
                     Deadline.after(WAIT_S))
    assert not isinstance(raised.value, Dropped)  # not the server of this test: no second try
    thread.join(WAIT_S)


def test_a_client_dropped_again_and_again_gives_up_after_its_retry_time(listener):
    stop = threading.Event()

    def always_crowded() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.sendall(_proved_greeting())
            conn.close()

    thread = threading.Thread(target=always_crowded, daemon=True)
    thread.start()
    try:
        with pytest.raises(Dropped, match="closed the connection before it accepted this client"):
            open_session("127.0.0.1", listener.getsockname()[1], "tcp", SECRET, {"streams": 1}, "the server",
                         Deadline.after(WAIT_S), retry_s=1.0)
    finally:
        stop.set()
        thread.join(WAIT_S)


def test_plain_address_of_an_ipv4_peer_on_a_dual_stack_socket():
    assert plain_address("::ffff:127.0.0.2") == "127.0.0.2"
