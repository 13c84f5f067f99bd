"""The ``tcp`` pair backend: plain sockets, several parallel streams, each direction in turn.

One control connection carries JSON messages (common.Channel); ``streams`` data connections carry
the bytes. A phase is one direction: the sender writes on every stream for ``duration_s`` and
then half-closes; the receiver counts bytes until every stream ends. The figure is the
receiver's: bytes received over the wall time from the first byte to the last, in Gbit/s (what
the sender's kernel accepted would count socket buffers that never crossed the wire). The
samples are the rates of equal intervals inside that window; per-stream rates go in details, in
the order of the streams' indexes. With ``--trace-hops K`` the client first finds the routers on
each stream's own path (probes/net/trace.py); the client_to_server record then carries them as
``stream_hops``, one list of K addresses (or nulls) per stream, in the same order.

Protocol (after the handshake of probes/net/auth.py, whose params are {"streams", "duration_s"}, and
"trace_hops" where the client traces its streams' paths first: the server waits that much longer
for the data connections):
  server -> {"host", "interface", "line_rate_gbps"}
  data connection i sends "<i> <proof of the pair secret for stream i>\\n" first
  {"phase": "client_to_server"} -> {"ready": true}; the client sends; -> {"received": summary}
  {"phase": "server_to_client"} (the client is already reading); the server sends; -> {"sent_bytes"}
  {"bye": true}
Each end checks every field the other sends (a wrong type or value is an error, never a figure).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..context import Deadline
from ..runner import EXIT_DEADLINE, EXIT_OK
from ..topology import interface_for_address, read_ethernet_speed_gbps
from .auth import (
    HANDSHAKE_S,
    MAX_PENDING,
    MAX_STREAM_GREETING,
    Handshake,
    PairSecret,
    accept_client,
    open_session,
    plain_address,
)
from .common import (
    DIRECTIONS,
    MAX_DURATION_S,
    MAX_STREAMS,
    MAX_TRACE_HOPS,
    PROTOCOL,
    STALL_S,
    Channel,
    LinkParams,
    NetOptions,
    Output,
    bandwidth_record,
    bits_gbps,
    bound_address,
    bounded,
    connect,
    describe_failure,
    join_host_port,
    link_failure,
    no_client_reason,
    open_listener,
    start_lifeline,
    start_watchdog,
)
from .gate import Gate
from .messages import ProtocolError, expect_choice, expect_int, expect_number, expect_numbers, expect_str
from .trace import TRACE_WAIT_S, SockAddr, connect_from, reserve_source, trace_streams

BACKEND = "tcp"
CHUNK_BYTES = 1 << 20
# Intervals per phase for the samples (and their CV); never shorter than this.
INTERVALS = 10
MIN_INTERVAL_S = 0.02
# Bounds of what a peer may report: bytes of one phase, Gbit/s of a figure or a port.
MAX_BYTES = 1 << 62
MAX_GBPS = 1e6


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

def serve(options: NetOptions, secret: PairSecret, out: Output) -> int:
    """Serve one tcp test (see the module docstring) to the first client that proves ``secret``;
    the exit status."""
    deadline = Deadline.after(options.deadline_s)
    started = time.monotonic()
    try:
        listener = open_listener(options.bind)
    except OSError as error:
        out.event("done", backend=BACKEND, status="error", cause="bind",
                  reason=f"cannot listen on {options.bind or '*'}: {error.strerror or error}")
        return EXIT_OK
    out.event("listening", backend=BACKEND, port=listener.getsockname()[1], bind=bound_address(listener),
              host=socket.gethostname(), pid=os.getpid(), protocol=PROTOCOL, deadline_s=options.deadline_s)
    start_watchdog(deadline, lambda: out.event("done", backend=BACKEND, status="error",
                                               reason="the server's deadline passed", elapsed_s=_since(started)))
    if options.stdin_lifeline:
        start_lifeline(lambda: out.event("done", backend=BACKEND, status="error", elapsed_s=_since(started),
                                         reason="the controller is gone (stdin closed)"))
    channel: Channel | None = None
    streams: list[socket.socket] = []
    client = None
    try:
        channel, handshake = accept_client(listener, BACKEND, secret, deadline.sooner(options.accept_window_s),
                                           session=deadline)
        client = handshake.client
        duration_s = _session_duration(handshake)
        streams = _open_session(listener, channel, handshake, secret, options, deadline,
                                STALL_S + trace_time_s(_session_trace_hops(handshake)))
        _serve_phases(channel, streams, duration_s, deadline)
    except TimeoutError as error:
        if client is None:
            out.event("done", backend=BACKEND, status="error", client=None, elapsed_s=_since(started),
                      reason=no_client_reason(options, deadline))
            return EXIT_DEADLINE
        if deadline.expired():
            out.event("done", backend=BACKEND, status="error", client=client, elapsed_s=_since(started),
                      reason=f"the test with {client} did not end within the server's deadline of "
                             f"{options.deadline_s:g} s")
            return EXIT_DEADLINE
        out.event("done", backend=BACKEND, status="error", client=client, elapsed_s=_since(started),
                  reason=describe_failure(error, client))
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


def _session_duration(handshake: Handshake) -> float:
    """The client's timed seconds per direction; its stream count is checked as the streams come."""
    expect_int(handshake.params, "streams", 1, MAX_STREAMS)
    return float(expect_number(handshake.params, "duration_s", 0.0, MAX_DURATION_S, above=True))


