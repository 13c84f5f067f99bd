"""Pairs that could not be measured: a ``LinkError`` names both ends and why; a
``HostLinkError`` names one host no partner could test (while each partner was measured with
others), or whose own end of the test failed. Part of gpudiag.links.attribution's outcome."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from ..findings import Kind
from ..words import plural
from .schedule import Pair

# An address:port in an error reason (IPv4, or a bracketed IPv6 address): the port is ephemeral.
_ENDPOINT_PORT = re.compile(r"(\d+\.\d+\.\d+\.\d+|\])(?::\d+)")


@dataclass(frozen=True)
class LinkError:
    """The pair ``a``–``b`` could not be measured on one backend and rail (no run gave a
    figure): ``reason`` is every distinct error, sorted and joined."""

    kind: ClassVar[Kind] = Kind.LINK_ERROR
    a: str
    b: str
    backend: str
    rail: int | None
    reason: str
    evidence: str


@dataclass(frozen=True)
class HostLinkError:
    """``host`` could not be tested with any of its ``partners`` (two or more), while each of them
    was measured with some other host: its own data port, address or firewall is the likely
    cause, not the pairs. ``reason``: every distinct error of its pairs, sorted and joined."""

    kind: ClassVar[Kind] = Kind.LINK_ERROR
    host: str
    partners: tuple[str, ...]
    reason: str
    evidence: str


def link_error(backend: str, rail: int | None, pair: Pair, reasons: set[str]) -> LinkError:
    reason = "; ".join(sorted(reasons))
    where = backend if rail is None else f"{backend} rail {rail}"
    return LinkError(pair[0], pair[1], backend, rail, reason,
                     f"{pair[0]} ↔ {pair[1]} could not be measured on {where}: {reason}")


def host_errors(errors: Sequence[LinkError],
                 measured: Iterable[tuple[str, int | None, Pair]]) -> tuple[HostLinkError, ...]:
    """The hosts with no measured pair at all, two or more partners tried, each partner measured
    with someone else (sorted by host)."""
    reached = {host for _, _, pair in measured for host in pair}
    partners: dict[str, set[str]] = defaultdict(set)
    reasons: dict[str, set[str]] = defaultdict(set)
    for error in errors:
        for host, partner in ((error.a, error.b), (error.b, error.a)):
            partners[host].add(partner)
            reasons[host].add(_ENDPOINT_PORT.sub(r"\1", error.reason))  # each test had its own port
    found = []
    for host in sorted(partners):
        others = tuple(sorted(partners[host]))
        if host in reached or len(others) < 2 or not all(partner in reached for partner in others):
            continue
        reason = "; ".join(sorted(reasons[host]))
        found.append(HostLinkError(host, others, reason, (
            f"{host} could not be tested with any of its {plural(len(others), 'partner')} ({listed(others)}), each of "
            f"which was measured with other hosts: its data port, address or firewall is the likely cause; "
            f"{reason}")))
    return tuple(found)


def own_errors(own: Mapping[str, Mapping[str, set[str]]]) -> tuple[HostLinkError, ...]:
    """A ``HostLinkError`` for each host whose own pair-test process failed (sorted by host)."""
    found = []
    for host in sorted(own):
        partners = tuple(sorted(own[host]))
        reason = "; ".join(sorted({_ENDPOINT_PORT.sub(r"\1", why) for whys in own[host].values() for why in whys}))
        found.append(HostLinkError(host, partners, reason, (
            f"{host}'s own end of the pair test failed with {listed(partners)}, before any link could be measured; "
            f"its partners are not in question: {reason}")))
    return tuple(found)


def merged(own: Sequence[HostLinkError], shared: Sequence[HostLinkError]) -> tuple[HostLinkError, ...]:
    """One error per host (sorted): its own failure where it has one, else the pairs' pattern."""
    mine = {error.host for error in own}
    return tuple(sorted([*own, *(error for error in shared if error.host not in mine)], key=lambda e: e.host))


# Evidence names this many items, then how many more (a node of a full round-robin has hundreds).
LISTED_PAIRS = 6


def listed(items: Iterable[str]) -> str:
    """``a, b, c`` — at most ``LISTED_PAIRS`` items, then ``and N more``."""
    every = list(items)
    shown = ", ".join(every[:LISTED_PAIRS])
    return shown if len(every) <= LISTED_PAIRS else f"{shown} and {len(every) - LISTED_PAIRS} more"
