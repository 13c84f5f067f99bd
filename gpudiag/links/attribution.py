"""From measured pair figures to verdicts: which NIC, which link, which pair could not be tested.

Results are grouped by baseline key — backend, rail and line rate — and groups are never pooled
(a 200 Gb/s rail is not compared with a 400 Gb/s one, nor perftest with tcp). In each group:

1. Every pair's figure is the mean of its runs (a re-test adds a run).
2. References: the fleet's healthy level (``fleet_reference`` of gpudiag.analysis.reference,
   the upper densest cluster, median/MAD with a floor) when ``min_hosts`` distinct hosts have the
   key, and the line-rate floor: ``line_rate_efficiency_pct`` of the port's line rate. Where the
   floor is known, the fleet level is taken from the figures that reach it (healthy links are the
   ones that can), so a small fleet in which most pairs touch a slow NIC still finds its healthy
   level. When even the hosts' best figures sit below the floor, the whole group is below its
   line rate: one ``LinkShift`` says so, and pairs are then judged against the fleet alone. A
   few faults at once in a small fleet can look the same from two partners each, so every host
   below the floor stays a suspect until it has ``confirm_partners`` partners: a confirm round
   either finds pairs that reach the floor (no shift after all) or confirms the shift.
   With a stored baseline (``baseline``: an entry for the group's ``link_key``, its median and
   MAD of the pair figures of earlier sweeps), the baseline is a third reference: a group of
   2 to ``min_hosts`` - 1 hosts, with no fleet level, is judged against it; and where the fleet
   level itself falls ``deficit_pct`` below the baseline's median, one ``LinkShift`` naming the
   baseline says so (a regression the whole fabric shares), and pairs are then judged against
   the fleet (and the floor) alone, as in a group below its line rate.
3. A pair is slow when it falls both ``deficit_pct`` and ``robust_z`` below the fleet level, or
   both below the baseline (its MAD scaled by 1.4826, floored at ``mad_floor_pct`` of its
   median), or below the line-rate floor.
4. Attribution, per group. A host is *known good* when some pair of it is not slow (a slow NIC
   slows every pair it is in). A host slow with every partner (two or more) is a ``NicVerdict``;
   it is confirmed once ``confirm_partners`` of those partners are known good (two slow links
   on one node look like its NIC until a third known-good partner is slow with it too). A slow
   pair whose ends are not such hosts is a ``LinkVerdict`` (``slow_link``: both ends fine with
   other partners), confirmed when at least two runs each fell below. An end
   tested with that one partner only is *undecided*: its NIC could equally be the cause, and the
   verdict says so. A pair with no figure at all is a ``LinkError`` naming both ends and why.
5. What is not settled — unconfirmed NICs, undecided ends, unconfirmed links — comes back as
   ``Suspects`` for ``confirm_rounds``, with the hosts that ``passed`` (known good everywhere
   they were compared and, in a shifted group, at the floor; most trusted first) as partners.

Pure: the same results, in any order, give the same verdicts (sorted, figures summed exactly).
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, cast

from ..analysis.reference import MAD_TO_SIGMA, fleet_reference
from ..keys import link_key
from ..thresholds import Thresholds
from .schedule import Pair, Suspects, pair_key

BACKENDS = ("tcp", "nccl", "perftest")
# An address:port in an error reason (IPv4, or a bracketed IPv6 address): the port is ephemeral.
_ENDPOINT_PORT = re.compile(r"(\d+\.\d+\.\d+\.\d+|\])(?::\d+)")
UNIT = "Gb/s"
# Where a pair's reference came from (a finding's ``reference_source``).
FLEET, BASELINE, LINE_RATE = "fleet", "baseline", "line_rate"


@dataclass(frozen=True)
class LinkThresholds:
    """When a pair is slow and when a verdict is settled.

    A pair is slow when it falls ``deficit_pct`` (percent) or more below the fleet level AND its
    robust z is at or below ``robust_z`` (sigma, negative), or when it falls below
    ``line_rate_efficiency_pct`` (percent) of its port's line rate. The fleet's spread is its
    MAD, at least ``mad_floor_pct`` (percent) of its level. A fleet level needs ``min_hosts``
    distinct hosts in the group; with fewer, only the line rate judges. A slow NIC is confirmed
    once it is slow with ``confirm_partners`` partners that are known good (a healthy pair
    elsewhere shows their NIC good).
    """

    deficit_pct: float = 10.0
    robust_z: float = -3.0
    line_rate_efficiency_pct: float = 90.0
    mad_floor_pct: float = 1.0
    min_hosts: int = 6
    confirm_partners: int = 3

    def __post_init__(self) -> None:
        if not 0 < self.deficit_pct < 100:
            raise ValueError(f"deficit_pct must be between 0 and 100, got {self.deficit_pct}")
        if self.robust_z >= 0:
            raise ValueError(f"robust_z must be negative, got {self.robust_z}")
        if not 0 < self.line_rate_efficiency_pct <= 100:
            raise ValueError(f"line_rate_efficiency_pct must be in (0, 100], got {self.line_rate_efficiency_pct}")
        if self.mad_floor_pct < 0:
            raise ValueError(f"mad_floor_pct must not be negative, got {self.mad_floor_pct}")
        if self.min_hosts < 2 or self.confirm_partners < 2:
            raise ValueError("min_hosts and confirm_partners must be at least 2")


DEFAULT_THRESHOLDS = LinkThresholds()


def link_thresholds(thresholds: Thresholds) -> LinkThresholds:
    """The link figures of the project's thresholds file (``link_*`` entries)."""
    return LinkThresholds(deficit_pct=thresholds.link_deficit_pct, robust_z=thresholds.link_robust_z,
                          line_rate_efficiency_pct=thresholds.link_line_rate_efficiency_pct,
                          mad_floor_pct=thresholds.link_mad_floor_pct, min_hosts=thresholds.link_min_hosts,
                          confirm_partners=thresholds.link_confirm_partners)


