"""What the link attribution says (gpudiag.links.attribution): a slow NIC, a slow link, a group
below its line rate or baseline, and the whole attribution of a sweep's pair tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, cast

from ..findings import Kind
from .groups import BASELINE, FLEET, LINE_RATE, GroupReference, PairFigure
from .linkerrors import HostLinkError, LinkError
from .schedule import Suspects
from .unreached import UnreachedRate


@dataclass(frozen=True)
class NicSuspect:
    """``host``'s NIC on one backend and rail is slow: slow with every partner it was tested
    with (``pairs``, two or more). ``gbps``: the median of those pairs (in a group with a fleet
    level, the mean of those beyond its two lowest with known-good partners); ``reference_gbps`` and
    ``deficit_pct`` (percent) against the group's reference; ``robust_z`` (sigma, None without a
    fleet level); ``known_good``: the partners whose NIC a healthy pair has shown good.
    ``confirmed``: slow with ``confirm_partners`` known-good partners or more and, in a group with
    a fleet level, slow again with those beyond the pairs that made it a suspect (then ``gbps``
    and the deficit are theirs: ``_fresh_pairs``). ``cleared``: those further pairs are clearly
    fine: a dip, not a NIC (said, never a warning). ``reference_source``: ``baseline`` when the
    stored baseline judged it, else ``fleet`` (the fleet level, or the line-rate floor where there
    is none)."""

    kind: ClassVar[Kind] = Kind.SLOW_NIC
    host: str
    backend: str
    rail: int | None
    line_rate_gbps: float | None
    gbps: float
    reference_gbps: float
    deficit_pct: float
    robust_z: float | None
    pairs: tuple[PairFigure, ...]
    known_good: tuple[str, ...]
    confirmed: bool
    evidence: str
    reference_source: str = FLEET
    cleared: bool = False


@dataclass(frozen=True)
class LinkSuspect:
    """The pair ``a``–``b`` is slow on one backend and rail while neither end is slow with
    every partner. ``gbps``: the mean of ``runs_gbps``; ``reference_gbps``, ``deficit_pct``
    (percent), ``robust_z`` (sigma, None without a fleet level) as for ``NicSuspect``.
    ``undecided``: ends tested with this one partner only, whose NIC could equally be the
    cause (empty: a ``slow_link``). ``confirmed``: two runs or more slow, and their mean.
    ``reference_source`` as for ``NicSuspect``."""

    kind: ClassVar[Kind] = Kind.SLOW_LINK
    a: str
    b: str
    backend: str
    rail: int | None
    line_rate_gbps: float | None
    gbps: float
    runs_gbps: tuple[float, ...]
    reference_gbps: float
    deficit_pct: float
    robust_z: float | None
    undecided: tuple[str, ...]
    confirmed: bool
    evidence: str
    reference_source: str = FLEET


@dataclass(frozen=True)
class LinkShift:
    """A whole group runs below what it should reach: below its line rate — the fleet level
    ``fleet_gbps`` is under the floor ``floor_gbps`` (``line_rate_gbps`` × the efficiency) — or,
    with ``baseline_gbps``, ``deficit_pct`` or more below the median of the stored baseline
    ``baseline_name`` (``floor_gbps`` then that cutoff). ``pairs_below`` of ``pairs`` pairs fall
    below ``floor_gbps``. A cause the fabric shares, not one NIC. ``confirmed``: every host below
    it was tested with ``confirm_partners`` partners or more (a few faults at once, seen from two
    partners each, can look like a shift)."""

    kind: ClassVar[Kind] = Kind.FLEET_SHIFT
    backend: str
    rail: int | None
    line_rate_gbps: float | None
    fleet_gbps: float
    floor_gbps: float
    pairs_below: int
    pairs: int
    confirmed: bool
    evidence: str
    baseline_gbps: float | None = None
    baseline_name: str | None = None

    @property
    def source(self) -> str:
        """LINE_RATE or BASELINE: what the group falls below."""
        return LINE_RATE if self.baseline_gbps is None else BASELINE

    @property
    def reference_gbps(self) -> float:
        """The figure its deficit is measured from: the baseline's median, else the line rate."""
        return cast(float, self.line_rate_gbps if self.baseline_gbps is None else self.baseline_gbps)


@dataclass(frozen=True)
class LinkAttribution:
    """Every suspect and error (sorted), each group's references, what is left to confirm (``suspects``)
    and the hosts that ``passed`` (known good in every compared group they are in, not suspect:
    those with no slow pair at all first, then the rest; by name within each)."""

    nics: tuple[NicSuspect, ...] = ()
    links: tuple[LinkSuspect, ...] = ()
    errors: tuple[LinkError, ...] = ()
    host_errors: tuple[HostLinkError, ...] = ()
    shifts: tuple[LinkShift, ...] = ()
    references: tuple[GroupReference, ...] = ()
    suspects: Suspects = field(default_factory=Suspects)
    passed: tuple[str, ...] = ()
    # Hosts not suspect with a pair clearly good in some group (at the level of a group below its
    # line rate as a whole, there) that did not pass everywhere: partners after those that did.
    good: tuple[str, ...] = ()
    # Hosts whose own line rate no measured pair ran at (gpudiag.links.unreached).
    unreached: tuple[UnreachedRate, ...] = ()

    @property
    def partners(self) -> tuple[str, ...]:
        """The hosts a suspect is re-paired with (gpudiag.links.schedule.confirm_rounds), those that
        ``passed`` first, then the other ``good`` ones. Where none passes (a 5-node job at 58 % of
        its line rate with one NIC slower still re-ran a host's pair with that NIC, never met a
        third host, and its network stayed unconfirmed), or none at a suspect's line rate (in a
        small job of three models at 6 % link noise, the one host that passed every rail ran at
        200 Gb/s, and a 400 Gb/s host half-way below met no other 400 Gb/s host)."""
        return (*self.passed, *(host for host in self.good if host not in self.passed))

    @property
    def line_rates(self) -> dict[str, float]:
        """Each host's line rate: the highest of the groups whose pairs it is an end of (a pair
        between two rates runs in the lower one's group), or its own port's where no pair reached it."""
        rates: dict[str, float] = {}
        for reference in self.references:
            rate = reference.group.line_rate_gbps
            if rate is not None:
                for host in reference.members:
                    rates[host] = max(rates.get(host, 0.0), rate)
        for unreached in self.unreached:
            rates[unreached.host] = max(rates.get(unreached.host, 0.0), unreached.line_rate_gbps)
        return rates
