"""Who may take part in a pair test: the per-test secret the controller gives both ends, and the
handshake through which each end proves it knows that secret before the other says anything.

The controller makes one random secret per pair test (at least 128 bits, hex) and hands it to
the server and the client over their SSH sessions; it never travels on the data network and
never appears in an event or record. Every message that opens a connection carries an HMAC-SHA256
proof made with it:

  server, on each connection:   {"protocol", "backend", "nonce": sn, "proof": H("server-greeting", backend, sn)}
  client, once that is checked: {"protocol", "backend", "nonce": cn, "params": {...},
                                 "proof": H("client-hello", backend, sn, cn, params)}
  server, once that is checked: {"accepted": true, "proof": H("server-session", backend, sn, cn)}

A client says nothing to a server that cannot prove the secret (so a wrong address or a forged
port never receives even a hello), and accepts the session only with a proof bound to its own
fresh nonce (a greeting replayed by someone else is worthless). A server drops every connection
without a valid hello: a stranger never takes the session and learns nothing about the node.
Data connections open with ``<index> H("stream", sn, cn, index)``: each carries the secret too.

Nor can anyone without the secret keep the real client out (probes/net/gate.py): the server reads
the first line of every new connection at once (a hello; a data connection's greeting), each whole
within HANDSHAKE_S of its accept (one deadline, however slowly its bytes come); at most MAX_PENDING
wait at once, and a newcomer past that crowds out the one that has waited longest, so strangers
that came first, silent or trickling, never fill the door; the proved client's data connections
wait apart from strangers'. A client whose proved server closed its connection before accepting
it (crowded out) connects again (open_session).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import re
import secrets
import select
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..context import Deadline
from .common import PROTOCOL, STALL_S, Channel, connect, parse_message
from .gate import Gate
from .messages import ProtocolError, expect_str

# Hex digits of a secret (the controller's: 64; at least 128 bits) and of a nonce (128 bits).
_TOKEN = re.compile(r"[0-9a-f]{32,128}")
_NONCE = re.compile(r"[0-9a-f]{32}")
NONCE_BYTES = 16
# Seconds a new connection has, from its accept, to send its whole hello (or a data connection its
# whole greeting) before it is dropped: one deadline for the line, not one per read.
HANDSHAKE_S = 5.0
# Connections that may wait for their first line at once (per set: strangers, the proved client's
# data connections); a newcomer past that crowds out the one that has waited longest.
MAX_PENDING = 64
# Bytes of a client's hello, newline included (its params are a few numbers).
HELLO_BYTES = 1 << 16
# A client crowded out of its handshake connects again for this many seconds, this far apart.
RETRY_S = STALL_S
RETRY_PAUSE_S = 0.05
# Bytes of the first line of a data connection (index, space, 64 hex digits, newline).
MAX_STREAM_GREETING = 96
# What --token - reads from stdin: one line, within this many seconds.
TOKEN_LINE_BYTES = 256
TOKEN_WAIT_S = 10.0


class Dropped(ConnectionResetError):
    """The server, having proved the secret, closed the connection before it accepted this client:
    crowded out by strangers, or too slow for HANDSHAKE_S. A new connection may pass."""


class SecretError(ValueError):
    """The pair secret given is missing or malformed; the message says what was expected."""


@dataclass(frozen=True)
class PairSecret:
    """The per-test secret shared by the controller and both ends (never shown: ``repr`` hides it)."""

    key: bytes = field(repr=False)

    @classmethod
    def from_hex(cls, text: str) -> PairSecret:
        """The secret of ``text`` (32 to 128 lowercase hex digits). Raises SecretError."""
        if not _TOKEN.fullmatch(text):
            raise SecretError("the pair secret must be 32 to 128 lowercase hex digits")
        return cls(bytes.fromhex(text))

    def proof(self, label: str, *parts: object) -> str:
        """HMAC-SHA256 of ``label`` and ``parts`` (each as text, separated by US), in hex."""
        message = "\x1f".join([label, *(str(part) for part in parts)]).encode()
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()

    def verify(self, proof: object, label: str, *parts: object) -> bool:
        """Whether ``proof`` is this secret's proof of ``label`` and ``parts`` (constant time)."""
        return isinstance(proof, str) and hmac.compare_digest(proof.encode(), self.proof(label, *parts).encode())