@dataclass(frozen=True)
class LinkGroup:
    """The baseline key of a link figure: backend, rail (None: the backend has no rails) and the
    port's line rate in Gb/s (None: unknown). Figures of different groups are never compared."""

    backend: str
    rail: int | None
    line_rate_gbps: float | None

    def sort_key(self) -> tuple[str, int, float]:
        return (self.backend, -1 if self.rail is None else self.rail,
                -1.0 if self.line_rate_gbps is None else self.line_rate_gbps)

    def describe(self) -> str:
        """``nccl rail 3`` or ``tcp``."""
        return self.backend if self.rail is None else f"{self.backend} rail {self.rail}"

    @property
    def baseline_key(self) -> str:
        """The group's key in a stored baseline (gpudiag.keys.link_key)."""
        return link_key(self.backend, self.rail, self.line_rate_gbps)


class BaselineFigure(Protocol):
    """A stored baseline's entry (gpudiag.baseline.BaselineEntry): the median and unscaled MAD
    of ``count`` pair figures, in Gbit/s."""

    @property
    def median(self) -> float: ...

    @property
    def mad(self) -> float: ...

    @property
    def count(self) -> int: ...


class LinkBaseline(Protocol):
    """A stored baseline (gpudiag.baseline.Baseline): its ``name`` and an entry per key."""

    @property
    def name(self) -> str: ...

    def get(self, key: str) -> BaselineFigure | None: ...


@dataclass(frozen=True)
class GroupBaseline:
    """One group's figure in the stored baseline ``name``: ``median_gbps`` of ``count`` pair
    figures, its robust sigma ``spread_gbps`` (1.4826 × the MAD, at least ``mad_floor_pct`` of the
    median) and ``cutoff_gbps``, ``deficit_pct`` below the median: a pair under it is materially
    below the baseline."""

    name: str
    median_gbps: float
    spread_gbps: float
    count: int
    cutoff_gbps: float

    def deficit_pct(self, gbps: float) -> float:
        return 100 * (self.median_gbps - gbps) / self.median_gbps

    def robust_z(self, gbps: float) -> float:
        if self.spread_gbps > 0:
            return (gbps - self.median_gbps) / self.spread_gbps
        return -math.inf if gbps < self.median_gbps else 0.0  # a zero spread (mad_floor_pct 0): any dip is far

    def flags(self, gbps: float, thresholds: LinkThresholds) -> bool:
        """Both far (robust z) and materially (deficit) below the baseline's median."""
        return self.deficit_pct(gbps) >= thresholds.deficit_pct and self.robust_z(gbps) <= thresholds.robust_z


@dataclass(frozen=True)
class LinkResult:
    """One measured pair: ends ``a`` and ``b``, ``backend`` (tcp, nccl, perftest), ``rail``
    (None where the backend has none), the bandwidth in Gb/s, or None with ``error`` saying why
    the pair could not be measured, and the port's ``line_rate_gbps`` (None: unknown).
    Raises ValueError for a pair of one host, an unknown backend, or a figure that is neither a
    finite non-negative number nor absent with a reason."""

    a: str
    b: str
    backend: str
    rail: int | None = None
    gbps: float | None = None
    line_rate_gbps: float | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        pair_key(self.a, self.b)
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; expected one of {', '.join(BACKENDS)}")
        if self.rail is not None and self.rail < 0:
            raise ValueError(f"rail must not be negative, got {self.rail}")
        if (self.gbps is None) == (self.error is None):
            raise ValueError(f"{self.a}↔{self.b}: give either a figure (gbps) or an error, not both or neither")
        if self.gbps is not None and not (math.isfinite(self.gbps) and self.gbps >= 0):
            raise ValueError(f"{self.a}↔{self.b}: gbps must be finite and non-negative, got {self.gbps}")
        if self.line_rate_gbps is not None and not (math.isfinite(self.line_rate_gbps) and self.line_rate_gbps > 0):
            raise ValueError(f"{self.a}↔{self.b}: line_rate_gbps must be positive, got {self.line_rate_gbps}")

    @property
    def pair(self) -> Pair:
        return pair_key(self.a, self.b)

    @property
    def group(self) -> LinkGroup:
        return LinkGroup(self.backend, self.rail, self.line_rate_gbps)


