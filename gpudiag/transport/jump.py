"""ProxyJump: the path of jump hosts to a node, resolved hop by hop as ssh does, and a small pool of
shared connections to each jump host.

For ``ProxyJump a,b`` ssh starts ``ssh -J a -W host:port b``: the last jump host is reached through the
ones before it, which replace its own ProxyJump and ProxyCommand, while the first is reached as its own
configuration says, through its own ProxyJump or ProxyCommand if it has one. ``route_to`` follows
that to the end: every hop is resolved with ``ssh -G`` (``sshconfig.resolve_jump_host``), so a jump host
whose block says ``ProxyJump j1`` is reached through ``j1`` even when the node's block never names
``j1``. Each ProxyJump entry is read as ssh reads it (``split_proxy_jump``, ``parse_jump_host``), and its
host and user names are checked as OpenSSH 9.6+ checks ``-J``'s (``hosts.host_name_problem``): every entry of
a value before any hop is resolved, since a hop's name reaches ``ssh -G`` and its ProxyCommand.
"""

from __future__ import annotations

import itertools
import socket
import threading
from collections.abc import Callable, Sequence
from urllib.parse import unquote

import paramiko

from ..errors import InputError
from ..hosts import FIX_HOST_NAME, FIX_USER_NAME, HostSpec, host_name_problem, user_name_problem
from . import TransportError, Unreachable
from .proxy import ProxyCommandSocket
from .sshconfig import ProxySettingError, ResolvedHost

# A path longer than this is a loop in the ssh config (j1 jumps through j2, which jumps through j1).
MAX_JUMP_HOPS = 8
FORWARD_TIMEOUT_S = 15.0

Sock = socket.socket | paramiko.Channel | ProxyCommandSocket
JumpResolver = Callable[[HostSpec, str | None], ResolvedHost]


class HopResolver:
    """Jump hosts resolved once per sweep, however many nodes lie behind them.

    ``resolve(hop, via)`` is ``sshconfig.resolve_jump_host`` with the sweep's options: ``via`` is the
    rest of a ``ProxyJump`` chain in front of ``hop``, or None for the hop's own configuration.
    """

    def __init__(self, resolve: JumpResolver) -> None:
        self._resolve = resolve
        self._lock = threading.Lock()
        self._resolved: dict[tuple[HostSpec, str | None], ResolvedHost] = {}

    def __call__(self, hop: HostSpec, via: str | None) -> ResolvedHost:
        """The hop's settings. Raises InputError as ``resolve_jump_host`` does."""
        key = (hop, via)
        with self._lock:
            found = self._resolved.get(key)
        if found is None:
            found = self._resolve(hop, via)  # outside the lock: ssh -G takes milliseconds
            with self._lock:
                self._resolved[key] = found
        return found


def route_to(host: ResolvedHost, resolve: JumpResolver) -> tuple[ResolvedHost, ...]:
    """The hosts a connection to ``host`` passes through, the first first and ``host`` last (just
    ``(host,)`` without ProxyJump). The first is reached by TCP or its own ProxyCommand, each next one
    through a channel forwarded by the one before it.

    Raises:
        Unreachable: a ProxyJump value cannot be used, a jump host cannot be resolved, or the path is
            longer than ``MAX_JUMP_HOPS`` (a loop); the message names the host, the value and the fix.
    """
    path = [host]
    while (jump := path[-1].proxy_jump) is not None:
        if len(path) > MAX_JUMP_HOPS:
            chain = " → ".join(hop.label for hop in reversed(path))
            raise Unreachable(f"{host.label}: the ProxyJump path is more than {MAX_JUMP_HOPS} jump hosts long "
                              f"({chain} → ...); fix: remove the loop between these hosts' ProxyJump lines")
        path.append(_previous_hop(host, path[-1], jump, resolve))
    return tuple(reversed(path))


