"""Link figures and what they are judged against (the inputs of gpudiag.links.attribution).

A pair test's result (``LinkResult``) belongs to a group — backend, rail and line rate
(``LinkGroup``) — and groups are never pooled. Each group's references (``GroupReference``):
the fleet's healthy level, the line-rate floor and, where one is stored, the baseline's figure
(``GroupBaseline``); the thresholds they use (``LinkThresholds``, data from thresholds.json); a
pair's figure (``PairFigure``: the median of its runs, the mean of two); and per host, its figures against its
partners (``host_link_figures``, for ``gpudiag history``).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..analysis.keys import link_key
from ..analysis.reference import MAD_TO_SIGMA
from ..analysis.thresholds import Thresholds
from ..words import fixed, pct
from .schedule import Pair, pair_key

BACKENDS = ("tcp", "nccl", "perftest")
UNIT = "Gb/s"
# Where a pair's reference came from (a finding's ``reference_source``).
FLEET, BASELINE, LINE_RATE = "fleet", "baseline", "line_rate"


# Backends whose figures reach a port's line rate on a healthy link (RDMA, NCCL over IB or RoCE).
# Plain TCP does not (a few streams through the kernel reach 60 % of a 10 GbE line, and much less of
# a 100-400 Gb/s one): its links are judged against their fleet and baseline, not a NIC's speed.
LINE_RATE_BACKENDS = ("perftest", "nccl")


@dataclass(frozen=True)
class LinkThresholds:
    """When a pair is slow and when a verdict is settled.

    A pair is slow when it falls ``deficit_pct`` (percent) or more below the fleet level AND its
    robust z is at or below ``robust_z`` (sigma, negative), or when it falls below
    ``line_rate_efficiency_pct`` (percent) of its port's line rate. The fleet's spread is its
    MAD, at least ``mad_floor_pct`` (percent) of its level. A fleet level needs ``min_hosts``
    distinct hosts in the group; with fewer, only the line rate judges. A slow NIC is confirmed
    once it is slow with ``confirm_partners`` partners that are known good (a healthy pair
    elsewhere shows their NIC good). The line rate judges the backends of ``floor_backends``
    only: those that reach it (LINE_RATE_BACKENDS), and tcp too where the line rate is the
    operator's own figure of what a link delivers (``--net-line-rate``: a rate-limited overlay).
    """

    deficit_pct: float = 5.0
    robust_z: float = -3.0
    line_rate_efficiency_pct: float = 90.0
    mad_floor_pct: float = 1.0
    min_hosts: int = 6
    confirm_partners: int = 3
    floor_backends: tuple[str, ...] = LINE_RATE_BACKENDS
    # Whether the hosts are the job (its network judged as a whole where every pair runs alike below
    # the line rate), not a sample of it (--suspects and their reference peers).
    whole_job: bool = True

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
        """The group's key in a stored baseline (gpudiag.analysis.keys.link_key)."""
        return link_key(self.backend, self.rail, self.line_rate_gbps)


class BaselineFigure(Protocol):
    """A stored baseline's entry (gpudiag.store.baselines.BaselineEntry): the median and unscaled MAD
    of ``count`` pair figures, in Gbit/s."""

    @property
    def median(self) -> float: ...

    @property
    def mad(self) -> float: ...

    @property
    def count(self) -> int: ...


class LinkBaseline(Protocol):
    """A stored baseline (gpudiag.store.baselines.Baseline): its ``name`` and an entry per key."""

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


# Streams (TCP streams, RDMA QPs) of one direction of a pair test, and switches on one traced path.
MAX_STREAMS = 256
MAX_HOPS = 16


@dataclass(frozen=True)
class StreamFigure:
    """One stream of a pair test in one direction (a TCP stream, an RDMA QP): its Gb/s, and the
    switches its path crossed in order, the source's leaf first (``hops``; None: not traced)."""

    gbps: float
    hops: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.gbps) and self.gbps >= 0):
            raise ValueError(f"a stream's gbps must be finite and non-negative, got {self.gbps}")
        if self.hops is not None and not (0 < len(self.hops) <= MAX_HOPS and all(self.hops)):
            raise ValueError(f"a stream's hops must be 1 to {MAX_HOPS} switch names, got {self.hops!r}")


