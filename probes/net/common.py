"""Pairwise network probes: one pair server and one pair client per test, driven over SSH.

    python -m probes net-server --backend tcp|nccl|perftest|auto --token HEX|- [--bind ADDR]
                                [--deadline S] [--accept-window S] [--stdin-lifeline]
    python -m probes net-client --backend tcp|nccl|perftest --token HEX|- --connect HOST:PORT
                                [--duration S] [--streams N] [--stdin-lifeline]
                                [--direction both|client_to_server|server_to_client] [--trace-hops K]
    python -m probes net-info [--interface NAME]

The server binds an ephemeral port, prints ``{"event": "listening", "port": ...}`` as its first
line (or, when it cannot serve at all, only a ``done`` line saying why), serves exactly one
client, prints ``{"event": "done", "status": "ok"|"error"|"skipped", "reason": ...}`` and exits
— after its test or at its deadline, whichever comes first (exit 124 at the deadline, like
``timeout``), its own children ended with it. The client
prints one record (probes/records.py) per direction, and per rail where the backend has rails;
a pair that cannot connect, stalls or is reset gives ``error`` records with the reason, a
missing tool ``skipped`` ones. ``net-info`` prints what ``--backend auto`` would pick and the
node's rails. The test parameters (duration, streams, message size, rails) are the client's;
the server needs only its backend, address and deadline, so a controller starts the server,
reads its port, then starts the client on the other node.

Both ends get the test's secret (``--token``; ``-``: the first line of stdin) and prove it to
each other before anything else is said (probes/net/auth.py): a stranger never takes the
session. The server listens on ``--bind`` only (a name is resolved on the node; an address that
is not the node's own cannot be bound, and the server says so instead of listening); it waits
for its client ``--accept-window`` seconds at most. With ``--stdin-lifeline`` either end exits
(status 129, as at a hangup) as soon as its stdin reaches end of file: the controller that
started it over SSH is gone. Every message a peer sends is checked field by field; a wrong type
or value ends the test with an error, never with a figure.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from ..context import Deadline
from ..rates import transfer_gbps
from ..records import ERROR, Record, coefficient_of_variation, write_records
from ..runner import EXIT_DEADLINE
from .messages import ProtocolError, expect_str, strict_json

PROBE = "net"
METRIC = "bandwidth"
UNIT = "Gbit/s"
PROTOCOL = "gpudiag-net/2"
COMMANDS = ("net-server", "net-client", "net-info")
BACKENDS = ("tcp", "nccl", "perftest")
DIRECTIONS = ("client_to_server", "server_to_client")
# A silent peer or socket (no byte, no answer) for this long is a failure, not a slow link.
STALL_S = 10.0
CONNECT_TIMEOUT_S = 10.0
DEADLINE_GRACE_S = 2.0
MAX_MESSAGE_LINE = 1 << 20
# What a peer may ask for: streams (or QPs) and timed seconds per direction.
MAX_STREAMS = 256
MAX_DURATION_S = 3600.0
# Hops a tcp client may trace per stream (--trace-hops): TTL 2 .. 17.
MAX_TRACE_HOPS = 16
# Exit status when the controller is gone (stdin at end of file): as a shell's at a hangup.
EXIT_ORPHANED = 129
# Connections the kernel queues for a pair server's accept (a burst of strangers must not fill it:
# a SYN past it waits a second for its retry).
LISTEN_BACKLOG = 256
# Seconds a server waits for its client by default (the controller starts the client at once).
ACCEPT_WINDOW_S = 30.0
# nccl transfers are at least this large (bytes), so the figure is bandwidth, not latency.
NCCL_MIN_BYTES = 64 << 20


@dataclass(frozen=True)
class NetOptions:
    """The command line of ``net-server`` / ``net-client`` as the backends see it.

    ``host``/``port`` are the server to connect to (client only); ``duration_s`` the timed
    seconds per direction; ``streams`` parallel TCP streams or perftest QPs; ``rails`` the rails
    to test (None: all); ``hcas`` the RDMA devices rails may use (None: all); ``message_bytes``
    the size of one transfer (None: the backend's default); ``sysfs_root`` replaces /sys.
    ``token``: the pair secret's hex digits (never shown); ``accept_window_s``: seconds a server
    waits for its client; ``stdin_lifeline``: exit when stdin reaches end of file;
    ``trace_hops``: routers to find on each tcp stream's path before it sends (0: none).
    """

    role: str
    backend: str
    deadline_s: float = 60.0
    bind: str = ""
    token: str = field(default="", repr=False)
    accept_window_s: float = ACCEPT_WINDOW_S
    stdin_lifeline: bool = False
    host: str | None = None
    port: int | None = None
    duration_s: float = 2.0
    streams: int = 4
    trace_hops: int = 0
    directions: tuple[str, ...] = DIRECTIONS
    rails: tuple[int, ...] | None = None
    hcas: tuple[str, ...] | None = None
    allow_socket: bool = False
    message_bytes: int | None = None
    gid_index: int | None = None
    gpu_direct: bool = True
    host_memory: bool = False
    ib_write_bw: str | None = None
    sysfs_root: str = "/sys"

    @property
    def peer(self) -> str:
        """``HOST:PORT`` of the server as the client was told it (``[v6]:port`` for IPv6)."""
        return join_host_port(self.host or "", self.port or 0)


@dataclass(frozen=True)
class LinkParams:
    """What decides which link figures may be compared (the record's ``params``)."""

    backend: str
    direction: str
    streams: int
    duration_s: float
    rail: int | None = None
    hca: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> str:
        return "host" if self.rail is None else f"rail:{self.rail}"

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "direction": self.direction, "streams": self.streams,
                "duration_s": self.duration_s, "rail": self.rail, "hca": self.hca, **self.extra}


def bandwidth_record(params: LinkParams, bytes_moved: int, elapsed_s: float, interval_gbps: Sequence[float],
                     details: Mapping[str, Any], gpu_uuid: str | None = None) -> Record:
    """An ``ok`` record: ``bytes_moved`` over ``elapsed_s`` wall seconds in Gbit/s, the
    interval figures as its samples (their CV attached)."""
    gbps = bits_gbps(bytes_moved, elapsed_s)
    samples = list(interval_gbps) or [gbps]
    return Record(probe=PROBE, device=params.device, metric=METRIC, value=round(gbps, 4), unit=UNIT,
                  gpu_uuid=gpu_uuid, samples=len(samples), cv=round(coefficient_of_variation(samples), 5),
                  params=params.to_dict(),
                  details={"bytes": bytes_moved, "elapsed_s": round(elapsed_s, 6), **details})


def figure_record(params: LinkParams, gbps: float, details: Mapping[str, Any], gpu_uuid: str | None = None) -> Record:
    """An ``ok`` record of one figure a tool reported (ib_write_bw's average): one sample."""
    return Record(probe=PROBE, device=params.device, metric=METRIC, value=round(gbps, 4), unit=UNIT,
                  gpu_uuid=gpu_uuid, samples=1, params=params.to_dict(), details=dict(details))


def link_failure(params: LinkParams, reason: str, details: Mapping[str, Any] | None = None,
                 status: str = ERROR, gpu_uuid: str | None = None) -> Record:
    """An ``error`` (or ``skipped``) record for one direction of one link, with the reason."""
    return Record(probe=PROBE, device=params.device, metric=METRIC, value=None, unit=None, status=status,
                  reason=reason, gpu_uuid=gpu_uuid, params=params.to_dict(), details=dict(details or {}))


def bits_gbps(bytes_moved: int, seconds: float) -> float:
    """Gbit/s for ``bytes_moved`` bytes in ``seconds`` (decimal: 1 Gbit = 1e9 bits)."""
    return 8 * transfer_gbps(bytes_moved, seconds) if seconds > 0 else 0.0


class Output:
    """Writes JSON lines (events and records) to one stream, whole lines only, from any thread."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def event(self, name: str, **fields: Any) -> None:
        with self._lock:
            self._stream.write(json.dumps({"event": name, **fields}, allow_nan=False) + "\n")
            self._stream.flush()

    def record(self, record: Record) -> None:
        with self._lock:
            write_records([record], self._stream)


def start_watchdog(deadline: Deadline, on_expiry: Callable[[], None], grace_s: float = DEADLINE_GRACE_S) -> None:
    """End the process (status 124) when ``deadline`` plus ``grace_s`` passes, after
    ``on_expiry`` has written what is missing. A backstop: every wait also has its own timeout."""

    def watch() -> None:
        time.sleep(deadline.left_s() + grace_s)
        on_expiry()
        os._exit(EXIT_DEADLINE)  # a thread stuck in a socket or NCCL call cannot be unwound

    threading.Thread(target=watch, name="net-watchdog", daemon=True).start()


# --- addresses and the control channel ---------------------------------------------------------

def split_host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` -> (host, port). Raises ValueError."""
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host, int(port)


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def open_listener(bind: str, backlog: int = LISTEN_BACKLOG) -> socket.socket:
    """A listening TCP socket on an ephemeral port of ``bind`` (see :func:`listen_address`;
    "" = every IPv4 and IPv6 address where the system allows it). Raises OSError: among others
    when ``bind`` is not an address of this node (EADDRNOTAVAIL)."""
    address = listen_address(bind)
    if address:
        family, kind, proto, _, target = socket.getaddrinfo(address, 0, type=socket.SOCK_STREAM,
                                                            flags=socket.AI_NUMERICHOST)[0]
        listener = socket.socket(family, kind, proto)
        try:
            listener.bind(target)
        except OSError:
            listener.close()
            raise
    elif socket.has_dualstack_ipv6():
        listener = socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True, backlog=backlog)
    else:
        listener = socket.create_server(("", 0), backlog=backlog)
    listener.listen(backlog)
    return listener


