"""The ``tcp`` pair backend: plain sockets, several parallel streams, each direction in turn.

One control connection carries JSON messages (net.Channel); ``streams`` data connections carry
the bytes. A phase is one direction: the sender writes on every stream for ``duration_s`` and
then half-closes; the receiver counts bytes until every stream ends. The figure is the
receiver's: bytes received over the wall time from the first byte to the last, in Gbit/s (what
the sender's kernel accepted would count socket buffers that never crossed the wire). The
samples are the rates of equal intervals inside that window; per-stream rates go in details.

Protocol (client -> server, then the reply):
  {"protocol", "backend": "tcp", "streams", "duration_s"}  -> {"session", "host", "line_rate_gbps", ...}
  data connection i sends "<session> <i>\\n" first
  {"phase": "client_to_server"} -> {"ready": true}; the client sends; -> {"received": summary}
  {"phase": "server_to_client"} (the client is already reading); the server sends; -> {"sent_bytes"}
  {"bye": true}
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .context import Deadline
from .net import (
    PROTOCOL,
    STALL_S,
    Channel,
    LinkParams,
    NetOptions,
    Output,
    ProtocolError,
    accept_client,
    bandwidth_record,
    bits_gbps,
    bounded,
    connect,
    describe_failure,
    join_host_port,
    link_failure,
    open_listener,
    start_watchdog,
)
from .runner import EXIT_DEADLINE, EXIT_OK
from .topology import interface_for_address, read_ethernet_speed_gbps

BACKEND = "tcp"
CHUNK_BYTES = 1 << 20
# Intervals per phase for the samples (and their CV); never shorter than this.
INTERVALS = 10
MIN_INTERVAL_S = 0.02


@dataclass
class StreamCount:
    """What one receiving stream saw: bytes, first and last arrival (perf_counter seconds),
    bytes per interval since ``origin_s``, or the error that ended it."""

    origin_s: float
    interval_s: float
    bytes: int = 0
    first_s: float | None = None
    last_s: float | None = None
    intervals: Counter[int] = field(default_factory=Counter)
    error: str | None = None


def summarize(counts: Sequence[StreamCount]) -> dict[str, Any]:
    """One direction's reception: total bytes, wall seconds from the first byte to the last,
    the Gbit/s of each whole interval inside that window, and each stream's Gbit/s.
    Raises ProtocolError when a stream failed or nothing arrived."""
    failures = [count.error for count in counts if count.error]
    if failures:
        raise ProtocolError(failures[0])
    arrived = [count for count in counts if count.first_s is not None and count.last_s is not None]
    if not arrived:
        raise ProtocolError("no data arrived")
    first = min(count.first_s for count in arrived if count.first_s is not None)
    last = max(count.last_s for count in arrived if count.last_s is not None)
    total = sum(count.bytes for count in counts)
    interval_s = counts[0].interval_s
    merged: Counter[int] = sum((count.intervals for count in counts), Counter())
    lo, hi = int((first - counts[0].origin_s) / interval_s) + 1, int((last - counts[0].origin_s) / interval_s) - 1
    whole = [round(bits_gbps(merged[index], interval_s), 4) for index in range(lo, hi + 1)]
    return {"bytes": total, "elapsed_s": max(last - first, 1e-9), "interval_gbps": whole,
            "stream_gbps": [round(bits_gbps(count.bytes, (count.last_s or 0) - (count.first_s or 0)), 4)
                            if count.first_s is not None and count.last_s != count.first_s else 0.0
                            for count in counts]}


def receive_all(socks: Sequence[socket.socket], duration_s: float, deadline: Deadline) -> list[StreamCount]:
    """Read every stream to its end on parallel threads; the counts (errors included)."""
    interval_s = max(duration_s / INTERVALS, MIN_INTERVAL_S)
    origin = time.perf_counter()
    counts = [StreamCount(origin, interval_s) for _ in socks]
    threads = [threading.Thread(target=_receive, args=(sock, count, deadline), daemon=True)
               for sock, count in zip(socks, counts, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(deadline.left_s() + 1.0)
    for count in counts:
        if count.error is None and any(thread.is_alive() for thread in threads):
            count.error = "the deadline passed while receiving"
    return counts


def _receive(sock: socket.socket, count: StreamCount, deadline: Deadline) -> None:
    view = memoryview(bytearray(CHUNK_BYTES))
    try:
        while True:
            sock.settimeout(bounded(STALL_S, deadline))
            received = sock.recv_into(view)
            now = time.perf_counter()
            if received == 0:
                return
            if count.first_s is None:
                count.first_s = now
            count.last_s = now
            count.bytes += received
            count.intervals[int((now - count.origin_s) / count.interval_s)] += received
    except OSError as error:
        count.error = describe_failure(error, "a data stream")


def send_all(socks: Sequence[socket.socket], duration_s: float, deadline: Deadline) -> tuple[int, str | None]:
    """Write on every stream for ``duration_s`` seconds, then half-close each: (bytes the
    kernel accepted, the first error or None)."""
    until = time.perf_counter() + min(duration_s, deadline.left_s())
    sent = [0] * len(socks)
    errors: list[str] = []

    def send(index: int, sock: socket.socket) -> None:
        payload = memoryview(bytes(CHUNK_BYTES))
        try:
            while time.perf_counter() < until:
                sock.settimeout(bounded(STALL_S, deadline))
                sent[index] += sock.send(payload)
            sock.shutdown(socket.SHUT_WR)
        except OSError as error:
            errors.append(describe_failure(error, "a data stream"))

    threads = [threading.Thread(target=send, args=(index, sock), daemon=True) for index, sock in enumerate(socks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(deadline.left_s() + 1.0)
    return sum(sent), (errors[0] if errors else None)


def local_line_rate(sock: socket.socket, sysfs_root: str) -> tuple[str | None, float | None]:
    """(interface, its speed in Gbit/s) of the local end of a connected socket."""
    interface = interface_for_address(str(sock.getsockname()[0]))
    return interface, (read_ethernet_speed_gbps(interface, sysfs_root) if interface else None)


# --- server ------------------------------------------------------------------------------------

def serve(options: NetOptions, out: Output) -> int:
    """Serve one tcp test (see the module docstring); the exit status."""
    deadline = Deadline.after(options.deadline_s)
    started = time.monotonic()
    try:
        listener = open_listener(options.bind)
    except OSError as error:
        out.event("done", backend=BACKEND, status="error", reason=f"cannot listen on {options.bind or '*'}: {error}")
        return EXIT_OK
    out.event("listening", backend=BACKEND, port=listener.getsockname()[1], bind=options.bind or "*",
              host=socket.gethostname(), pid=os.getpid(), protocol=PROTOCOL, deadline_s=options.deadline_s)
    start_watchdog(deadline, lambda: out.event("done", backend=BACKEND, status="error",
                                               reason="the server's deadline passed", elapsed_s=_since(started)))
    channel: Channel | None = None
    streams: list[socket.socket] = []
    client = None
    try:
        channel, hello, client = accept_client(listener, BACKEND, deadline)
        streams = _open_session(listener, channel, hello, options, deadline)
        _serve_phases(channel, streams, float(hello.get("duration_s", 1.0)), deadline)
    except TimeoutError as error:
        if deadline.expired():
            waited = "no client came" if client is None else f"the test with {client} did not end"
            out.event("done", backend=BACKEND, status="error", client=client, elapsed_s=_since(started),
                      reason=f"{waited} within the server's deadline of {options.deadline_s:g} s")
            return EXIT_DEADLINE
        out.event("done", backend=BACKEND, status="error", client=client, elapsed_s=_since(started),
                  reason=describe_failure(error, client or "the client"))
        return EXIT_OK
    except (OSError, ProtocolError) as error:
        out.event("done", backend=BACKEND, status="error", client=client, elapsed_s=_since(started),
                  reason=describe_failure(error, client or "the client"))
        return EXIT_OK
    finally:
        _close(streams)
        if channel is not None:
            channel.close()
        listener.close()
    out.event("done", backend=BACKEND, status="ok", reason=None, client=client, elapsed_s=_since(started))
    return EXIT_OK


def _open_session(listener: socket.socket, channel: Channel, hello: dict[str, Any], options: NetOptions,
                  deadline: Deadline) -> list[socket.socket]:
    count = int(hello.get("streams", 1))
    if not 1 <= count <= 256:
        channel.send({"error": f"streams must be 1..256, not {count}"})
        raise ProtocolError(f"the client asked for {count} streams")
    session = secrets.token_hex(8)
    interface, rate = local_line_rate(channel.sock, options.sysfs_root)
    channel.send({"session": session, "host": socket.gethostname(), "interface": interface, "line_rate_gbps": rate})
    streams: dict[int, socket.socket] = {}
    while len(streams) < count:
        listener.settimeout(bounded(STALL_S, deadline))
        conn, address = listener.accept()
        conn.settimeout(bounded(5.0, deadline))
        greeting = _read_greeting(conn)
        words = greeting.split()
        if len(words) != 2 or words[0] != session or not words[1].isdigit() or int(words[1]) >= count:
            print(f"net-server: dropped a data connection from {address[0]} with a wrong greeting", file=sys.stderr)
            conn.close()
            continue
        streams[int(words[1])] = conn
    return [streams[index] for index in range(count)]


def _read_greeting(conn: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n") and len(data) < 128:
        piece = conn.recv(1)
        if not piece:
            break
        data += piece
    return data.decode(errors="replace").strip()


def _serve_phases(channel: Channel, streams: Sequence[socket.socket], duration_s: float, deadline: Deadline) -> None:
    while True:
        message = channel.receive(timeout_s=duration_s + STALL_S)
        if message.get("bye"):
            return
        phase = message.get("phase")
        if phase == "client_to_server":
            channel.send({"ready": True})
            counts = receive_all(streams, duration_s, deadline)
            try:
                channel.send({"received": summarize(counts)})
            except ProtocolError as failure:
                channel.send({"failed": str(failure)})
        elif phase == "server_to_client":
            sent, error = send_all(streams, duration_s, deadline)
            channel.send({"sent_bytes": sent} if error is None else {"failed": error})
        else:
            raise ProtocolError(f"unknown message {message!r}")


# --- client ------------------------------------------------------------------------------------

def run_client(options: NetOptions, out: Output) -> int:
    """Measure each direction against a tcp net-server; one record per direction."""
    deadline = Deadline.after(options.deadline_s)
    pending = list(options.directions)
    details: dict[str, Any] = {"peer": options.peer, "line_rate_gbps": None}
    lock = threading.Lock()

    def fail_pending(reason: str) -> None:
        with lock:
            for direction in list(pending):
                out.record(link_failure(_params(options, direction), reason, details))
                pending.remove(direction)

    start_watchdog(deadline, lambda: fail_pending(f"the client's deadline of {options.deadline_s:g} s passed"))
    channel: Channel | None = None
    streams: list[socket.socket] = []
    try:
        channel = Channel(connect(options.host or "", options.port or 0, deadline), deadline)
        channel.send({"protocol": PROTOCOL, "backend": BACKEND, "streams": options.streams,
                      "duration_s": options.duration_s})
        reply = channel.receive()
        details.update(_link_details(channel.sock, reply, options))
        streams = [_open_stream(options, reply["session"], index, deadline) for index in range(options.streams)]
        for direction in options.directions:
            record = _measure(channel, streams, direction, options, details, deadline)
            with lock:
                if direction in pending:
                    out.record(record)
                    pending.remove(direction)
        channel.send({"bye": True})
    except (OSError, ProtocolError, KeyError) as error:
        fail_pending(describe_failure(error, options.peer))
    finally:
        _close(streams)
        if channel is not None:
            channel.close()
    return EXIT_OK


def _open_stream(options: NetOptions, session: str, index: int, deadline: Deadline) -> socket.socket:
    sock = connect(options.host or "", options.port or 0, deadline)
    sock.sendall(f"{session} {index}\n".encode())
    return sock


def _measure(channel: Channel, streams: Sequence[socket.socket], direction: str, options: NetOptions,
             details: dict[str, Any], deadline: Deadline) -> Any:
    params = _params(options, direction)
    wait_s = options.duration_s + STALL_S
    if direction == "client_to_server":
        channel.send({"phase": direction})
        channel.receive()
        _, error = send_all(streams, options.duration_s, deadline)
        reply = channel.receive(timeout_s=wait_s)
        if error is not None or "failed" in reply:
            return link_failure(params, error or reply["failed"], details)
        summary = reply["received"]
    else:
        holder: list[list[StreamCount]] = []
        receiver = threading.Thread(target=lambda: holder.append(receive_all(streams, options.duration_s, deadline)),
                                    daemon=True)
        receiver.start()
        channel.send({"phase": direction})
        receiver.join(deadline.left_s() + 1.0)
        reply = channel.receive(timeout_s=wait_s)
        if "failed" in reply or not holder:
            return link_failure(params, reply.get("failed", "the receiving threads did not finish"), details)
        try:
            summary = summarize(holder[0])
        except ProtocolError as failure:
            return link_failure(params, str(failure), details)
    return bandwidth_record(params, int(summary["bytes"]), float(summary["elapsed_s"]), summary["interval_gbps"],
                            {**details, "stream_gbps": summary["stream_gbps"]})


def _link_details(sock: socket.socket, reply: dict[str, Any], options: NetOptions) -> dict[str, Any]:
    interface, rate = local_line_rate(sock, options.sysfs_root)
    peer_rate = reply.get("line_rate_gbps")
    known = [value for value in (rate, peer_rate) if isinstance(value, (int, float))]
    return {"line_rate_gbps": min(known) if known else None, "local_interface": interface,
            "local_line_rate_gbps": rate, "peer_host": reply.get("host"), "peer_interface": reply.get("interface"),
            "peer_line_rate_gbps": peer_rate, "local_address": join_host_port(*sock.getsockname()[:2])}


def _params(options: NetOptions, direction: str) -> LinkParams:
    return LinkParams(BACKEND, direction, options.streams, options.duration_s)


def _close(socks: Sequence[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def _since(started: float) -> float:
    return round(time.monotonic() - started, 3)