def _session_trace_hops(handshake: Handshake) -> int:
    """The hops the client traces on each stream before its data connections (0: none)."""
    return int(expect_int(handshake.params, "trace_hops", 0, MAX_TRACE_HOPS, optional=True) or 0)


def trace_time_s(hops: int) -> float:
    """Seconds tracing ``hops`` hops of every stream may take at most (every stream at once, each
    stream's TTLs in turn, each waiting TRACE_WAIT_S for its answer)."""
    return hops * TRACE_WAIT_S + (1.0 if hops else 0.0)


def _open_session(listener: socket.socket, channel: Channel, handshake: Handshake, secret: PairSecret,
                  options: NetOptions, deadline: Deadline, accept_wait_s: float) -> list[socket.socket]:
    """The client's data connections in index order, each proving the secret; ``accept_wait_s``:
    seconds to wait for the next one (longer while the client traces its streams' paths first).
    Their greetings are read at once, each within HANDSHAKE_S of its connection, those from the
    client's address apart from strangers' (probes/net/gate.py): a stalled one holds up nobody."""
    count = int(handshake.params["streams"])
    interface, rate = local_line_rate(channel.sock, options.sysfs_root)
    channel.send({"host": socket.gethostname(), "interface": interface, "line_rate_gbps": rate})
    streams: dict[int, socket.socket] = {}
    proved = False  # every stream proved: they are the caller's; else (any way out) they are closed
    try:
        with Gate(listener, MAX_STREAM_GREETING, HANDSHAKE_S, MAX_PENDING, favoured=handshake.client,
                  plain=plain_address) as gate:
            while len(streams) < count:
                arrival = gate.next_line(deadline.sooner(accept_wait_s), f"only {len(streams)} of {count} data "
                                                                         "connections proved the pair secret in time")
                index = handshake.stream_index(secret, arrival.line, count)
                if index is None or index in streams:
                    gate.notes.say(f"dropped a data connection from {arrival.address} without a proof of the "
                                   "pair secret")
                    arrival.sock.close()
                    continue
                streams[index] = arrival.sock
        proved = True
    finally:
        if not proved:
            _close(list(streams.values()))
    return [streams[index] for index in range(count)]


def _serve_phases(channel: Channel, streams: Sequence[socket.socket], duration_s: float, deadline: Deadline) -> None:
    while True:
        message = channel.receive(timeout_s=duration_s + STALL_S)
        if message.get("bye") is True:
            return
        phase = expect_choice(message, "phase", DIRECTIONS)
        if phase == "client_to_server":
            channel.send({"ready": True})
            counts = receive_all(streams, duration_s, deadline)
            try:
                channel.send({"received": summarize(counts)})
            except ProtocolError as failure:
                channel.send({"failed": str(failure)})
        else:
            sent, error = send_all(streams, duration_s, deadline)
            channel.send({"sent_bytes": sent} if error is None else {"failed": error})


# --- client ------------------------------------------------------------------------------------

def run_client(options: NetOptions, secret: PairSecret, out: Output) -> int:
    """Measure each direction against the tcp net-server that proves ``secret``; one record per direction."""
    deadline = Deadline.after(options.deadline_s)
    pending = list(options.directions)
    details: dict[str, Any] = {"peer": options.peer, "line_rate_gbps": None}
    paths: dict[str, Any] = {}  # stream_hops, once traced: the client_to_server record's alone
    tracing = options.trace_hops > 0 and "client_to_server" in options.directions
    lock = threading.Lock()

    def details_of(direction: str) -> dict[str, Any]:
        return {**details, **(paths if direction == "client_to_server" else {})}

    def fail_pending(reason: str) -> None:
        with lock:
            for direction in list(pending):
                out.record(link_failure(_params(options, direction), reason, details_of(direction)))
                pending.remove(direction)

    start_watchdog(deadline, lambda: fail_pending(f"the client's deadline of {options.deadline_s:g} s passed"))
    if options.stdin_lifeline:
        start_lifeline(lambda: fail_pending("the controller is gone (stdin closed)"))
    channel: Channel | None = None
    streams: list[socket.socket] = []
    try:
        hello = {"streams": options.streams, "duration_s": options.duration_s,
                 **({"trace_hops": options.trace_hops} if tracing else {})}
        channel, handshake = open_session(options.host or "", options.port or 0, BACKEND, secret, hello,
                                          options.peer, deadline)
        details.update(_link_details(channel.sock, channel.receive(), options))
        if tracing:
            streams, paths["stream_hops"] = _open_traced_streams(channel, options, handshake, secret, deadline)
        else:
            streams = [_open_stream(options, handshake, secret, index, deadline) for index in range(options.streams)]
        for direction in options.directions:
            record = _measure(channel, streams, direction, options, details_of(direction), deadline)
            with lock:
                if direction in pending:
                    out.record(record)
                    pending.remove(direction)
        channel.send({"bye": True})
    except (OSError, ProtocolError) as error:
        fail_pending(describe_failure(error, options.peer))
    finally:
        _close(streams)
        if channel is not None:
            channel.close()
    return EXIT_OK