def bound_address(listener: socket.socket) -> str:
    """The address ``listener`` is bound to, ``*`` for every address."""
    address = str(listener.getsockname()[0])
    return "*" if address in ("0.0.0.0", "::") else address


def no_client_reason(options: NetOptions, deadline: Deadline) -> str:
    """Why a server ends without a client: its accept window or its deadline passed first."""
    if deadline.expired() or options.accept_window_s >= options.deadline_s:
        return f"no client came within the server's deadline of {options.deadline_s:g} s"
    return f"no client came within the server's accept window of {options.accept_window_s:g} s"


def listen_address(bind: str) -> str:
    """The address to listen on for ``bind``: an IP address as given; a name resolved by this
    node (its first address that is not loopback); "" (every address) for "", or for a name this
    node resolves to loopback only (its own name in Debian's /etc/hosts), which says nothing
    about the address its peers use. Raises OSError when a name does not resolve."""
    if not bind:
        return ""
    try:
        ipaddress.ip_address(bind)
        return bind
    except ValueError:
        pass
    infos = socket.getaddrinfo(bind, 0, type=socket.SOCK_STREAM)
    for *_, target in infos:
        if not ipaddress.ip_address(str(target[0]).split("%")[0]).is_loopback:
            return str(target[0])
    print(f"net-server: {bind} resolves to loopback on this node: listening on every address", file=sys.stderr)
    return ""


