"""A host whose own line rate no pair reached: a pair runs at its slower end, so a 400 Gb/s NIC
whose every partner runs at 200 is measured at 200, and a NIC 15 % slow there fills a 200 Gb/s
line as well as a healthy one. Its rate was not measured, and that is never a pass.

Each pair test reports its two ends' own port rates (``LinkResult.end_rates_gbps``). A host whose
rate is above every rate its measured pairs ran at is *unreached* on that backend. Where another
host of the run reports that rate or more (``peers``), the confirm rounds pair them (the host is
a suspect to re-pair, and confirm_rounds puts partners at its rate first); one still unreached at
the end is an ``unchecked`` finding that says which rate was not measured and why.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from .groups import LinkResult


@dataclass(frozen=True)
class UnreachedRate:
    """``host``'s ``line_rate_gbps`` on ``backend`` (its own port's) above ``reached_gbps``, the
    highest rate any of its measured pairs ran at; ``peers``: the other hosts of the run whose
    own rate there is as high (sorted), that a pair with it would run at its rate."""

    host: str
    backend: str
    line_rate_gbps: float
    reached_gbps: float
    peers: tuple[str, ...]


def unreached_rates(results: Sequence[LinkResult]) -> tuple[UnreachedRate, ...]:
    """The hosts of ``results`` no measured pair reached the own line rate of, by host and backend.
    A host with no measured pair is left to its errors; an end that reported no rate, to the pair's."""
    own: dict[tuple[str, str], float] = {}
    reached: dict[tuple[str, str], float] = defaultdict(float)
    for result in results:
        for host in (result.a, result.b):
            rate = result.end_rate(host)
            if rate is not None:
                own[(host, result.backend)] = max(own.get((host, result.backend), 0.0), rate)
        if result.gbps is not None and result.line_rate_gbps is not None:
            for host in (result.a, result.b):
                reached[(host, result.backend)] = max(reached[(host, result.backend)], result.line_rate_gbps)
    found = []
    for (host, backend), rate in sorted(own.items()):
        ran = reached.get((host, backend))
        if ran and rate > ran:
            peers = tuple(sorted(other for (other, where), theirs in own.items()
                                 if where == backend and other != host and theirs >= rate))
            found.append(UnreachedRate(host, backend, rate, ran, peers))
    return tuple(found)