@dataclass(frozen=True)
class PairFigure:
    """A pair's figure in one group: the mean of its runs (Gb/s), the runs themselves (sorted),
    and whether the mean is slow against the group's references."""

    a: str
    b: str
    gbps: float
    runs_gbps: tuple[float, ...]
    slow: bool

    def peer(self, host: str) -> str:
        return self.b if host == self.a else self.a


@dataclass(frozen=True)
class GroupReference:
    """What one group's figures were judged against. ``fleet_gbps``/``spread_gbps``: the fleet's
    healthy level and robust sigma (None with fewer than ``min_hosts`` hosts); ``floor_gbps``:
    the line-rate floor (None without a line rate); ``shifted``: the group's level itself is
    below the floor. ``baseline``: the stored baseline's figure for the group (None without
    one); ``baseline_shifted``: the fleet level is ``deficit_pct`` or more below it. A group with
    none of these references is not compared."""

    group: LinkGroup
    hosts: int
    pairs: int
    fleet_gbps: float | None
    spread_gbps: float | None
    floor_gbps: float | None
    shifted: bool = False
    baseline: GroupBaseline | None = None
    baseline_shifted: bool = False

    @property
    def reference_gbps(self) -> float | None:
        """The group's expected figure: the fleet level, else the baseline's median, else the floor."""
        if self.fleet_gbps is not None:
            return self.fleet_gbps
        return self.baseline.median_gbps if self.baseline is not None else self.floor_gbps

    @property
    def compared(self) -> bool:
        return self.reference_gbps is not None

    @property
    def level_gbps(self) -> float:
        """``reference_gbps`` of a compared group. Raises ValueError when it is not compared."""
        if self.reference_gbps is None:
            raise ValueError(f"{self.group.describe()}: no fleet level, baseline or line rate to compare with")
        return self.reference_gbps

    @property
    def shift_floor_gbps(self) -> float | None:
        """In a shifted group, the figure its healthy links would reach: the baseline's cutoff
        when the fleet is below its baseline, else the line-rate floor; None when not shifted."""
        if self.baseline_shifted and self.baseline is not None:
            return self.baseline.cutoff_gbps
        return self.floor_gbps if self.shifted else None

    def judged_by(self, gbps: float, thresholds: LinkThresholds) -> str:
        """The reference ``gbps`` is measured against (FLEET, BASELINE or LINE_RATE): the first
        of the fleet level and the baseline that finds it slow, else the fleet level, else the
        baseline unless only the floor finds it slow."""
        if self._fleet_flags(gbps, thresholds):
            return FLEET
        if self._baseline_flags(gbps, thresholds):
            return BASELINE
        if self.fleet_gbps is not None:
            return FLEET
        return BASELINE if self.baseline is not None and not self._floor_flags(gbps) else LINE_RATE

    def value_gbps(self, source: str) -> float:
        """The figure of the reference ``source``. Raises ValueError when the group lacks it."""
        value = {FLEET: self.fleet_gbps, LINE_RATE: self.floor_gbps,
                 BASELINE: None if self.baseline is None else self.baseline.median_gbps}.get(source)
        if value is None:
            raise ValueError(f"{self.group.describe()}: no {source} reference to compare with")
        return value

    def deficit_pct(self, gbps: float, source: str | None = None) -> float:
        """How far ``gbps`` falls below the reference ``source`` (default: ``reference_gbps``),
        in percent. Raises ValueError when the group lacks that reference."""
        level = self.level_gbps if source is None else self.value_gbps(source)
        return 100 * (level - gbps) / level

    def robust_z(self, gbps: float, source: str | None = None) -> float | None:
        """Sigmas from the baseline's median (``source`` BASELINE), else from the fleet level;
        None without that reference."""
        if source == BASELINE and self.baseline is not None:
            return self.baseline.robust_z(gbps)
        if self.fleet_gbps is None or self.spread_gbps is None:
            return None
        return (gbps - self.fleet_gbps) / self.spread_gbps

    def is_slow(self, gbps: float, thresholds: LinkThresholds) -> bool:
        """Both far (robust z) and materially (deficit) below the fleet level or the baseline,
        or below the line-rate floor (unless the whole group is below the baseline or the floor:
        then the ``LinkShift`` says so)."""
        return self._fleet_flags(gbps, thresholds) or self._baseline_flags(gbps, thresholds) or self._floor_flags(gbps)

    def _fleet_flags(self, gbps: float, thresholds: LinkThresholds) -> bool:
        if self.fleet_gbps is None:
            return False
        z = self.robust_z(gbps)
        deficit = 100 * (self.fleet_gbps - gbps) / self.fleet_gbps
        return z is not None and deficit >= thresholds.deficit_pct and z <= thresholds.robust_z

    def _baseline_flags(self, gbps: float, thresholds: LinkThresholds) -> bool:
        return self.baseline is not None and not self.baseline_shifted and self.baseline.flags(gbps, thresholds)

    def _floor_flags(self, gbps: float) -> bool:
        return self.floor_gbps is not None and not self.shifted and gbps < self.floor_gbps

    def describe(self, source: str | None = None) -> str:
        """``fleet 392.0 Gb/s; line rate 400 Gb/s`` (or the floor alone with too few hosts), or
        for ``source`` BASELINE ``baseline nightly 391.0 Gb/s (median of 40 pair figures); …``."""
        line = self.group.line_rate_gbps
        if source == BASELINE and self.baseline is not None:
            base = self.baseline
            text = f"baseline {base.name} {_rate(base.median_gbps)} {UNIT} (median of {base.count} pair figures)"
            if self.fleet_gbps is not None:
                text += f"; fleet {_rate(self.fleet_gbps)} {UNIT}"
            return text if line is None else f"{text}; line rate {line:g} {UNIT}"
        if self.fleet_gbps is None:
            return f"{_pct(self.floor_share_pct)} of line rate {line:g} {UNIT} = {_rate(self.floor_gbps)} {UNIT}"
        text = f"fleet {_rate(self.fleet_gbps)} {UNIT}"
        return text if line is None else f"{text}; line rate {line:g} {UNIT}"

    @property
    def floor_share_pct(self) -> float:
        line = self.group.line_rate_gbps
        return 0.0 if line is None or self.floor_gbps is None else 100 * self.floor_gbps / line