def connect(host: str, port: int, deadline: Deadline, timeout_s: float = CONNECT_TIMEOUT_S) -> socket.socket:
    """A connected TCP socket with Nagle off. Raises OSError (refused, unreachable, timeout)."""
    sock = socket.create_connection((host, port), timeout=bounded(timeout_s, deadline))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def bounded(seconds: float, deadline: Deadline) -> float:
    """``seconds``, but never past ``deadline`` (and never zero, which would mean non-blocking)."""
    return max(0.05, min(seconds, deadline.left_s()))


def start_lifeline(on_lost: Callable[[], None], stdin_fd: int = 0) -> bool:
    """Exit (status 129) once stdin reaches end of file — the controller that started this
    process over SSH, and holds its stdin open, is gone — after ``on_lost`` has ended what this
    process started. Only a pipe, socket or terminal is a lifeline (an end of file of /dev/null
    says nothing): returns whether one was armed."""
    try:
        mode = os.fstat(stdin_fd).st_mode
    except OSError:
        return False
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(stdin_fd)):
        print("net: --stdin-lifeline: stdin is no pipe or socket; no lifeline", file=sys.stderr)
        return False

    def watch() -> None:
        try:
            while os.read(stdin_fd, 65536):
                pass  # the controller sends nothing; anything it does is no end of file
        except OSError:
            pass
        try:
            on_lost()
        finally:
            os._exit(EXIT_ORPHANED)

    threading.Thread(target=watch, name="net-lifeline", daemon=True).start()
    return True


