"""The path each TCP stream of a pair test takes through an ECMP fabric, traced with the stream's
own 5-tuple.

Switches hash each flow's addresses, ports and protocol onto one of the equal-cost paths, so
every stream of a test may cross other switch links. Before a stream's data connection the
client reserves a source port (a socket bound to port 0 of the local address, kept bound until
the data connection is made, so no other connection takes the port meanwhile), then sends TCP
SYNs from that port to the server's address and port with TTL (IPv6: hop limit) 2, 3, ... K+1:
the first hop, the client's own leaf, is known. A router that drops a SYN whose TTL ran out
answers ICMP time exceeded, which the kernel puts on the probe socket's error queue
(``IP_RECVERR``), the router's address with it: the hop. No privilege is needed.

The SYNs of one stream go one after another: the kernel refuses a second socket with the same
5-tuple while the first is connecting (EADDRNOTAVAIL), and the ICMP answer ends the probe's
connection attempt. Streams are traced at once. A probe waits ``TRACE_WAIT_S`` for its answer
(TCP sends the SYN again after about a second, with the same TTL: a second chance where a router
rate-limits ICMP); with no answer the hop is None. A probe that connects has reached the server:
it is reset at once (no TIME_WAIT keeps the 5-tuple) and the stream's tracing ends there. The
data connection then binds the same source port (``SO_REUSEADDR``), so it has the same 5-tuple
and takes the same path. Tracing never fails a test: a stream whose port cannot be kept gets
no hops.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import select
import socket
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..context import Deadline
from .common import CONNECT_TIMEOUT_S, bounded

# Seconds a probe waits for its ICMP answer: TCP sends the SYN again after 1 s with the same TTL.
TRACE_WAIT_S = 1.5
# TTL of the first probe: TTL 1 expires at the client's own leaf.
FIRST_TTL = 2
# Linux values, for Pythons whose socket module lacks the names (IP_RECVERR before 3.12).
IP_RECVERR = getattr(socket, "IP_RECVERR", 11)
IPV6_RECVERR = getattr(socket, "IPV6_RECVERR", 25)
MSG_ERRQUEUE = getattr(socket, "MSG_ERRQUEUE", 0x2000)
# sock_extended_err's ee_origin (linux/errqueue.h) and the ICMP types of "time exceeded".
ORIGIN_ICMP = 2
ORIGIN_ICMP6 = 3
ICMP_TIME_EXCEEDED = 11
ICMP6_TIME_EXCEEDED = 3
# struct sock_extended_err: ee_errno (u32), ee_origin, ee_type, ee_code, ee_pad (u8), ee_info, ee_data (u32).
_EXTENDED_ERR = struct.Struct("=IBBBBII")
_CONTROL_BYTES = 512
_POLL_EVENTS = select.POLLOUT | select.POLLERR | select.POLLHUP

SockAddr = tuple[Any, ...]


@dataclass(frozen=True)
class IcmpReport:
    """One entry of a socket's error queue: the errno it stands for, where it came from
    (``origin``: 2 ICMP, 3 ICMPv6), the ICMP type and code, and the address of the node that sent
    it (``offender``, an IP literal; None when the kernel gave none)."""

    errno: int
    origin: int
    icmp_type: int
    icmp_code: int
    offender: str | None

    @property
    def time_exceeded(self) -> bool:
        """Whether a router dropped the packet because its TTL (hop limit) ran out."""
        return (self.origin, self.icmp_type) in ((ORIGIN_ICMP, ICMP_TIME_EXCEEDED), (ORIGIN_ICMP6, ICMP6_TIME_EXCEEDED))


def parse_extended_error(data: bytes) -> IcmpReport | None:
    """The ``sock_extended_err`` of an ``IP_RECVERR``/``IPV6_RECVERR`` control message and the
    offender's sockaddr after it; None when ``data`` is too short to hold the struct."""
    if len(data) < _EXTENDED_ERR.size:
        return None
    code, origin, kind, icmp_code, _, _, _ = _EXTENDED_ERR.unpack_from(data)
    return IcmpReport(code, origin, kind, icmp_code, offender_address(data[_EXTENDED_ERR.size:]))