def read_secret(argument: str, stdin: Any = None, wait_s: float = TOKEN_WAIT_S) -> PairSecret:
    """The secret of ``--token``: its hex digits, or ``-`` for the first line of stdin (read
    within ``wait_s`` seconds, at most TOKEN_LINE_BYTES). Raises SecretError."""
    if argument != "-":
        return PairSecret.from_hex(argument)
    stream = stdin if stdin is not None else sys.stdin.buffer
    line = _read_line(stream, wait_s)
    return PairSecret.from_hex(line.decode(errors="replace").strip())


def _read_line(stream: Any, wait_s: float) -> bytes:
    descriptor = stream.fileno()
    deadline = Deadline.after(wait_s)
    line = b""
    while not line.endswith(b"\n") and len(line) < TOKEN_LINE_BYTES:
        ready, _, _ = select.select([descriptor], [], [], deadline.left_s())
        if not ready:
            raise SecretError(f"no pair secret on stdin within {wait_s:g} s")
        # One byte at a time: what follows the secret's line is the lifeline's, not ours.
        piece = os.read(descriptor, 1)
        if not piece:
            break
        line += piece
    return line


def new_nonce() -> str:
    return secrets.token_hex(NONCE_BYTES)


def canonical(params: Mapping[str, Any]) -> str:
    """One spelling of ``params`` for a proof: sorted keys, no spaces, strict JSON."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class Handshake:
    """A session both ends have proved: the server's and the client's nonce, the client's
    parameters (server side; a mapping the backend still validates) and the client's address."""

    server_nonce: str
    client_nonce: str
    params: Mapping[str, Any] = field(default_factory=dict)
    client: str = ""

    def stream_greeting(self, secret: PairSecret, index: int) -> bytes:
        """The first line of data connection ``index``."""
        return f"{index} {secret.proof('stream', self.server_nonce, self.client_nonce, index)}\n".encode()

    def stream_index(self, secret: PairSecret, line: bytes, count: int) -> int | None:
        """The index a data connection's first line proves (0 <= index < count), else None."""
        words = line.decode(errors="replace").split()
        if len(words) != 2 or not words[0].isdigit() or int(words[0]) >= count:
            return None
        index = int(words[0])
        return index if secret.verify(words[1], "stream", self.server_nonce, self.client_nonce, index) else None


def expect_nonce(message: Mapping[str, Any], key: str = "nonce") -> str:
    nonce = expect_str(message, key, limit=64)
    if not _NONCE.fullmatch(nonce):
        raise ProtocolError(f"{key!r} must be {2 * NONCE_BYTES} hex digits")
    return nonce


def _expect_protocol(message: Mapping[str, Any], backend: str) -> None:
    if message.get("protocol") != PROTOCOL or message.get("backend") != backend:
        raise ProtocolError(f"not a {PROTOCOL} {backend} peer")


# --- server side -------------------------------------------------------------------------------

def _greeting(backend: str, secret: PairSecret) -> tuple[bytes, str]:
    """The server's first line on a new connection, and the nonce it carries."""
    server_nonce = new_nonce()
    line = json.dumps({"protocol": PROTOCOL, "backend": backend, "nonce": server_nonce,
                       "proof": secret.proof("server-greeting", backend, server_nonce)}, allow_nan=False)
    return line.encode() + b"\n", server_nonce


def check_hello(line: bytes, backend: str, secret: PairSecret, server_nonce: str) -> Handshake:
    """The proved handshake of a client's hello ``line`` (newline included) that answered the
    greeting with ``server_nonce``. Raises ProtocolError (a stranger, or a peer without the secret)."""
    hello = parse_message(line)
    _expect_protocol(hello, backend)
    client_nonce = expect_nonce(hello)
    params = hello.get("params")
    if not isinstance(params, dict):
        raise ProtocolError("the hello carries no 'params' object")
    if not secret.verify(hello.get("proof"), "client-hello", backend, server_nonce, client_nonce, canonical(params)):
        raise ProtocolError("the hello does not prove the pair secret")
    return Handshake(server_nonce, client_nonce, params)