def _open_stream(options: NetOptions, handshake: Handshake, secret: PairSecret, index: int,
                 deadline: Deadline) -> socket.socket:
    sock = connect(options.host or "", options.port or 0, deadline)
    sock.sendall(handshake.stream_greeting(secret, index))
    return sock


def _open_traced_streams(channel: Channel, options: NetOptions, handshake: Handshake, secret: PairSecret,
                         deadline: Deadline) -> tuple[list[socket.socket], list[list[str | None]]]:
    """The data connections in index order, each from the source port whose path was traced
    first (probes/net/trace.py) to the server's address of the control connection, and each
    stream's hops; a stream whose source port could not be kept has none (all None).
    Raises OSError when a data connection cannot be made."""
    family, local, peer = channel.sock.family, channel.sock.getsockname(), channel.sock.getpeername()
    reservations = [reserve_source(local, family) for _ in range(options.streams)]
    streams: list[socket.socket] = []
    try:
        sources: list[SockAddr | None] = [None if held is None else held.getsockname() for held in reservations]
        hops = trace_streams(sources, peer, family, options.trace_hops,
                             deadline.sooner(trace_time_s(options.trace_hops)))
        for index, source in enumerate(sources):
            sock, kept = connect_from(source, peer, family, deadline)
            streams.append(sock)
            if not kept:
                hops[index] = [None] * options.trace_hops
            sock.sendall(handshake.stream_greeting(secret, index))
    except OSError:
        _close(streams)
        raise
    finally:
        _close([held for held in reservations if held is not None])
    return streams, hops


def _measure(channel: Channel, streams: Sequence[socket.socket], direction: str, options: NetOptions,
             details: dict[str, Any], deadline: Deadline) -> Any:
    params = _params(options, direction)
    wait_s = options.duration_s + STALL_S
    if direction == "client_to_server":
        channel.send({"phase": direction})
        if channel.receive().get("ready") is not True:
            raise ProtocolError("the server did not say it is ready to receive")
        _, error = send_all(streams, options.duration_s, deadline)
        reply = channel.receive(timeout_s=wait_s)
        if error is not None or "failed" in reply:
            return link_failure(params, error or expect_str(reply, "failed"), details)
        summary = _received(reply)
    else:
        holder: list[list[StreamCount]] = []
        receiver = threading.Thread(target=lambda: holder.append(receive_all(streams, options.duration_s, deadline)),
                                    daemon=True)
        receiver.start()
        channel.send({"phase": direction})
        receiver.join(deadline.left_s() + 1.0)
        reply = channel.receive(timeout_s=wait_s)
        if "failed" in reply:
            return link_failure(params, expect_str(reply, "failed"), details)
        expect_int(reply, "sent_bytes", 0, MAX_BYTES)
        if not holder:
            return link_failure(params, "the receiving threads did not finish", details)
        try:
            summary = summarize(holder[0])
        except ProtocolError as failure:
            return link_failure(params, str(failure), details)
    return bandwidth_record(params, int(summary["bytes"]), float(summary["elapsed_s"]), summary["interval_gbps"],
                            {**details, "stream_gbps": summary["stream_gbps"]})


def _received(reply: dict[str, Any]) -> dict[str, Any]:
    """The server's reception summary of a ``received`` reply, every field checked. Raises ProtocolError."""
    summary = reply.get("received")
    if not isinstance(summary, dict):
        raise ProtocolError("the server's reply holds neither 'received' nor 'failed'")
    return {"bytes": expect_int(summary, "bytes", 1, MAX_BYTES),
            "elapsed_s": expect_number(summary, "elapsed_s", 0.0, MAX_DURATION_S, above=True),
            "interval_gbps": expect_numbers(summary, "interval_gbps", MAX_GBPS),
            "stream_gbps": expect_numbers(summary, "stream_gbps", MAX_GBPS, limit=MAX_STREAMS)}


def _link_details(sock: socket.socket, reply: dict[str, Any], options: NetOptions) -> dict[str, Any]:
    interface, rate = local_line_rate(sock, options.sysfs_root)
    peer_rate = expect_number(reply, "line_rate_gbps", 0.0, MAX_GBPS, optional=True)
    known = [value for value in (rate, peer_rate) if isinstance(value, (int, float))]
    return {"line_rate_gbps": min(known) if known else None, "local_interface": interface,
            "local_line_rate_gbps": rate, "peer_host": expect_str(reply, "host", limit=255, optional=True),
            "peer_interface": expect_str(reply, "interface", limit=64, optional=True),
            "peer_line_rate_gbps": peer_rate, "local_address": join_host_port(*sock.getsockname()[:2])}


def _params(options: NetOptions, direction: str) -> LinkParams:
    return LinkParams(BACKEND, direction, options.streams, options.duration_s)


def _close(socks: Sequence[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def _since(started: float) -> float:
    return round(time.monotonic() - started, 3)