@dataclass(frozen=True)
class NicVerdict:
    """``host``'s NIC on one backend and rail is slow: slow with every partner it was tested
    with (``pairs``, two or more). ``gbps``: the median of those pairs; ``reference_gbps`` and
    ``deficit_pct`` (percent) against the group's reference; ``robust_z`` (sigma, None without a
    fleet level); ``known_good``: the partners whose NIC a healthy pair has shown good.
    ``confirmed``: slow with ``confirm_partners`` known-good partners or more.
    ``reference_source``: ``baseline`` when the stored baseline judged it, else ``fleet`` (the
    fleet level, or the line-rate floor where there is none)."""

    kind: ClassVar[str] = "slow_nic"
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


@dataclass(frozen=True)
class LinkVerdict:
    """The pair ``a``–``b`` is slow on one backend and rail while neither end is slow with
    every partner. ``gbps``: the mean of ``runs_gbps``; ``reference_gbps``, ``deficit_pct``
    (percent), ``robust_z`` (sigma, None without a fleet level) as for ``NicVerdict``.
    ``undecided``: ends tested with this one partner only, whose NIC could equally be the
    cause (empty: a ``slow_link``). ``confirmed``: two runs or more, each of them slow.
    ``reference_source`` as for ``NicVerdict``."""

    kind: ClassVar[str] = "slow_link"
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
class LinkError:
    """The pair ``a``–``b`` could not be measured on one backend and rail (no run gave a
    figure): ``reason`` is every distinct error, sorted and joined."""

    kind: ClassVar[str] = "link_error"
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

    kind: ClassVar[str] = "link_error"
    host: str
    partners: tuple[str, ...]
    reason: str
    evidence: str


@dataclass(frozen=True)
class LinkShift:
    """A whole group runs below what it should reach: below its line rate — the fleet level
    ``fleet_gbps`` is under the floor ``floor_gbps`` (``line_rate_gbps`` × the efficiency) — or,
    with ``baseline_gbps``, ``deficit_pct`` or more below the median of the stored baseline
    ``baseline_name`` (``floor_gbps`` then that cutoff). ``pairs_below`` of ``pairs`` pairs fall
    below ``floor_gbps``. A cause the fabric shares, not one NIC. ``confirmed``: every host below
    it was tested with ``confirm_partners`` partners or more (a few faults at once, seen from two
    partners each, can look like a shift)."""

    kind: ClassVar[str] = "fleet_shift"
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
    """Every verdict (sorted), each group's references, what is left to confirm (``suspects``)
    and the hosts that ``passed`` (known good in every compared group they are in, not suspect:
    those with no slow pair at all first, then the rest; by name within each)."""

    nics: tuple[NicVerdict, ...] = ()
    links: tuple[LinkVerdict, ...] = ()
    errors: tuple[LinkError, ...] = ()
    host_errors: tuple[HostLinkError, ...] = ()
    shifts: tuple[LinkShift, ...] = ()
    references: tuple[GroupReference, ...] = ()
    suspects: Suspects = field(default_factory=Suspects)
    passed: tuple[str, ...] = ()