def offender_address(sockaddr: bytes) -> str | None:
    """The IP literal of a raw ``sockaddr_in`` or ``sockaddr_in6`` (family in host byte order);
    None for any other family (AF_UNSPEC: no offender) or a truncated one."""
    if len(sockaddr) < 2:
        return None
    family = struct.unpack_from("=H", sockaddr)[0]
    if family == socket.AF_INET and len(sockaddr) >= 8:
        return str(ipaddress.IPv4Address(sockaddr[4:8]))
    if family == socket.AF_INET6 and len(sockaddr) >= 24:
        address = ipaddress.IPv6Address(sockaddr[8:24])
        return str(address.ipv4_mapped or address)
    return None


def read_icmp_reports(sock: socket.socket) -> list[IcmpReport]:
    """Every entry waiting on ``sock``'s error queue (none: empty), without blocking."""
    reports = []
    while True:
        try:
            _, ancillary, _, _ = sock.recvmsg(1, _CONTROL_BYTES, MSG_ERRQUEUE | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return reports
        except OSError:
            return reports  # the queue is read; an error here is the socket's own (no ICMP entry)
        for level, kind, data in ancillary:
            if (level, kind) in ((socket.IPPROTO_IP, IP_RECVERR), (socket.IPPROTO_IPV6, IPV6_RECVERR)):
                report = parse_extended_error(data)
                if report is not None:
                    reports.append(report)


# --- source ports ------------------------------------------------------------------------------

def reserve_source(local: SockAddr, family: int) -> socket.socket | None:
    """A TCP socket bound (``SO_REUSEADDR``) to an ephemeral port of ``local``'s address, held
    until the stream's data connection is made; None when no port can be bound."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((local[0], 0, *local[2:]))
    except OSError:
        sock.close()
        return None
    return sock


def connect_from(source: SockAddr | None, peer: SockAddr, family: int, deadline: Deadline,
                 timeout_s: float = CONNECT_TIMEOUT_S) -> tuple[socket.socket, bool]:
    """A connected TCP socket (Nagle off) to ``peer`` from ``source`` (its path is the traced one),
    or from any port where ``source`` is None or cannot be bound (its 5-tuple still busy);
    (the socket, whether it kept ``source``). Raises OSError (refused, unreachable, timeout)."""
    if source is not None:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(source)
            sock.settimeout(bounded(timeout_s, deadline))
            sock.connect(peer)
        except OSError as error:
            sock.close()
            if error.errno not in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
                raise
        else:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock, True
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.settimeout(bounded(timeout_s, deadline))
        sock.connect(peer)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        sock.close()
        raise
    return sock, False


# --- TTL-limited probes ------------------------------------------------------------------------

class _StreamTrace:
    """One stream's tracing: its source, the hops found so far, and the probe in flight."""

    def __init__(self, source: SockAddr | None, hops: int) -> None:
        self.source = source
        self.hops: list[str | None] = [None] * hops
        self.next_ttl = FIRST_TTL if source is not None else FIRST_TTL + hops
        self.probe: socket.socket | None = None
        self.ttl = 0
        self.sent_s = 0.0

    @property
    def done(self) -> bool:
        return self.probe is None and self.next_ttl >= FIRST_TTL + len(self.hops)

    def end(self) -> None:
        """Stop tracing this stream: later hops stay None."""
        self.next_ttl = FIRST_TTL + len(self.hops)


def open_probe(source: SockAddr, peer: SockAddr, family: int, ttl: int) -> socket.socket:
    """A non-blocking TCP socket bound to ``source`` whose SYN towards ``peer`` is under way with
    TTL (hop limit) ``ttl`` and ICMP errors queued. Raises OSError (the source port or its
    5-tuple is taken)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        _set_ttl(sock, family, ttl)
        sock.bind(source)
        sock.setblocking(False)
        status = sock.connect_ex(peer)
        if status not in (0, errno.EINPROGRESS):
            raise OSError(status, f"connect: {errno.errorcode.get(status, status)}")
    except OSError:
        sock.close()
        raise
    return sock


def _set_ttl(sock: socket.socket, family: int, ttl: int) -> None:
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, ttl)
        sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVERR, 1)
        with contextlib.suppress(OSError):  # an IPv4-mapped peer answers through the IPv4 options
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
            sock.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
    else:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
        sock.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)


def reset_close(sock: socket.socket) -> None:
    """Close ``sock`` with a reset when connected (linger 0): no TIME_WAIT holds its 5-tuple."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def trace_streams(sources: Sequence[SockAddr | None], peer: SockAddr, family: int, hops: int, deadline: Deadline,
                  wait_s: float = TRACE_WAIT_S, clock: Callable[[], float] = time.monotonic) -> list[list[str | None]]:
    """Each stream's hops for TTL 2 .. ``hops`` + 1 from its ``sources`` port to ``peer``: a
    router's address, or None where none answered within ``wait_s`` seconds, after the probe
    reached the server, or for a stream without a source (None). Every stream at once, each
    stream's TTLs in turn; never past ``deadline``. Every probe socket is closed on return."""
    traces = [_StreamTrace(source, hops) for source in sources]
    try:
        while not all(trace.done for trace in traces) and not deadline.expired():
            for trace in traces:
                if trace.probe is None and not trace.done:
                    _send_next(trace, peer, family, clock)
            _await_answers([trace for trace in traces if trace.probe is not None], wait_s, deadline, clock)
    finally:
        for trace in traces:
            if trace.probe is not None:
                reset_close(trace.probe)
    return [trace.hops for trace in traces]