class Channel:
    """JSON messages, one per line, over a TCP socket; every read and write has a timeout."""

    def __init__(self, sock: socket.socket, deadline: Deadline) -> None:
        self.sock = sock
        self._deadline = deadline
        self._reader = sock.makefile("rb")

    def send(self, message: Mapping[str, Any], timeout_s: float = STALL_S) -> None:
        self.sock.settimeout(bounded(timeout_s, self._deadline))
        self.sock.sendall(json.dumps(message, allow_nan=False).encode() + b"\n")

    def receive(self, timeout_s: float = STALL_S) -> dict[str, Any]:
        """The next message. Raises TimeoutError, ConnectionError (the peer closed) or ProtocolError."""
        self.sock.settimeout(bounded(timeout_s, self._deadline))
        line = self._reader.readline(MAX_MESSAGE_LINE)
        if not line:
            raise ConnectionResetError("the peer closed the control connection")
        return parse_message(line)

    def close(self) -> None:
        self._reader.close()
        self.sock.close()


def parse_message(line: bytes, limit: int = MAX_MESSAGE_LINE) -> dict[str, Any]:
    """The message of one whole line (its newline included). Raises ProtocolError: cut off or
    longer than ``limit``, no JSON object, or the peer's ``error``."""
    if not line.endswith(b"\n"):
        raise ProtocolError(f"a message longer than {limit} bytes, or cut off")
    message = strict_json(line)
    if not isinstance(message, dict):
        raise ProtocolError(f"not a JSON object: {line[:80]!r}")
    if "error" in message:
        raise ProtocolError(f"the peer reported: {expect_str(message, 'error')}")
    return message


def describe_failure(error: BaseException, where: str) -> str:
    """A reason for an error record that names the cause and the peer."""
    if isinstance(error, ConnectionRefusedError):
        return f"connection refused by {where} (nothing listening there)"
    if isinstance(error, TimeoutError):
        return f"timed out talking to {where}: {error or 'no answer'}"
    if isinstance(error, ConnectionResetError):
        return f"connection to {where} reset: {error}"
    if isinstance(error, BrokenPipeError):
        return f"connection to {where} broken (the peer went away)"
    if isinstance(error, socket.gaierror):
        return f"cannot resolve {where}: {error.strerror or error}"
    if isinstance(error, OSError):
        return f"network error with {where}: {error.strerror or error}"
    return f"{where}: {error}"


def _is_ipv6(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).version == 6
    except ValueError:
        return False


# --- --backend auto ----------------------------------------------------------------------------

@dataclass(frozen=True)
class NetCapabilities:
    """What this node can run: ``ib_write_bw`` (its path, None when missing), RDMA devices in
    sysfs, CUDA devices torch sees, and whether torch has NCCL."""

    ib_write_bw: str | None
    rdma_devices: tuple[str, ...]
    cuda_devices: int
    nccl: bool


def choose_backend(capabilities: NetCapabilities, host_memory: bool = False) -> tuple[str, str]:
    """(backend, why): perftest when ``ib_write_bw`` and RDMA devices exist, else nccl when
    CUDA and NCCL exist (never with ``host_memory``: a paused job holds the GPUs), else tcp."""
    if capabilities.ib_write_bw and capabilities.rdma_devices:
        return "perftest", f"ib_write_bw and {len(capabilities.rdma_devices)} RDMA device(s)"
    if host_memory:
        return "tcp", "host memory only (--host-memory) and no perftest with RDMA devices"
    if capabilities.cuda_devices > 0 and capabilities.nccl:
        missing = "no ib_write_bw" if not capabilities.ib_write_bw else "no RDMA device"
        return "nccl", f"{capabilities.cuda_devices} CUDA device(s) and NCCL; {missing}"
    return "tcp", "neither perftest with RDMA devices nor CUDA with NCCL"


def detect_capabilities(sysfs_root: str = "/sys", ib_write_bw: str | None = None,
                        count_cuda: bool = True) -> NetCapabilities:
    """This node's :class:`NetCapabilities` (imports torch only to count CUDA devices; not at all
    without ``count_cuda``, which then reads 0 devices)."""
    from ..devices import DeviceUnavailable, import_torch
    from ..topology import list_ib_ports

    cuda, nccl = 0, False
    try:
        if count_cuda:
            torch = import_torch()
            cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
            nccl = bool(torch.distributed.is_available() and torch.distributed.is_nccl_available())
    except DeviceUnavailable:
        pass
    hcas = tuple(dict.fromkeys(port.hca for port in list_ib_ports(sysfs_root)))
    return NetCapabilities(ib_write_bw or shutil.which("ib_write_bw"), hcas, cuda, nccl)