def accept_client(listener: socket.socket, backend: str, secret: PairSecret, deadline: Deadline,
                  session: Deadline | None = None) -> tuple[Channel, Handshake]:
    """The first connection on ``listener`` whose client proves ``secret``: its channel (bound by
    ``session``, the test's deadline; ``deadline`` when None) and handshake, whose ``client`` is its
    address. Every other connection is dropped; the hellos of all are read at once, each within
    HANDSHAKE_S of its connection, at most MAX_PENDING waiting (a newcomer crowds out the one that
    has waited longest: probes/net/gate.py). Raises TimeoutError at ``deadline``."""
    with Gate(listener, HELLO_BYTES, HANDSHAKE_S, MAX_PENDING, greet=lambda: _greeting(backend, secret),
              plain=plain_address) as gate:
        while True:
            arrival = gate.next_line(deadline, "no client proved the pair secret in time")
            channel = Channel(arrival.sock, session or deadline)
            try:
                handshake = check_hello(arrival.line, backend, secret, arrival.context)
                channel.send({"accepted": True, "proof": secret.proof("server-session", backend,
                                                                      handshake.server_nonce, handshake.client_nonce)},
                             timeout_s=HANDSHAKE_S)
            except (OSError, ProtocolError) as error:
                gate.notes.say(f"dropped a connection from {arrival.address}: {error or type(error).__name__}")
                channel.close()
                continue
            return channel, replace(handshake, client=arrival.address)


# --- client side -------------------------------------------------------------------------------

def client_handshake(channel: Channel, backend: str, secret: PairSecret, params: Mapping[str, Any],
                     where: str) -> Handshake:
    """The client's half (see the module docstring): nothing is sent until the server at
    ``where`` proved the secret. Raises ProtocolError, TimeoutError, OSError."""
    greeting = channel.receive(timeout_s=STALL_S)
    try:
        _expect_protocol(greeting, backend)
        server_nonce = expect_nonce(greeting)
    except ProtocolError as error:
        raise ProtocolError(f"{where} is not the pair server of this test ({error})") from None
    if not secret.verify(greeting.get("proof"), "server-greeting", backend, server_nonce):
        raise ProtocolError(f"{where} does not prove the pair secret: not the server this test started")
    client_nonce = new_nonce()
    try:
        channel.send({"protocol": PROTOCOL, "backend": backend, "nonce": client_nonce, "params": dict(params),
                      "proof": secret.proof("client-hello", backend, server_nonce, client_nonce, canonical(params))})
        accepted = channel.receive(timeout_s=STALL_S)
    except ConnectionError as error:
        raise Dropped(f"{where} closed the connection before it accepted this client ({error})") from error
    if accepted.get("accepted") is not True or not secret.verify(accepted.get("proof"), "server-session", backend,
                                                                  server_nonce, client_nonce):
        raise ProtocolError(f"{where} did not accept this client with a proof of the pair secret")
    return Handshake(server_nonce, client_nonce, dict(params))


def open_session(host: str, port: int, backend: str, secret: PairSecret, params: Mapping[str, Any], where: str,
                 deadline: Deadline, retry_s: float = RETRY_S) -> tuple[Channel, Handshake]:
    """A control channel to the server at ``host``:``port`` and its handshake (client_handshake),
    on a new connection again while the server, having proved the secret, dropped this one before
    accepting it (a crowd of strangers may have pushed it out), for ``retry_s`` seconds at most.
    Raises ProtocolError, TimeoutError, OSError."""
    retry_until = deadline.sooner(retry_s)
    while True:
        channel = Channel(connect(host, port, deadline), deadline)
        opened = False  # the handshake done: the channel is the caller's; else (any way out) it is closed
        try:
            session = channel, client_handshake(channel, backend, secret, params, where)
            opened = True
            return session
        except Dropped as error:
            if retry_until.expired():
                raise
            print(f"net-client: {error}; connecting again", file=sys.stderr)
        finally:
            if not opened:
                channel.close()
        time.sleep(RETRY_PAUSE_S)


def plain_address(address: str) -> str:
    """``::ffff:10.0.0.2`` (an IPv4 peer on a dual-stack socket) -> ``10.0.0.2``; others unchanged."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    mapped = getattr(parsed, "ipv4_mapped", None)
    return str(mapped) if mapped is not None else address