def collective_gbps(streams: Sequence[StreamFigure]) -> float | None:
    """What a collective that splits its data evenly over these streams gets: their count times
    the slowest (Gb/s); None without streams."""
    return len(streams) * min(s.gbps for s in streams) if streams else None


@dataclass(frozen=True)
class LinkResult:
    """One measured pair: ends ``a`` and ``b``, ``backend`` (tcp, nccl, perftest), ``rail``
    (None where the backend has none), the bandwidth in Gb/s, or None with ``error`` saying why
    the pair could not be measured, and the port's ``line_rate_gbps`` (None: unknown).
    ``fault``: the end an error is known to be that end's own (its pair server did not start, or
    its client printed no valid record), so it says nothing of the other; None: either end, or
    the path between them. ``streams``: each stream's figure from ``a`` to ``b`` (the client's
    direction, whose paths may be traced), ``back_streams`` from ``b`` to ``a``; empty where the
    backend reports none. ``end_rates_gbps``: each end's own port rate (``a``'s, then ``b``'s;
    None where it reported none): the pair runs at the lower, so a host whose every partner is
    slower never has its own rate measured. Raises ValueError for a pair of one host, an unknown
    backend, a figure that is neither a finite non-negative number nor absent with a reason, a
    fault that is no end of an error, a rate that is not positive, or more than MAX_STREAMS
    streams a direction."""

    a: str
    b: str
    backend: str
    rail: int | None = None
    gbps: float | None = None
    line_rate_gbps: float | None = None
    error: str | None = None
    fault: str | None = None
    streams: tuple[StreamFigure, ...] = ()
    back_streams: tuple[StreamFigure, ...] = ()
    end_rates_gbps: tuple[float | None, float | None] = (None, None)

    def __post_init__(self) -> None:
        pair_key(self.a, self.b)
        if len(self.streams) > MAX_STREAMS or len(self.back_streams) > MAX_STREAMS:
            raise ValueError(f"{self.a}↔{self.b}: more than {MAX_STREAMS} streams in one direction")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; expected one of {', '.join(BACKENDS)}")
        if self.rail is not None and self.rail < 0:
            raise ValueError(f"rail must not be negative, got {self.rail}")
        if (self.gbps is None) == (self.error is None):
            raise ValueError(f"{self.a}↔{self.b}: give either a figure (gbps) or an error, not both or neither")
        if self.gbps is not None and not (math.isfinite(self.gbps) and self.gbps >= 0):
            raise ValueError(f"{self.a}↔{self.b}: gbps must be finite and non-negative, got {self.gbps}")
        if len(self.end_rates_gbps) != 2:
            raise ValueError(f"{self.a}↔{self.b}: end_rates_gbps gives the two ends' rates, got {self.end_rates_gbps}")
        for rate in (self.line_rate_gbps, *self.end_rates_gbps):
            if rate is not None and not (math.isfinite(rate) and rate > 0):
                raise ValueError(f"{self.a}↔{self.b}: a line rate must be positive, got {rate}")
        if self.fault is not None and (self.error is None or self.fault not in (self.a, self.b)):
            raise ValueError(f"{self.a}↔{self.b}: a fault names an end of a pair that failed, not {self.fault!r}")

    @property
    def pair(self) -> Pair:
        return pair_key(self.a, self.b)

    @property
    def group(self) -> LinkGroup:
        return LinkGroup(self.backend, self.rail, self.line_rate_gbps)

    def end_rate(self, host: str) -> float | None:
        """``host``'s own port rate as this pair test reported it (None: not reported)."""
        return self.end_rates_gbps[0] if host == self.a else self.end_rates_gbps[1]

    @property
    def collective_gbps(self) -> float | None:
        """The slower direction's figure as a collective sees it (``collective_gbps``); None
        without per-stream figures."""
        figures = [f for f in (collective_gbps(self.streams), collective_gbps(self.back_streams)) if f is not None]
        return min(figures) if figures else None