def _previous_hop(host: ResolvedHost, current: ResolvedHost, jump: str, resolve: JumpResolver) -> ResolvedHost:
    """The jump host right in front of ``current``: the last entry of its ProxyJump, reached
    through the entries before it."""
    where = host.label if current is host else f"{host.label} (jump host {current.label})"
    try:
        entries = split_proxy_jump(jump)
        hop = [parse_jump_host(entry) for entry in entries][-1]  # all of them: each reaches ssh -G in turn
    except ProxySettingError as error:
        raise Unreachable(f"{where}: {error}") from error
    try:
        return resolve(hop, ",".join(entries[:-1]) or None)
    except InputError as error:
        raise Unreachable(f"{where}: jump host {entries[-1]}: {error}") from error


# --- ProxyJump entries, read as ssh reads them ---------------------------------------------------


def split_proxy_jump(value: str) -> list[str]:
    """A ProxyJump value's jump hosts, first first, each as written (``a, ssh://b:2222`` gives
    ``["a", "ssh://b:2222"]``). Raises ProxySettingError for an empty entry."""
    parts = [part.strip() for part in value.split(",")]
    if not all(parts):
        raise ProxySettingError(f"ProxyJump {value!r} has an empty jump host; fix: list jump hosts "
                                "separated by single commas")
    return parts


def parse_jump_host(text: str) -> HostSpec:
    """One ProxyJump entry as ssh reads it: ``[user@]host[:port]``, ``user@[v6addr%scope]:port`` or
    ``ssh://[user@]host[:port]``. Raises ProxySettingError naming the entry and the fix, also for a host or
    user name that OpenSSH 9.6+ refuses."""
    if text.startswith("ssh://"):  # as ssh: the scheme in lower case
        return _checked_hop(_parse_ssh_uri(text), text)
    user, at, rest = text.rpartition("@")
    if at and not user:
        raise ProxySettingError(f"ProxyJump host {text!r} has an empty user name; fix: write user@host")
    host, port = _split_host_port(rest, text)
    return _checked_hop(HostSpec(host=host, user=user or None, port=port), text)


def _checked_hop(hop: HostSpec, entry: str) -> HostSpec:
    """``hop`` when ssh would take its names; raises ProxySettingError naming the entry."""
    problem = host_name_problem(hop.host)
    if problem is not None:
        raise ProxySettingError(f"ProxyJump host {entry!r}: host name {hop.host!r} {problem}; fix: {FIX_HOST_NAME}")
    problem = user_name_problem(hop.user) if hop.user is not None else None
    if problem is not None:
        raise ProxySettingError(f"ProxyJump host {entry!r}: user name {hop.user!r} {problem}; fix: {FIX_USER_NAME}")
    return hop


def _parse_ssh_uri(text: str) -> HostSpec:
    authority, slash, path = text[len("ssh://"):].partition("/")
    if path:
        raise ProxySettingError(f"ProxyJump URI {text!r} has a path; fix: write ssh://[user@]host[:port]")
    user, at, rest = authority.rpartition("@")
    if ";" in user:
        raise ProxySettingError(f"ProxyJump URI {text!r} carries connection parameters, which ssh does not "
                                "support; fix: remove what follows ';' in the user part")
    if at and not user:
        raise ProxySettingError(f"ProxyJump URI {text!r} has an empty user name; fix: write ssh://user@host")
    host, port = _split_host_port(rest, text)
    return HostSpec(host=host, user=unquote(user) or None, port=port)


