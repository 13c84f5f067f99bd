"""The pair protocol's events as the controller reads them from a node: one schema per event
(``listening``, ``done``, ``interface``, ``net_info``), checked at the boundary.

A node is not trusted: an event line is strict JSON (no NaN or Infinity, no number beyond a
float), at most ``MAX_EVENT_BYTES`` long, an object whose ``event`` names it, and every field the
controller reads has its type and range checked. What fails is a ``PairProtocolError`` naming
the field and what was expected (the caller makes it that pair's or host's error, never a
figure); a node's own words (a reason, a host name) come back free of control characters and
cut to ``MAX_TEXT`` characters. The node side of the protocol is probes/net.py (its
``PROTOCOL`` must equal :data:`PAIR_PROTOCOL`; a test checks it).
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .groups import BACKENDS

PAIR_PROTOCOL = "gpudiag-net/2"
# Bytes of one event line (a listening line names its rails: 8 GPUs of dict fields is ~2 KiB).
MAX_EVENT_BYTES = 64 * 1024
# Characters kept of a node's text (reasons, host names); addresses an interface may list.
MAX_TEXT = 300
MAX_ADDRESSES = 64
MAX_RAILS = 64
DONE_STATUSES = ("ok", "error", "skipped")
# Control characters (C0 but tab, DEL, C1) and the bidirectional overrides: never passed on.
_UNPRINTABLE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


class PairProtocolError(ValueError):
    """A node's pair-protocol line is not what it must be; the message says which field and why."""


@dataclass(frozen=True)
class Listening:
    """A pair server's first line: its ``backend``, the TCP ``port`` it listens on (1-65535) and
    the address it bound (``*``: every address)."""

    backend: str
    port: int
    bind: str


@dataclass(frozen=True)
class Done:
    """A pair server's last line: ``status`` (ok, error, skipped), its ``reason`` (plain text, or
    None) and ``cause`` (``bind``: it could not listen on the address it was given)."""

    status: str
    reason: str | None
    cause: str | None


@dataclass(frozen=True)
class InterfaceAddresses:
    """``net-info --interface NAME``'s answer: the interface and its addresses (IP literals)."""

    interface: str
    addresses: tuple[str, ...]


@dataclass(frozen=True)
class NetInfo:
    """``net-info``'s answer: the backend ``--backend auto`` picks there, why, and the rails."""

    auto_backend: str
    auto_reason: str
    rails: int


def parse_event(line: str | None) -> dict[str, Any]:
    """The event object of one line a node printed. Raises PairProtocolError."""
    if line is None:
        raise PairProtocolError("no line")
    if len(line.encode(errors="replace")) > MAX_EVENT_BYTES:
        raise PairProtocolError(f"a line longer than {MAX_EVENT_BYTES} bytes")
    try:
        value = json.loads(line, parse_constant=_refuse_constant, parse_float=_finite_float)
    except (ValueError, RecursionError):
        raise PairProtocolError(f"not a JSON line: {plain_text(line, 120)!r}") from None
    if not isinstance(value, dict):
        raise PairProtocolError(f"not a JSON object: {plain_text(line, 120)!r}")
    if not isinstance(value.get("event"), str):
        raise PairProtocolError("no 'event' name")
    return value


def listening_event(event: Mapping[str, Any]) -> Listening:
    """The ``listening`` event's checked fields. Raises PairProtocolError."""
    _expect_event(event, "listening")
    if event.get("protocol") != PAIR_PROTOCOL:
        raise PairProtocolError(f"'protocol' must be {PAIR_PROTOCOL}, not {_shown(event.get('protocol'))}")
    backend = event.get("backend")
    if backend not in BACKENDS:
        raise PairProtocolError(f"'backend' must be one of {', '.join(BACKENDS)}, not {_shown(backend)}")
    port = event.get("port")
    if not _is_int(port) or not 1 <= port <= 65535:
        raise PairProtocolError(f"'port' must be an integer from 1 to 65535, not {_shown(port)}")
    bind = event.get("bind", "*")
    if not isinstance(bind, str) or (bind != "*" and not _is_ip(bind)):
        raise PairProtocolError(f"'bind' must be an IP address or *, not {_shown(bind)}")
    return Listening(str(backend), int(port), bind)


def done_event(event: Mapping[str, Any]) -> Done:
    """The ``done`` event's checked fields. Raises PairProtocolError."""
    _expect_event(event, "done")
    status = event.get("status")
    if status not in DONE_STATUSES:
        raise PairProtocolError(f"'status' must be one of {', '.join(DONE_STATUSES)}, not {_shown(status)}")
    reason, cause = event.get("reason"), event.get("cause")
    if reason is not None and not isinstance(reason, str):
        raise PairProtocolError(f"'reason' must be text, not {_shown(reason)}")
    if cause is not None and cause != "bind":
        raise PairProtocolError(f"'cause' must be bind or absent, not {_shown(cause)}")
    return Done(str(status), None if reason is None else plain_text(reason), cause)


def interface_event(event: Mapping[str, Any]) -> InterfaceAddresses:
    """The ``interface`` event's checked fields: every address an IP literal. Raises PairProtocolError."""
    _expect_event(event, "interface")
    name, addresses = event.get("interface"), event.get("addresses")
    if not isinstance(name, str) or not 0 < len(name) <= 64:
        raise PairProtocolError(f"'interface' must be an interface name, not {_shown(name)}")
    if not isinstance(addresses, list) or len(addresses) > MAX_ADDRESSES:
        raise PairProtocolError(f"'addresses' must be a list of at most {MAX_ADDRESSES} addresses")
    for address in addresses:
        if not isinstance(address, str) or not _is_ip(address):
            raise PairProtocolError(f"'addresses' holds {_shown(address)}, which is no IP address")
    return InterfaceAddresses(name, tuple(addresses))


def net_info_event(event: Mapping[str, Any]) -> NetInfo:
    """The ``net_info`` event's checked fields. Raises PairProtocolError."""
    _expect_event(event, "net_info")
    backend, reason, rails = event.get("auto_backend"), event.get("auto_reason"), event.get("rails")
    if backend not in BACKENDS:
        raise PairProtocolError(f"'auto_backend' must be one of {', '.join(BACKENDS)}, not {_shown(backend)}")
    if not isinstance(reason, str):
        raise PairProtocolError(f"'auto_reason' must be text, not {_shown(reason)}")
    if not isinstance(rails, list) or len(rails) > MAX_RAILS or not all(isinstance(rail, dict) for rail in rails):
        raise PairProtocolError(f"'rails' must be a list of at most {MAX_RAILS} objects")
    return NetInfo(str(backend), plain_text(reason), len(rails))


def plain_text(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` without control characters or bidirectional overrides (each a space), cut to
    ``limit`` characters (an ellipsis says so)."""
    cleaned = _UNPRINTABLE.sub(" ", text).strip()
    return cleaned if len(cleaned) <= limit else cleaned[:limit - 1] + "…"


def _expect_event(event: Mapping[str, Any], name: str) -> None:
    if event.get("event") != name:
        raise PairProtocolError(f"expected a {name!r} event, not {_shown(event.get('event'))}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _shown(value: object) -> str:
    if isinstance(value, str):
        return repr(plain_text(value, 40))
    if isinstance(value, bool | int | float) or value is None:
        return json.dumps(value)[:40]
    return f"a {type(value).__name__}"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is beyond a float's range")
    return value