@dataclass(frozen=True)
class PairFigure:
    """A pair's figure in one group: the median of its runs (Gb/s; ``judged_gbps``), the runs
    themselves (sorted), and whether that figure is slow against the group's references."""

    a: str
    b: str
    gbps: float
    runs_gbps: tuple[float, ...]
    slow: bool
    doubtful: bool = False  # slow, or half-way there (``GroupReference.is_doubtful``): shows no NIC good

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
    members: tuple[str, ...] = ()  # the hosts of its pairs, sorted
    job_level: bool = False  # ``fleet_gbps`` is a small group's level (``job_level``), not a fleet's
    # The fleet level's own error (Gb/s, a standard deviation): a level from a rail's twenty pairs is
    # off by a third of a spread, and every z against it carries that (gpudiag.links.attribution).
    level_error_gbps: float = 0.0
    # The pair figures the fleet level rests on (slow ones set aside; 0: ``pairs``): a rail of 11
    # pairs whose level rested on its 4 healthy ones was as sure as 11, and failed a healthy pair.
    level_pairs: float = 0.0

    @property
    def level_count(self) -> float:
        """The pairs the fleet level rests on (``level_pairs``, else ``pairs``)."""
        return self.level_pairs or self.pairs

    @property
    def reference_gbps(self) -> float | None:
        """The group's expected figure: the fleet level, else the baseline's median, else the floor."""
        if self.fleet_gbps is not None:
            return self.fleet_gbps
        return self.baseline.median_gbps if self.baseline is not None else self.floor_gbps

    @property
    def reference_source(self) -> str:
        """Where ``reference_gbps`` comes from: FLEET, BASELINE or LINE_RATE (the floor)."""
        if self.fleet_gbps is not None:
            return FLEET
        return BASELINE if self.baseline is not None else LINE_RATE

    @property
    def compared(self) -> bool:
        """Its pairs are judged against something (a fleet, a job's own level, a baseline, a floor)."""
        return self.reference_gbps is not None

    @property
    def level_checked(self) -> bool:
        """Its level itself was compared with a reference outside it: a fleet of ``min_hosts``,
        a baseline or the line rate. A small group's own level finds the slow parts among its
        hosts, but not a cause they all share: that is said (``unchecked``), never passed."""
        return (self.fleet_gbps is not None and not self.job_level) or self.baseline is not None \
            or self.floor_gbps is not None

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
        baseline unless only the floor finds it slow. A small group's own level comes last:
        the baseline and the line rate are firmer ground."""
        if self.job_level:
            if self._baseline_flags(gbps, thresholds):
                return BASELINE
            if self._floor_flags(gbps, thresholds):
                return LINE_RATE
            return FLEET
        if self._fleet_flags(gbps, thresholds):
            return FLEET
        if self._baseline_flags(gbps, thresholds):
            return BASELINE
        if self.fleet_gbps is not None:
            return FLEET
        return BASELINE if self.baseline is not None and not self._floor_flags(gbps, thresholds) else LINE_RATE

    def value_gbps(self, source: str) -> float:
        """The figure of the reference ``source`` (LINE_RATE: the line rate itself; the floor is
        how far below it a healthy link may fall). Raises ValueError when the group lacks it."""
        value = {FLEET: self.fleet_gbps, LINE_RATE: self.group.line_rate_gbps if self.floor_gbps else None,
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
        """Sigmas from the baseline's median (``source`` BASELINE), else from the fleet level (a
        sigma of the pairs' spread and the level's own error together); None without that
        reference."""
        if source == BASELINE and self.baseline is not None:
            return self.baseline.robust_z(gbps)
        if self.fleet_gbps is None or self.spread_gbps is None:
            return None
        # the pairs' spread and the level's own error together
        return (gbps - self.fleet_gbps) / math.hypot(self.spread_gbps, self.level_error_gbps)

    def is_slow(self, gbps: float, thresholds: LinkThresholds) -> bool:
        """Both far (robust z) and materially (deficit) below the fleet level or the baseline,
        or below the line-rate floor (unless the whole group is below the baseline or the floor:
        then the ``LinkShift`` says so)."""
        return (self._fleet_flags(gbps, thresholds) or self._baseline_flags(gbps, thresholds)
                or self._floor_flags(gbps, thresholds))

    def widened(self, noise_gbps: float) -> GroupReference:
        """This reference with a spread of at least ``noise_gbps``, where it has a level: the
        least spread its family's measurements show (the other rails', or a small job's run-to-run
        noise), so that one rail's MAD, low by chance, does not make noise a finding."""
        if self.spread_gbps is None or self.spread_gbps >= noise_gbps:
            return self
        return dataclasses.replace(self, spread_gbps=noise_gbps)

    def is_doubtful(self, gbps: float, thresholds: LinkThresholds) -> bool:
        """Slow, or half-way to slow against the fleet (or job) level or the baseline: half the
        deficit and half the sigmas. Such a pair shows neither of its NICs good: a NIC 8 % slow
        measured with noise is 4 % slow with one partner now and then."""
        if self.is_slow(gbps, thresholds) or self.near_floor(gbps, thresholds):
            return True
        half = dataclasses.replace(thresholds, deficit_pct=thresholds.deficit_pct / 2, robust_z=thresholds.robust_z / 2)
        return self._fleet_flags(gbps, half) or self._baseline_flags(gbps, half)

    def near_floor(self, gbps: float, thresholds: LinkThresholds) -> bool:
        """Over the line-rate floor by less than half ``deficit_pct`` in a group with no fleet level
        (a small job): shows neither NIC good. Two NICs 10 % slow of three put every pair near the
        floor; one lifted over it made both good, and the healthy third was drained."""
        if self.floor_gbps is None or self.shifted or (self.fleet_gbps is not None and not self.job_level):
            return False
        return gbps < self.floor_gbps * (1 + thresholds.deficit_pct / 200)

    def _fleet_flags(self, gbps: float, thresholds: LinkThresholds) -> bool:
        if self.fleet_gbps is None:
            return False
        z = self.robust_z(gbps)
        deficit = 100 * (self.fleet_gbps - gbps) / self.fleet_gbps
        return z is not None and deficit >= thresholds.deficit_pct and z <= thresholds.robust_z

    def _baseline_flags(self, gbps: float, thresholds: LinkThresholds) -> bool:
        """Far and materially below the baseline, in a group with no fleet level of its own (a
        small job): where the fleet has one, it judges the pairs and the baseline its level
        (``baseline_shifted``): a fleet a little below its baseline would otherwise turn its own
        noise into slow pairs."""
        return (self.baseline is not None and not self.baseline_shifted
                and (self.fleet_gbps is None or self.job_level) and self.baseline.flags(gbps, thresholds))

    def _floor_flags(self, gbps: float, thresholds: LinkThresholds) -> bool:
        """Below the line-rate floor and, where the group has a level of its own, far below it
        too (robust z): in a noisy fabric a healthy pair dips under the floor by chance."""
        if self.floor_gbps is None or self.shifted or gbps >= self.floor_gbps:
            return False
        z = self.robust_z(gbps)
        return z is None or z <= thresholds.robust_z

    def describe(self, source: str | None = None) -> str:
        """``fleet 392.0 Gb/s; line rate 400 Gb/s`` (or the floor alone with too few hosts), or
        for ``source`` BASELINE ``baseline nightly 391.0 Gb/s (median of 40 pair figures); …``."""
        line = self.group.line_rate_gbps
        if source == BASELINE and self.baseline is not None:
            base = self.baseline
            text = f"baseline {base.name} {fixed(base.median_gbps)} {UNIT} (median of {base.count} pair figures)"
            if self.fleet_gbps is not None:
                text += f"; fleet {fixed(self.fleet_gbps)} {UNIT}"
            return text if line is None else f"{text}; line rate {line:g} {UNIT}"
        if self.fleet_gbps is None or (source == LINE_RATE and self.floor_gbps is not None):
            floor = fixed(self.floor_gbps)
            share = pct(self.floor_share_pct)
            return f"line rate {line:g} {UNIT} (a healthy link reaches {share} = {floor} {UNIT})"
        if self.job_level:
            text = f"job level {fixed(self.fleet_gbps)} {UNIT} (the healthy pairs of its {self.hosts} hosts)"
        else:
            text = f"fleet {fixed(self.fleet_gbps)} {UNIT}"
        return text if line is None else f"{text}; line rate {line:g} {UNIT}"

    def to_dict(self) -> dict[str, object]:
        """The group and what judged it, for the sweep document's ``link_groups``: its level
        (``reference_gbps``) and where it came from (``fleet``, ``job``: a small job's own level,
        ``baseline`` or ``line_rate``), its spread, the line-rate floor, whether the level itself
        fell below the floor or the baseline."""
        source = "job" if self.job_level and self.fleet_gbps is not None else self.reference_source
        return {"backend": self.group.backend, "rail": self.group.rail, "line_rate_gbps": self.group.line_rate_gbps,
                "hosts": self.hosts, "pairs": self.pairs,
                "reference_gbps": None if self.reference_gbps is None else round(self.reference_gbps, 3),
                "reference_source": source if self.compared else None,
                "spread_gbps": None if self.spread_gbps is None else round(self.spread_gbps, 3),
                "floor_gbps": None if self.floor_gbps is None else round(self.floor_gbps, 3),
                "below_floor": self.shifted, "below_baseline": self.baseline_shifted}

    @property
    def floor_share_pct(self) -> float:
        line = self.group.line_rate_gbps
        return 0.0 if line is None or self.floor_gbps is None else 100 * self.floor_gbps / line