def _send_next(trace: _StreamTrace, peer: SockAddr, family: int, clock: Callable[[], float]) -> None:
    assert trace.source is not None
    trace.ttl, trace.next_ttl = trace.next_ttl, trace.next_ttl + 1
    try:
        trace.probe = open_probe(trace.source, peer, family, trace.ttl)
    except OSError:
        trace.end()  # the port or its 5-tuple is taken now: what a later probe finds is no longer this path
        return
    trace.sent_s = clock()


def _await_answers(active: Sequence[_StreamTrace], wait_s: float, deadline: Deadline,
                   clock: Callable[[], float]) -> None:
    """Wait for the first answer (or the first probe's time to run out), then settle every probe
    that has one."""
    if not active:
        return
    poller = select.poll()
    by_fd = {}
    for trace in active:
        assert trace.probe is not None
        poller.register(trace.probe, _POLL_EVENTS)
        by_fd[trace.probe.fileno()] = trace
    now = clock()
    soonest = min(trace.sent_s + wait_s for trace in active)
    timeout_s = max(0.0, min(soonest - now, deadline.left_s()))
    answered = {fd for fd, _ in poller.poll(timeout_s * 1000.0)}
    now = clock()
    for fd, trace in by_fd.items():
        if fd in answered:
            _settle(trace)
        elif now >= trace.sent_s + wait_s:
            _close_probe(trace)  # no answer: the hop stays None


def _settle(trace: _StreamTrace) -> None:
    """Record what answered ``trace``'s probe: a router (time exceeded), the server (connected:
    tracing ends), or an error that ends tracing (a router with no route, a reset)."""
    assert trace.probe is not None
    reports = read_icmp_reports(trace.probe)
    exceeded = next((report for report in reports if report.time_exceeded), None)
    if exceeded is not None:
        trace.hops[trace.ttl - FIRST_TTL] = exceeded.offender
    else:
        trace.end()  # connected (no router lies beyond), or a router with no route, or a reset
    _close_probe(trace)


def _close_probe(trace: _StreamTrace) -> None:
    if trace.probe is not None:
        reset_close(trace.probe)
        trace.probe = None