def attribute_links(results: Iterable[LinkResult], thresholds: LinkThresholds = DEFAULT_THRESHOLDS, *,
                    baseline: LinkBaseline | None = None) -> LinkAttribution:
    """Verdicts from link ``results`` (any order; screen, confirm and full runs together — a
    re-test of a pair is one more run of it), against the fleet, the line rate and, for the
    groups it has an entry for (``LinkGroup.baseline_key``), the stored ``baseline`` (e.g. a
    gpudiag.baseline.Baseline). See the module docstring for the rules."""
    figures: dict[LinkGroup, dict[Pair, list[float]]] = defaultdict(lambda: defaultdict(list))
    failures: dict[tuple[str, int | None, Pair], set[str]] = defaultdict(set)
    for result in results:
        if result.gbps is None:
            failures[(result.backend, result.rail, result.pair)].add(str(result.error))
        else:
            figures[result.group][result.pair].append(result.gbps)
    outcomes = [_judge_group(group, figures[group], thresholds, _group_baseline(group, baseline, thresholds))
                for group in sorted(figures, key=LinkGroup.sort_key)]
    measured = {(group.backend, group.rail, pair) for group, pairs in figures.items() for pair in pairs}
    errors = tuple(_link_error(backend, rail, pair, reasons) for (backend, rail, pair), reasons
                   in sorted(failures.items(), key=lambda item: (item[0][2], item[0][0], _rail_key(item[0][1])))
                   if (backend, rail, pair) not in measured)
    suspect_hosts = sorted({host for outcome in outcomes for host in outcome.suspect_hosts})
    suspect_pairs = sorted({pair for outcome in outcomes for pair in outcome.suspect_pairs})
    nics = tuple(sorted((v for outcome in outcomes for v in outcome.nics),
                        key=lambda v: (v.host, v.backend, _rail_key(v.rail))))
    links = tuple(sorted((v for outcome in outcomes for v in outcome.links),
                         key=lambda v: (v.a, v.b, v.backend, _rail_key(v.rail))))
    return LinkAttribution(
        nics=nics, links=links, errors=errors, host_errors=_host_errors(errors, measured),
        shifts=tuple(outcome.shift for outcome in outcomes if outcome.shift is not None),
        references=tuple(outcome.reference for outcome in outcomes),
        suspects=Suspects(tuple(suspect_hosts), tuple(suspect_pairs)),
        passed=_passed(outcomes, set(suspect_hosts) | {v.host for v in nics}))