def pair_means(results: Iterable[LinkResult]) -> dict[LinkGroup, dict[Pair, float]]:
    """Each measured pair's figure in each group as it is judged (``judged_gbps``: the median of
    its runs), in Gb/s (results with an error carry no figure and are left out). Sorted by group,
    then pair."""
    runs: dict[LinkGroup, dict[Pair, list[float]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        if result.gbps is not None:
            runs[result.group][result.pair].append(result.gbps)
    return {group: {pair: judged_gbps(values) for pair, values in sorted(runs[group].items())}
            for group in sorted(runs, key=LinkGroup.sort_key)}


@dataclass(frozen=True)
class HostLinkFigures:
    """One host's pair figures in one group: how many ``partners`` gave a figure (a pair's is the
    median of its runs), the worst of them (``worst_gbps``, with ``worst_peer``), their median and
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


def group_baseline(group: LinkGroup, baseline: LinkBaseline | None,
                    thresholds: LinkThresholds) -> GroupBaseline | None:
    entry = None if baseline is None else baseline.get(group.baseline_key)
    if baseline is None or entry is None or not entry.median > 0:
        return None
    median = float(entry.median)
    spread = max(MAD_TO_SIGMA * float(entry.mad), median * thresholds.mad_floor_pct / 100)
    return GroupBaseline(str(baseline.name), median, spread, int(entry.count),
                         median * (1 - thresholds.deficit_pct / 100))


# The rails of one backend and line rate: the same hardware and the same measurement.
Family = tuple[str, float | None]


def family(group: LinkGroup) -> Family:
    return (group.backend, group.line_rate_gbps)


def line_rate_floor(group: LinkGroup, thresholds: LinkThresholds) -> float | None:
    """The lowest figure a healthy link of ``group`` reaches (Gb/s): ``line_rate_efficiency_pct`` of
    its line rate, for a backend of ``floor_backends``; None where the line rate is unknown or the
    backend cannot reach it (tcp against a NIC's own speed)."""
    if group.backend not in thresholds.floor_backends:
        return None
    return rate_floor(group.line_rate_gbps, thresholds)


def rate_floor(line_rate: float | None, thresholds: LinkThresholds) -> float | None:
    """``line_rate_efficiency_pct`` of ``line_rate`` (Gb/s; None where the line rate is unknown)."""
    return None if line_rate is None else line_rate * thresholds.line_rate_efficiency_pct / 100


def judged_gbps(runs: Sequence[float]) -> float:
    """A pair's figure as it is judged: the median of its runs (the mean of two). A pair is
    re-tested for a low run; from three runs on, that one run no longer decides it (a healthy
    pair that dipped once is judged by the runs that repeat its level), while a pair slow in
    most of its runs stays slow."""
    ordered = sorted(runs)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else mean_gbps(ordered[middle - 1:middle + 1])


def mean_gbps(values: Iterable[float]) -> float:
    ordered = sorted(values)
    return math.fsum(ordered) / len(ordered)  # fsum: the same figure in any input order


def rail_key(rail: int | None) -> int:
    return -1 if rail is None else rail