def _split_host_port(text: str, entry: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port`` as (host, port or None)."""
    if text.startswith("["):
        host, bracket, after = text[1:].partition("]")
        if not bracket or not host or (after and not after.startswith(":")):
            raise ProxySettingError(f"ProxyJump host {entry!r}: an IPv6 address is written [address]:port; "
                                    "fix: close the bracket and put the port after it")
        port_text = after[1:] if after else None
    else:
        if text.count(":") > 1:
            raise ProxySettingError(f"ProxyJump host {entry!r}: an IPv6 address needs brackets; "
                                    f"fix: write [{text}] or [{text.rpartition(':')[0]}]:port")
        host, colon, port_text_raw = text.partition(":")
        port_text = port_text_raw if colon else None
    if not host:
        raise ProxySettingError(f"ProxyJump host {entry!r} has no host name; fix: write [user@]host[:port]")
    if port_text is None:
        return host, None
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ProxySettingError(f"ProxyJump host {entry!r}: port {port_text!r} is not a number from 1 to 65535; "
                                "fix: correct the port")
    return host, int(port_text)


def open_forward(via: paramiko.Transport, hostname: str, port: int, label: str) -> paramiko.Channel:
    """A direct-tcpip channel from the jump host at the end of ``via`` to ``hostname:port``. Raises
    Unreachable when the jump host cannot open it."""
    try:
        return via.open_channel("direct-tcpip", (hostname, port), ("127.0.0.1", 0), timeout=FORWARD_TIMEOUT_S)
    except (paramiko.SSHException, OSError, EOFError) as error:
        raise Unreachable(f"{label}: the jump host could not reach {hostname}:{port}: {error}") from error


def close_transport(transport: paramiko.Transport) -> None:
    """Close ``transport`` and what it runs over: paramiko skips its socket when the connection has
    already died, which would leave a ProxyCommand running."""
    transport.close()
    transport.sock.close()


class BastionPool:
    """A few shared connections to each jump host (``size``, taken in turn); each carries many
    forwarded channels. A jump host reached along two different paths has connections for each."""

    def __init__(self, size: int, open_first: Callable[[ResolvedHost], Sock],
                 open_transport: Callable[[ResolvedHost, Sock], paramiko.Transport]) -> None:
        """``open_first`` connects to the first host of a path (TCP or its ProxyCommand);
        ``open_transport`` logs in over a connected socket. Both raise TransportError."""
        self._size = max(1, size)
        self._open_first = open_first
        self._open_transport = open_transport
        self._lock = threading.Lock()
        self._slots: dict[tuple[tuple[object, ...], ...], list[paramiko.Transport | None]] = {}
        self._slot_locks: dict[tuple[tuple[tuple[object, ...], ...], int], threading.Lock] = {}
        self._turns = itertools.count()

    def channel_to(self, path: Sequence[ResolvedHost]) -> paramiko.Channel:
        """A channel to the last host of ``path`` (from ``route_to``, at least one jump host long),
        forwarded by the jump hosts before it. Raises the TransportError of the hop that failed,
        its message saying which hop that was."""
        target = path[-1]
        transport: paramiko.Transport | None = None
        for depth, hop in enumerate(path[:-1]):
            try:
                transport = self._transport(path[: depth + 1], transport)
            except TransportError as error:
                raise type(error)(f"{target.label}: jump host {hop.label}: {error}") from error
        assert transport is not None
        return open_forward(transport, target.hostname, target.port, target.label)

    def _transport(self, prefix: Sequence[ResolvedHost], via: paramiko.Transport | None) -> paramiko.Transport:
        key = tuple((hop.user, hop.hostname, hop.port, hop.proxy_command) for hop in prefix)
        with self._lock:
            slots = self._slots.setdefault(key, [None] * self._size)
            index = next(self._turns) % self._size
            slot_lock = self._slot_locks.setdefault((key, index), threading.Lock())
        with slot_lock:
            current = slots[index]
            if current is None or not current.is_active():
                if current is not None:
                    close_transport(current)
                hop = prefix[-1]
                sock = self._open_first(hop) if via is None else open_forward(via, hop.hostname, hop.port, hop.label)
                slots[index] = current = self._open_transport(hop, sock)
            return current

    def close(self) -> None:
        with self._lock:
            transports = [t for slots in self._slots.values() for t in slots if t is not None]
            self._slots.clear()
        # Deepest first: a jump host's channel closes before the connection that carries it.
        for transport in reversed(transports):
            close_transport(transport)