def pair_means(results: Iterable[LinkResult]) -> dict[LinkGroup, dict[Pair, float]]:
    """Each measured pair's figure in each group: the mean of its runs, in Gb/s (results with
    an error carry no figure and are left out). Sorted by group, then pair."""
    runs: dict[LinkGroup, dict[Pair, list[float]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        if result.gbps is not None:
            runs[result.group][result.pair].append(result.gbps)
    return {group: {pair: _mean(values) for pair, values in sorted(runs[group].items())}
            for group in sorted(runs, key=LinkGroup.sort_key)}


@dataclass(frozen=True)
class HostLinkFigures:
    """One host's pair figures in one group: how many ``partners`` gave a figure (a pair's is the
    mean of its runs), the worst of them (``worst_gbps``, with ``worst_peer``), their median and
    best (Gb/s; None when no partner gave one), and ``unmeasured``: partners with no figure."""

    group: LinkGroup
    partners: int
    worst_gbps: float | None
    worst_peer: str | None
    median_gbps: float | None
    best_gbps: float | None
    unmeasured: int

    @property
    def median_line_rate_pct(self) -> float | None:
        """The median as a share of the port's line rate (percent), None when either is unknown."""
        line = self.group.line_rate_gbps
        return None if line is None or self.median_gbps is None else 100 * self.median_gbps / line


def host_link_figures(host: str, results: Iterable[LinkResult]) -> list[HostLinkFigures]:
    """``host``'s figures per group (sorted) from link ``results`` (pairs without it are ignored)."""
    mine = [result for result in results if host in (result.a, result.b)]
    failed: dict[LinkGroup, set[str]] = defaultdict(set)
    for result in mine:
        if result.gbps is None:
            failed[result.group].add(result.b if result.a == host else result.a)
    means = pair_means(mine)
    figures = []
    for group in sorted(set(means) | set(failed), key=LinkGroup.sort_key):
        ranked = sorted((gbps, b if a == host else a) for (a, b), gbps in means.get(group, {}).items())
        values = [gbps for gbps, _ in ranked]
        unmeasured = len(failed[group] - {peer for _, peer in ranked})
        figures.append(HostLinkFigures(group, len(ranked), values[0] if values else None,
                                       ranked[0][1] if ranked else None,
                                       statistics.median(values) if values else None,
                                       values[-1] if values else None, unmeasured))
    return figures


def _group_baseline(group: LinkGroup, baseline: LinkBaseline | None,
                    thresholds: LinkThresholds) -> GroupBaseline | None:
    entry = None if baseline is None else baseline.get(group.baseline_key)
    if baseline is None or entry is None or not entry.median > 0:
        return None
    median = float(entry.median)
    spread = max(MAD_TO_SIGMA * float(entry.mad), median * thresholds.mad_floor_pct / 100)
    return GroupBaseline(str(baseline.name), median, spread, int(entry.count),
                         median * (1 - thresholds.deficit_pct / 100))


@dataclass(frozen=True)
class _GroupOutcome:
    reference: GroupReference
    nics: tuple[NicVerdict, ...]
    links: tuple[LinkVerdict, ...]
    shift: LinkShift | None
    suspect_hosts: frozenset[str]
    suspect_pairs: frozenset[Pair]
    trusted: frozenset[str]  # known good (and, in a shifted group, at the floor): confirm partners
    clean: frozenset[str]  # hosts with no slow pair
    hosts: frozenset[str]


def _judge_group(group: LinkGroup, runs: Mapping[Pair, Sequence[float]], thresholds: LinkThresholds,
                 baseline: GroupBaseline | None = None) -> _GroupOutcome:
    reference = _group_reference(group, runs, thresholds, baseline)
    figures = [_pair_figure(pair, runs[pair], reference, thresholds) for pair in sorted(runs)]
    hosts = frozenset(host for pair in runs for host in pair)
    if not reference.compared:
        return _GroupOutcome(reference, (), (), None, frozenset(), frozenset(), frozenset(), frozenset(), hosts)
    mine: dict[str, list[PairFigure]] = defaultdict(list)
    for figure in figures:
        mine[figure.a].append(figure)
        mine[figure.b].append(figure)
    known_good = frozenset(host for host, pairs in mine.items() if any(not f.slow for f in pairs))
    culprits = {host for host, pairs in mine.items() if host not in known_good and len(pairs) >= 2}
    alone = {host for host, pairs in mine.items() if host not in known_good and len(pairs) == 1}
    nics = tuple(_nic_verdict(host, mine[host], known_good, reference, thresholds) for host in sorted(culprits))
    links = _link_verdicts(figures, culprits, alone, mine, reference, thresholds)
    trusted, doubting = known_good, set()
    floor = reference.shift_floor_gbps
    if floor is not None:
        at_floor = {host for host, pairs in mine.items() if any(f.gbps >= floor for f in pairs)}
        trusted = known_good & at_floor
        doubting = _doubting_shift(mine, at_floor, trusted, thresholds)
    # ``alone``: slow with the one partner it had, so its NIC is not known either way yet
    suspect_hosts = {v.host for v in nics if not v.confirmed} | alone | doubting
    suspect_pairs = {(v.a, v.b) for v in links if not v.confirmed}
    clean = frozenset(host for host, pairs in mine.items() if not any(f.slow for f in pairs))
    return _GroupOutcome(reference, nics, links, _shift(reference, figures, doubting), frozenset(suspect_hosts),
                         frozenset(suspect_pairs), frozenset(trusted), clean, hosts)


def _link_verdicts(figures: Sequence[PairFigure], culprits: set[str], alone: set[str],
                   mine: Mapping[str, Sequence[PairFigure]], reference: GroupReference,
                   thresholds: LinkThresholds) -> tuple[LinkVerdict, ...]:
    """A verdict for every slow pair that no slow NIC explains; its ends in ``alone`` (tested
    with this partner only) are undecided."""
    links = []
    for figure in figures:
        ends = (figure.a, figure.b)
        if figure.slow and not culprits & set(ends):
            undecided = tuple(host for host in ends if host in alone)
            links.append(_link_verdict(figure, undecided, mine, reference, thresholds))
    return tuple(links)


def _group_reference(group: LinkGroup, runs: Mapping[Pair, Sequence[float]],
                     thresholds: LinkThresholds, baseline: GroupBaseline | None = None) -> GroupReference:
    means = sorted(_mean(values) for values in runs.values())
    best: dict[str, float] = {}
    for pair, values in runs.items():
        for host in pair:
            best[host] = max(best.get(host, 0.0), _mean(values))
    floor = None if group.line_rate_gbps is None else group.line_rate_gbps * thresholds.line_rate_efficiency_pct / 100
    if len(best) < thresholds.min_hosts:
        return GroupReference(group, len(best), len(means), None, None, floor, baseline=baseline)
    # A host's best pair is healthy unless its own NIC (or every partner's) is slow: if even the
    # best figures sit below the floor, the whole group is below its line rate.
    best_level = fleet_reference(sorted(best.values()), len(best), thresholds.mad_floor_pct).value
    shifted = floor is not None and best_level < floor
    basis = means if floor is None or shifted else [value for value in means if value >= floor] or means
    fleet = fleet_reference(basis, len(best), thresholds.mad_floor_pct)
    # The fleet level itself materially below the baseline: a regression the fabric shares.
    below_baseline = baseline is not None and baseline.deficit_pct(fleet.value) >= thresholds.deficit_pct
    return GroupReference(group, len(best), len(means), fleet.value, fleet.spread, floor, shifted, baseline,
                          below_baseline)


def _pair_figure(pair: Pair, runs: Sequence[float], reference: GroupReference,
                 thresholds: LinkThresholds) -> PairFigure:
    mean = _mean(runs)
    return PairFigure(pair[0], pair[1], mean, tuple(sorted(runs)), reference.compared and
                      reference.is_slow(mean, thresholds))


def _nic_verdict(host: str, pairs: Sequence[PairFigure], known_good: frozenset[str], reference: GroupReference,
                 thresholds: LinkThresholds) -> NicVerdict:
    group = reference.group
    ordered = tuple(sorted(pairs, key=lambda f: f.peer(host)))
    good = tuple(f.peer(host) for f in ordered if f.peer(host) in known_good)
    confirmed = len(good) >= thresholds.confirm_partners
    gbps = statistics.median(sorted(f.gbps for f in ordered))
    source = reference.judged_by(gbps, thresholds)
    deficit = reference.deficit_pct(gbps, source)
    figures = _listed(f"{f.peer(host)} {_rate(f.gbps)}" for f in ordered)
    evidence = (f"{host} slow with all {len(ordered)} partners on {group.describe()}: {figures} {UNIT} "
                f"vs {reference.describe(source)}; {_pct(deficit)} below")
    if not confirmed:
        evidence += (f" (not yet confirmed: {len(good)} of its partners known good, "
                     f"{thresholds.confirm_partners} wanted)")
    return NicVerdict(host, group.backend, group.rail, group.line_rate_gbps, gbps, reference.value_gbps(source),
                      deficit, reference.robust_z(gbps, source), ordered, good, confirmed, evidence,
                      _source_label(source))


def _link_verdict(figure: PairFigure, undecided: tuple[str, ...], mine: Mapping[str, Sequence[PairFigure]],
                  reference: GroupReference, thresholds: LinkThresholds) -> LinkVerdict:
    group = reference.group
    runs = figure.runs_gbps
    confirmed = len(runs) >= 2 and all(reference.is_slow(value, thresholds) for value in runs)
    source = reference.judged_by(figure.gbps, thresholds)
    deficit = reference.deficit_pct(figure.gbps, source)
    measured = f"{_rate(figure.gbps)} {UNIT}"
    if len(runs) > 1:
        measured += f" (mean of {len(runs)} runs: {', '.join(f'{_rate(value)}' for value in runs)})"
    evidence = (f"{figure.a} ↔ {figure.b} slow on {group.describe()}: {measured} vs {reference.describe(source)}; "
                f"{_pct(deficit)} below")
    if undecided:
        who = " and ".join(undecided)
        evidence += (f"; {who} {'was' if len(undecided) == 1 else 'were'} tested with this partner only, "
                     f"so {'its NIC' if len(undecided) == 1 else 'either NIC'} may be the cause as well as the link")
    else:
        fine = [_fine_elsewhere(host, figure, mine[host]) for host in (figure.a, figure.b)]
        evidence += f"; both ends fine with other partners: {', '.join(fine)} {UNIT}"
    if not confirmed:
        evidence += " (not yet confirmed by a re-test)"
    return LinkVerdict(figure.a, figure.b, group.backend, group.rail, group.line_rate_gbps, figure.gbps, runs,
                       reference.value_gbps(source), deficit, reference.robust_z(figure.gbps, source), undecided,
                       confirmed, evidence, _source_label(source))


def _source_label(source: str) -> str:
    # A finding judged by the floor alone has always said "fleet"; only the baseline is new.
    return BASELINE if source == BASELINE else FLEET


def _fine_elsewhere(host: str, slow: PairFigure, pairs: Sequence[PairFigure]) -> str:
    fine = sorted((f for f in pairs if (f.a, f.b) != (slow.a, slow.b) and not f.slow), key=lambda f: f.peer(host))
    return f"{host} with " + _listed(f"{f.peer(host)} {_rate(f.gbps)}" for f in fine)


# Evidence names this many pairs, then how many more (a node of a full round-robin has hundreds).
LISTED_PAIRS = 6


def _listed(items: Iterable[str]) -> str:
    """``a, b, c`` — at most ``LISTED_PAIRS`` items, then ``and N more``."""
    every = list(items)
    shown = ", ".join(every[:LISTED_PAIRS])
    return shown if len(every) <= LISTED_PAIRS else f"{shown} and {len(every) - LISTED_PAIRS} more"


def _doubting_shift(mine: Mapping[str, Sequence[PairFigure]], at_floor: set[str], trusted: frozenset[str],
                    thresholds: LinkThresholds) -> set[str]:
    """Hosts of a shifted group below the floor that cannot yet tell the shift from faults of
    their own or their partners': fewer than ``confirm_partners`` partners, or, where some hosts
    do reach the floor, none of them among their partners."""
    return {host for host, pairs in mine.items() if host not in at_floor
            and (len(pairs) < thresholds.confirm_partners or (trusted and not trusted & {f.peer(host) for f in pairs}))}


def _shift(reference: GroupReference, figures: Sequence[PairFigure], doubting: set[str]) -> LinkShift | None:
    """The group's one ``LinkShift``: below its baseline (naming it, and the line rate too when
    the fleet is below that as well), else below its line rate; None when it is neither."""
    group = reference.group
    line = group.line_rate_gbps
    floor, fleet = reference.shift_floor_gbps, reference.fleet_gbps
    if floor is None or fleet is None:
        return None
    below = sum(1 for f in figures if f.gbps < floor)
    confirmed = not doubting
    line_text = ("" if reference.floor_gbps is None or line is None else
                 f"{_pct(reference.floor_share_pct)} of line rate {line:g} {UNIT} = "
                 f"{_rate(reference.floor_gbps)} {UNIT}")
    base = reference.baseline if reference.baseline_shifted else None
    if base is not None:
        evidence = (f"links on {group.describe()} run below baseline {base.name}: fleet {_rate(fleet)} {UNIT} vs "
                    f"baseline {base.name} {_rate(base.median_gbps)} {UNIT} (median of {base.count} pair figures), "
                    f"{_pct(base.deficit_pct(fleet))} below; {below} of {len(figures)} pairs below "
                    f"{_rate(base.cutoff_gbps)} {UNIT}")
        if reference.shifted:
            evidence += f"; below its line rate too ({line_text})"
    else:
        evidence = (f"links on {group.describe()} run below their line rate: fleet {_rate(fleet)} {UNIT} vs "
                    f"{line_text}; {below} of {len(figures)} pairs below")
    evidence += " — a cause the fabric shares (switch ports, cabling, firmware, congestion control), not one NIC"
    if not confirmed:
        what = "the baseline's cutoff" if base is not None else "the floor"
        evidence += (f" (not yet confirmed: {len(doubting)} hosts below {what} lack a partner that reaches "
                     f"it, or enough partners)")
    return LinkShift(group.backend, group.rail, line, fleet, floor, below, len(figures), confirmed, evidence,
                     None if base is None else base.median_gbps, None if base is None else base.name)


def _link_error(backend: str, rail: int | None, pair: Pair, reasons: set[str]) -> LinkError:
    reason = "; ".join(sorted(reasons))
    where = backend if rail is None else f"{backend} rail {rail}"
    return LinkError(pair[0], pair[1], backend, rail, reason,
                     f"{pair[0]} ↔ {pair[1]} could not be measured on {where}: {reason}")


def _host_errors(errors: Sequence[LinkError],
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
            f"{host} could not be tested with any of its {len(others)} partners ({_listed(others)}), each of "
            f"which was measured with other hosts: its data port, address or firewall is the likely cause; "
            f"{reason}")))
    return tuple(found)


def _passed(outcomes: Sequence[_GroupOutcome], excluded: set[str]) -> tuple[str, ...]:
    compared = [outcome for outcome in outcomes if outcome.reference.compared]
    hosts = {host for outcome in compared for host in outcome.hosts} - excluded
    good = {host for host in hosts if all(host in o.trusted for o in compared if host in o.hosts)}
    clean = {host for host in good if all(host in o.clean for o in compared if host in o.hosts)}
    return (*sorted(clean), *sorted(good - clean))


def _mean(values: Iterable[float]) -> float:
    ordered = sorted(values)
    return math.fsum(ordered) / len(ordered)  # fsum: the same figure in any input order


def _pct(value: float) -> str:
    return f"{value:.1f} %"


def _rate(gbps: float) -> str:
    """A figure in Gb/s for evidence: one decimal from 10 Gb/s up (``392.0``), three significant
    digits below (``0.0482``: a test network or a port trained far down still reads)."""
    return f"{gbps:.1f}" if abs(gbps) >= 10 else f"{gbps:.3g}"


def _rail_key(rail: int | None) -> int:
    return -1 if rail is None else rail
