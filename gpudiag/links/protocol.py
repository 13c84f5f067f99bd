"""The pair protocol's events as the controller reads them from a node: one schema per event
(``listening``, ``done``, ``interface``, ``net_info``), declared as data with the field kinds of
gpudiag.schema and checked at the boundary.

A node is not trusted: an event line is strict JSON (no NaN or Infinity, no number beyond a
float), at most ``MAX_EVENT_BYTES`` long, an object whose ``event`` names it, and every field the
controller reads has its type and range checked; strings come back cleaned of control characters
and escape sequences (gpudiag.schema.text) and bounded. What fails is a ``PairProtocolError``
naming the field and what was expected: the caller makes it that pair's or that host's error,
never a figure. The node side of the protocol is probes/net/common.py (its ``PROTOCOL`` must equal
:data:`PAIR_PROTOCOL`; a test checks it).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..schema.fields import FieldError, Kind, ListOf, Number, Shape, Text
from ..schema.jsonin import loads as strict_loads
from ..schema.text import one_line
from .groups import BACKENDS

PAIR_PROTOCOL = "gpudiag-net/2"
# Bytes of one event line (a listening line names its rails: 8 GPUs of dict fields is ~2 KiB).
MAX_EVENT_BYTES = 64 * 1024
# Characters kept of a node's text (reasons, host names); addresses an interface may list; rails.
MAX_TEXT = 300
MAX_ADDRESSES = 64
MAX_RAILS = 64
DONE_STATUSES = ("ok", "error", "skipped")
# A reason a server gives for not listening that says the address it was given is not its own.
BIND = "bind"


class PairProtocolError(ValueError):
    """A node's pair-protocol line is not what it must be; the message says which field and why."""


@dataclass(frozen=True)
class IpAddress:
    """A field kind: an IP address literal (a scope id allowed), or ``*`` where ``star``."""

    star: bool = False
    nullable: bool = False

    def check(self, value: Any, path: str) -> Any:
        if value is None and self.nullable:
            return None
        if isinstance(value, str) and ((self.star and value == "*") or _is_ip(value)):
            return value
        raise FieldError(path, self.describe(), value)

    def describe(self) -> str:
        return "an IP address" + (" or *" if self.star else "") + (" or null" if self.nullable else "")


def _event(name: str, fields: Mapping[str, Kind], required: tuple[str, ...]) -> Shape:
    return Shape({"event": Text(choices=(name,), nullable=False), **fields}, required=("event", *required))


# One schema per event; a field not named here is kept only as cleaned, bounded JSON, read by no one.
LISTENING = _event("listening", {
    "protocol": Text(choices=(PAIR_PROTOCOL,), nullable=False),
    "backend": Text(choices=BACKENDS, nullable=False),
    "port": Number(1, 65535, whole=True),
    "bind": IpAddress(star=True),
}, required=("protocol", "backend", "port"))
DONE = _event("done", {
    "status": Text(choices=DONE_STATUSES, nullable=False),
    "reason": Text(limit=MAX_TEXT),
    "cause": Text(choices=(BIND,)),
}, required=("status",))
INTERFACE = _event("interface", {
    "interface": Text(limit=64, nullable=False, empty=False),
    "addresses": ListOf(IpAddress(), max_items=MAX_ADDRESSES, nullable=False),
}, required=("interface", "addresses"))
NET_INFO = _event("net_info", {
    "auto_backend": Text(choices=BACKENDS, nullable=False),
    "auto_reason": Text(limit=MAX_TEXT, nullable=False),
    "rails": ListOf(Shape(), max_items=MAX_RAILS, nullable=False),
}, required=("auto_backend", "auto_reason", "rails"))


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
    """``net-info``'s answer: the backend ``--backend auto`` picks there, why, and its rails' count."""

    auto_backend: str
    auto_reason: str
    rails: int


def parse_event(line: str | None) -> dict[str, Any]:
    """The event object of one line a node printed (not yet checked against its schema).
    Raises PairProtocolError."""
    if line is None:
        raise PairProtocolError("no line")
    if len(line.encode(errors="replace")) > MAX_EVENT_BYTES:
        raise PairProtocolError(f"a line longer than {MAX_EVENT_BYTES} bytes")
    try:
        value = strict_loads(line)
    except (ValueError, RecursionError):
        raise PairProtocolError(f"not a JSON line: {plain_text(line, 120)!r}") from None
    if not isinstance(value, dict):
        raise PairProtocolError(f"not a JSON object: {plain_text(line, 120)!r}")
    if not isinstance(value.get("event"), str):
        raise PairProtocolError("no 'event' name")
    return value


def listening_event(event: Mapping[str, Any]) -> Listening:
    """The ``listening`` event, checked. Raises PairProtocolError."""
    fields = _checked(LISTENING, event)
    return Listening(fields["backend"], fields["port"], fields.get("bind") or "*")


def done_event(event: Mapping[str, Any]) -> Done:
    """The ``done`` event, checked. Raises PairProtocolError."""
    fields = _checked(DONE, event)
    reason = fields.get("reason")
    return Done(fields["status"], None if reason is None else plain_text(reason), fields.get("cause"))


def interface_event(event: Mapping[str, Any]) -> InterfaceAddresses:
    """The ``interface`` event, checked: every address an IP literal. Raises PairProtocolError."""
    fields = _checked(INTERFACE, event)
    return InterfaceAddresses(fields["interface"], tuple(fields["addresses"]))


def net_info_event(event: Mapping[str, Any]) -> NetInfo:
    """The ``net_info`` event, checked. Raises PairProtocolError."""
    fields = _checked(NET_INFO, event)
    return NetInfo(fields["auto_backend"], fields["auto_reason"], len(fields["rails"]))


def plain_text(text: str, limit: int = MAX_TEXT) -> str:
    """A node's ``text`` on one line: without control characters, escape sequences or
    bidirectional overrides, cut to ``limit`` characters (gpudiag.schema.text)."""
    return one_line(text, limit)


def _checked(schema: Shape, event: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return dict(schema.check(event, ""))
    except FieldError as error:
        raise PairProtocolError(str(error).replace("field ", "", 1)) from None


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True



