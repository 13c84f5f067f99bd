"""From measured pair figures to suspects: which NIC, which link is slow, which pair could not be tested.

Results are grouped by baseline key — backend, rail and line rate — and groups are never pooled
(a 200 Gb/s rail is not compared with a 400 Gb/s one, nor perftest with tcp). In each group:

1. Every pair's figure is the median of its runs, the mean of two (a re-test adds a run).
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
   A rail's level is found setting pairs aside by its family's spread (the rails of one backend
   and line rate); its spread is at least the family's, pooled over every rail's pairs
   (``levels.family_spreads``); and the level's own error, from a rail's twenty pairs a third of a
   spread, joins the spread in every z (``GroupReference.level_error_gbps``).
3. A pair is slow when it falls both ``deficit_pct`` and ``robust_z`` below the fleet level, or
   both below the baseline (its MAD scaled by 1.4826, floored at ``mad_floor_pct`` of its
   median), or below the line-rate floor.
4. Attribution, per group. A host is *known good* when some pair of it is not slow (a slow NIC
   slows every pair it is in) nor, where the floor alone judges, just over it (``near_floor``).
   A host slow with every partner (two or more) is a ``NicSuspect``; it is confirmed once
   ``confirm_partners`` of those partners are known good (two slow links on one node look like
   its NIC until a third known-good partner is slow with it too) and, in a group with a fleet
   level, its pairs but the two lowest (those that made it a suspect, or lower still) are slow
   again by their mean: a pair chosen for being slow cannot also confirm it (``_fresh_pairs``;
   clearly fine again, it is ``cleared``, a dip). In a group with fewer
   known-good hosts than that (a small job), once it is slow with every one of them, two at
   least. Hosts slow only with each other (no known-good host among them) stay unconfirmed:
   which of them is slow cannot be told. A slow pair whose ends are not such hosts is a
   ``LinkSuspect`` (``slow_link``: both ends fine with other partners), confirmed when two runs
   or more fell below and so does their mean. An end tested with that one partner only, or with
   no other pair clearly good (``near_floor``), is *undecided*: its NIC could equally be the
   cause, and the suspect says so. A pair with no figure at all is a ``LinkError`` naming both
   ends and why, unless the error is one end's own (``LinkResult.fault``: its pair server did
   not start, or its client printed no valid record): that is a ``HostLinkError`` of that end
   alone, and its partner is neither blamed nor named.
5. What is not settled — unconfirmed NICs, undecided ends, unconfirmed links, hosts whose own
   line rate no pair reached while another host runs at it (gpudiag.links.unreached) — comes
   back as ``Suspects`` for ``confirm_rounds``, with the hosts that ``passed`` (known good everywhere
   they were compared and, in a shifted group, at the floor; most trusted first) as partners.

Pure: the same results, in any order, give the same suspects (sorted, figures summed exactly).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..words import deficit_text, fixed, pct, plural
from .acrossrails import SlowAcrossRails, across_rails, doubtful_pairs
from .again import RETEST_ALPHA, Retests, judge_again, retests_of
from .groups import (  # noqa: F401 - LinkResult, LinkThresholds, BACKENDS... are this module's API too
    BACKENDS,
    BASELINE,
    DEFAULT_THRESHOLDS,
    FLEET,
    LINE_RATE,
    UNIT,
    BaselineFigure,
    Family,
    GroupBaseline,
    GroupReference,
    HostLinkFigures,
    LinkBaseline,
    LinkGroup,
    LinkResult,
    LinkThresholds,
    PairFigure,
    family,
    group_baseline,
    host_link_figures,
    judged_gbps,
    link_thresholds,
    mean_gbps,
    pair_means,
    rail_key,
)
from .levels import group_references
from .linkerrors import HostLinkError, LinkError, link_error, listed, merged, own_errors  # noqa: F401 - API too
from .linkerrors import host_errors as host_errors_of
from .linksacross import SlowLinkAcrossRails, links_across_rails
from .schedule import Pair, Suspects
from .unreached import unreached_rates
from .verdicts import LinkAttribution, LinkShift, LinkSuspect, NicSuspect


def attribute_links(results: Iterable[LinkResult], thresholds: LinkThresholds = DEFAULT_THRESHOLDS, *,
                    baseline: LinkBaseline | None = None) -> LinkAttribution:
    """Suspects from link ``results`` (any order; screen, confirm and full runs together — a
    re-test of a pair is one more run of it), against the fleet, the line rate and, for the
    groups it has an entry for (``LinkGroup.baseline_key``), the stored ``baseline`` (e.g. a
    gpudiag.store.baselines.Baseline). See the module docstring for the rules."""
    figures: dict[LinkGroup, dict[Pair, list[float]]] = defaultdict(lambda: defaultdict(list))
    failures: dict[tuple[str, int | None, Pair], set[str]] = defaultdict(set)
    own: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))  # host -> partner -> reasons
    results = list(results)
    for result in results:
        if result.gbps is None and result.fault is not None:
            partner = result.b if result.fault == result.a else result.a
            own[result.fault][partner].add(str(result.error))
        elif result.gbps is None:
            failures[(result.backend, result.rail, result.pair)].add(str(result.error))
        else:
            figures[result.group][result.pair].append(result.gbps)
    references = group_references(figures, thresholds, baseline)
    retests = retests_of(figures)  # each slow pair run again is judged on its runs after the lowest
    outcomes = [_judge_group(group, figures[group], reference, thresholds, retests=retests)
                for group, reference in references.items()]
    above_of = {group: _good_above(group, outcomes) for group in references}
    if any(reference.shifted and above_of[group] for group, reference in references.items()):
        # A group below its line rate by the best pairs of hosts a higher line rate shows good:
        # theirs here are their partners' (group_reference). Judged again without them.
        references = group_references(figures, thresholds, baseline, above_of)
        outcomes = [_judge_group(group, figures[group], reference, thresholds, retests=retests)
                    for group, reference in references.items()]
    # A pair between two line rates runs in the lower rate's group, where the faster end has
    # only such pairs: its NIC shown good at a higher line rate on the same backend and rail is
    # good there too (never the other way: a NIC 8 % slow at 400 Gb/s still fills a 200 Gb/s line).
    outcomes = [_judge_group(group, figures[group], references[group], thresholds, above, retests)
                if (above := _good_above(group, outcomes)) else outcome
                for group, outcome in zip(references, outcomes, strict=True)]
    measured = {(group.backend, group.rail, pair) for group, pairs in figures.items() for pair in pairs}
    errors = tuple(link_error(backend, rail, pair, reasons) for (backend, rail, pair), reasons
                   in sorted(failures.items(), key=lambda item: (item[0][2], item[0][0], rail_key(item[0][1])))
                   if (backend, rail, pair) not in measured)
    suspect_hosts = sorted({host for outcome in outcomes for host in outcome.suspect_hosts})
    suspect_pairs = sorted({pair for outcome in outcomes for pair in outcome.suspect_pairs})
    nics = [v for outcome in outcomes for v in outcome.nics]
    confirmed = {(v.host, v.backend) for v in nics if v.confirmed}
    # a NIC slow on every rail: a small job's, or a fleet's a little slow (each rail's pairs alone miss it)
    good_above = _good_at_higher_rates(outcomes)
    across = [_across(slow) for slow in across_rails(figures, references, thresholds, good_above)
              if (slow.host, slow.backend) not in confirmed]
    # a small job's host left in doubt on one run: its family's pairs run again
    suspect_pairs = sorted(set(suspect_pairs) | doubtful_pairs(figures, references, thresholds, good_above))
    nics += across
    suspect_hosts = sorted(set(suspect_hosts) | {v.host for v in across if not v.confirmed})
    # a link slow on every rail of a fleet, both ends fine elsewhere (each rail's pairs alone miss it)
    slow_nics = frozenset(v.host for v in nics if v.confirmed or v.rail is None)
    confirmed_links = {(v.a, v.b, v.backend) for outcome in outcomes for v in outcome.links if v.confirmed}
    across_links = [_across_link(slow) for slow in links_across_rails(figures, references, thresholds, slow_nics,
                                                                       RETEST_ALPHA)
                    if (slow.a, slow.b, slow.backend) not in confirmed_links]
    suspect_pairs = sorted(set(suspect_pairs) | {(v.a, v.b) for v in across_links if not v.confirmed})
    nics = tuple(sorted(nics, key=lambda v: (v.host, v.backend, rail_key(v.rail))))
    links = tuple(sorted([v for outcome in outcomes for v in outcome.links] + across_links,
                         key=lambda v: (v.a, v.b, v.backend, rail_key(v.rail))))
    host_errors = merged(own_errors(own), host_errors_of(errors, measured))
    # a host no pair reached the own line rate of, with a host at that rate to pair it with
    unreached = unreached_rates(results)
    suspect_hosts = sorted(set(suspect_hosts) | {u.host for u in unreached if u.peers})
    return LinkAttribution(
        nics=nics, links=links, errors=errors, host_errors=host_errors,
        shifts=tuple(outcome.shift for outcome in outcomes if outcome.shift is not None),
        references=tuple(outcome.reference for outcome in outcomes),
        suspects=Suspects(tuple(suspect_hosts), tuple(suspect_pairs)),
        passed=_passed(outcomes, set(suspect_hosts) | {v.host for v in nics} | set(own)),
        good=tuple(sorted({host for outcome in outcomes for host in outcome.good}
                          - set(suspect_hosts) - {v.host for v in nics} - set(own))),
        unreached=unreached)


@dataclass(frozen=True)
class _GroupOutcome:
    reference: GroupReference
    nics: tuple[NicSuspect, ...]
    links: tuple[LinkSuspect, ...]
    shift: LinkShift | None
    suspect_hosts: frozenset[str]
    suspect_pairs: frozenset[Pair]
    trusted: frozenset[str]  # known good (and, in a shifted group, at the floor): confirm partners
    clean: frozenset[str]  # hosts with no slow pair
    hosts: frozenset[str]
    good: frozenset[str] = frozenset()  # a pair clearly good (not even half-way slow), no NIC suspect


def _across(slow: SlowAcrossRails) -> NicSuspect:
    """A NIC slow across its rails (gpudiag.links.acrossrails) as a suspect: a small job's confirmed,
    a fleet's once ``confirm_partners`` of its partners are not slow."""
    return NicSuspect(slow.host, slow.backend, None, slow.line_rate_gbps, slow.gbps, slow.level_gbps,
                      slow.deficit_pct, slow.robust_z, slow.pairs, slow.good, slow.confirmed, slow.evidence)


def _across_link(slow: SlowLinkAcrossRails) -> LinkSuspect:
    """A fleet's link slow across its rails (gpudiag.links.acrossrails) as a suspect (no rail: all
    of them); its value and deficit are its rails' mean, its confirmation its runs after the lowest
    (``runs_gbps``: that mean, and the re-test's figure once there is one)."""
    runs = (slow.gbps,) if slow.again_gbps is None else (slow.gbps, slow.again_gbps)  # run once, or re-tested
    return LinkSuspect(slow.a, slow.b, slow.backend, None, slow.line_rate_gbps, slow.gbps, runs,
                       slow.level_gbps, slow.deficit_pct, slow.robust_z, (), slow.confirmed, slow.evidence)


def _good_at_higher_rates(outcomes: Sequence[_GroupOutcome]) -> dict[Family, frozenset[str]]:
    """Per family (backend and line rate), the hosts whose NIC a group of a higher line rate on the
    same backend shows good (any rail)."""
    families = {family(outcome.reference.group) for outcome in outcomes}
    return {(backend, rate): frozenset(host for outcome in outcomes for host in outcome.good
                                       if (other := outcome.reference.group).backend == backend
                                       and other.line_rate_gbps is not None and other.line_rate_gbps > rate)
            for backend, rate in families if rate is not None}


def _good_above(group: LinkGroup, outcomes: Sequence[_GroupOutcome]) -> frozenset[str]:
    """The hosts whose NIC a group of a higher line rate on ``group``'s backend and rail shows good."""
    if group.line_rate_gbps is None:
        return frozenset()
    return frozenset(host for outcome in outcomes for host in outcome.good
                     if (other := outcome.reference.group).backend == group.backend and other.rail == group.rail
                     and other.line_rate_gbps is not None and other.line_rate_gbps > group.line_rate_gbps)


def _judge_group(group: LinkGroup, runs: Mapping[Pair, Sequence[float]], reference: GroupReference,
                 thresholds: LinkThresholds, good_elsewhere: frozenset[str] = frozenset(),
                 retests: Retests | None = None) -> _GroupOutcome:
    figures = [_pair_figure(pair, runs[pair], reference, thresholds) for pair in sorted(runs)]
    hosts = frozenset(host for pair in runs for host in pair)
    if not reference.compared:
        return _GroupOutcome(reference, (), (), None, frozenset(), frozenset(), frozenset(), frozenset(), hosts)
    mine: dict[str, list[PairFigure]] = defaultdict(list)
    for figure in figures:
        mine[figure.a].append(figure)
        mine[figure.b].append(figure)
    culprits = _culprits(mine, reference, thresholds, good_elsewhere)
    known_good = frozenset(host for host, pairs in mine.items() if host not in culprits and (
        host in good_elsewhere or any(not _slow_again(f, reference, thresholds)
                                      and not reference.near_floor(_again_gbps(f), thresholds) for f in pairs)))
    alone = {host for host, pairs in mine.items() if host not in known_good and len(pairs) == 1}
    unproven = set(mine) - known_good - culprits - alone - good_elsewhere
    nics = tuple(_nic_suspect(host, mine[host], known_good, reference, thresholds,
                              _partners_wanted(host, known_good, thresholds)) for host in sorted(culprits))
    links = _link_suspects(figures, culprits, alone, unproven, mine, reference, thresholds, retests or Retests())
    trusted, doubting = known_good, set()
    floor = reference.shift_floor_gbps
    if floor is not None:
        at_floor = {host for host, pairs in mine.items() if any(f.gbps >= floor for f in pairs)}
        trusted = known_good & at_floor
        doubting = _doubting_shift(mine, at_floor, trusted, thresholds, reference)
    # ``alone``: slow with the one partner it had, so its NIC is not known either way yet
    suspect_hosts = {v.host for v in nics if not v.confirmed and not v.cleared} | alone | doubting | \
        {host for v in links for host in v.undecided if host in unproven}
    suspect_pairs = {(v.a, v.b) for v in links if not v.confirmed}
    if len(mine) == 2 and doubting:
        # the group's one pair (two hosts of a line rate in a job of several rates): run it again,
        # as a 2-node job's; their partners at other rates say nothing of these NICs' rate
        suspect_pairs |= set(runs)
    clean = frozenset(host for host, pairs in mine.items() if not any(f.slow for f in pairs))
    good = frozenset(host for host, pairs in mine.items()
                     if host not in culprits and any(not f.doubtful for f in pairs))
    return _GroupOutcome(reference, nics, links, _shift(reference, figures, doubting), frozenset(suspect_hosts),
                         frozenset(suspect_pairs), frozenset(trusted), clean, hosts, good)


# Partners shown clearly good that a NIC slow by the median of its pairs with them needs: the
# median of two healthy pairs dips past the bar by chance too often.
MEDIAN_PARTNERS = 3


def _slow_by_median(with_good: Sequence[float], reference: GroupReference, thresholds: LinkThresholds) -> bool:
    """``MEDIAN_PARTNERS`` pairs with clearly good partners or more whose median is slow, their
    best within the noise of it (``robust_z`` spreads): one NIC slows its pairs alike, where two
    slow links and a healthy pair on one node differ by far more than noise."""
    if len(with_good) < MEDIAN_PARTNERS or reference.spread_gbps is None:
        return False
    median = statistics.median(with_good)
    return reference.is_slow(median, thresholds) and \
        max(with_good) - median <= -thresholds.robust_z * reference.spread_gbps


def _culprits(mine: Mapping[str, Sequence[PairFigure]], reference: GroupReference, thresholds: LinkThresholds,
              good_elsewhere: frozenset[str] = frozenset()) -> set[str]:
    """The hosts whose NIC is slow: slow with every partner (two or more) — or, with two or more
    partners shown clearly good (a pair of theirs neither slow nor half-way: ``doubtful``), slow
    by the median of its pairs with them, none of its pairs clearly good. A NIC a little slow
    measured with noise is slow with most partners and only a little below with the rest: each
    such pair alone would read as a slow link. ``good_elsewhere``: hosts whose NIC a group of
    another line rate on the same backend and rail shows good: never culprits, and good partners."""
    clear = {host for host, pairs in mine.items() if any(not f.doubtful for f in pairs)} | good_elsewhere
    found = set()
    for host, pairs in mine.items():
        if len(pairs) < 2 or host in clear:
            continue
        with_good = sorted(f.gbps for f in pairs if f.peer(host) in clear)
        if all(_slow_again(f, reference, thresholds) for f in pairs) or \
                _slow_by_median(with_good, reference, thresholds):
            found.add(host)
    return found


def _slow_again(figure: PairFigure, reference: GroupReference, thresholds: LinkThresholds) -> bool:
    """Whether ``figure`` is slow, a pair run twice on its higher run: it was run again for its
    low one, which cannot also hold its ends' NICs slow (again.judge_again; from three runs on,
    the median leaves that run out). A 4-node job's one healthy pair beside two NICs at 60 %, 336
    then 376 Gb/s on one rail at 4 % link noise, stayed under the 360 floor on the mean of both,
    and its two ends were left unchecked, slow with every partner there."""
    return figure.slow and (len(figure.runs_gbps) != 2 or reference.is_slow(_again_gbps(figure), thresholds))


def _again_gbps(figure: PairFigure) -> float:
    """``figure``'s Gb/s as its ends' NICs are judged by it: a pair run twice, its higher run
    (``_slow_again``); else its figure."""
    return max(figure.runs_gbps) if len(figure.runs_gbps) == 2 else figure.gbps


def _link_suspects(figures: Sequence[PairFigure], culprits: set[str], alone: set[str], unproven: set[str],
                   mine: Mapping[str, Sequence[PairFigure]], reference: GroupReference,
                   thresholds: LinkThresholds, retests: Retests) -> tuple[LinkSuspect, ...]:
    """A suspect for every slow pair that no slow NIC explains; its ends in ``alone`` (tested
    with this partner only) are undecided, and so are those in ``unproven`` (no other pair of
    theirs shows their NIC good: each is slow or only just over the floor): never confirmed."""
    links = []
    for figure in figures:
        ends = (figure.a, figure.b)
        if figure.slow and not culprits & set(ends):
            undecided = tuple(host for host in ends if host in alone or host in unproven)
            links.append(_link_suspect(figure, undecided, unproven, mine, reference, thresholds, retests))
    return tuple(links)


def _pair_figure(pair: Pair, runs: Sequence[float], reference: GroupReference,
                 thresholds: LinkThresholds) -> PairFigure:
    """The pair's figure as it is judged (``judged_gbps``: the median of its runs)."""
    mean = judged_gbps(runs)
    compared = reference.compared
    return PairFigure(pair[0], pair[1], mean, tuple(sorted(runs)), compared and reference.is_slow(mean, thresholds),
                      compared and reference.is_doubtful(mean, thresholds))


def _partners_wanted(host: str, known_good: frozenset[str], thresholds: LinkThresholds) -> int:
    """Known-good partners a slow NIC must be slow with to be confirmed: ``confirm_partners``,
    or in a group with fewer known-good hosts (a 3- or 4-node job, a paused job's suspect and
    its few reference peers) every one of them, two at least: slow with each healthy host there
    is, the NIC is the one part its slow pairs share."""
    return max(2, min(thresholds.confirm_partners, len(known_good - {host})))


# How far under its level (in its spreads) every pair of a small job's host with a known-good
# partner must lie for one run of each to confirm its NIC slow (``_far_below``).
FAR_SPREADS = 4.0


def _far_below(host: str, pairs: Sequence[PairFigure], known_good: frozenset[str], reference: GroupReference,
               thresholds: LinkThresholds) -> bool:
    """Whether every pair of ``host`` with a known-good partner lies too far under the group's
    level for a dip of one run: FAR_SPREADS of its spread, where the level has one (a job's own,
    with the noise of its rails), else ``link_deficit`` under its floor (or its expected figure,
    where it has no line rate). Nearer, a small job's NIC slow on one rail is confirmed only on
    two runs of two of those pairs (``_slow_again``): at 6 % link noise a healthy pair falls under
    the 90 % floor one run in eleven, and a 4-node job's healthy host, its third partner a NIC at
    50 %, was slow with all three on one rail, 351 and 353 Gb/s where a healthy pair reads 392,
    and was drained."""
    expected = reference.reference_gbps
    if reference.spread_gbps is not None and expected is not None:  # a level with the noise of its rails
        bar = expected - FAR_SPREADS * reference.spread_gbps
    else:
        level = reference.floor_gbps if reference.floor_gbps is not None else expected
        if level is None:
            return False
        bar = level * (1 - thresholds.deficit_pct / 100)
    with_good = [f for f in pairs if f.peer(host) in known_good]
    return bool(with_good) and all(f.gbps <= bar for f in with_good)


def _nic_suspect(host: str, pairs: Sequence[PairFigure], known_good: frozenset[str], reference: GroupReference,
                 thresholds: LinkThresholds, wanted: int) -> NicSuspect:
    group = reference.group
    ordered = tuple(sorted(pairs, key=lambda f: f.peer(host)))
    good = tuple(f.peer(host) for f in ordered if f.peer(host) in known_good)
    # Against a small group's own level, one run a pair is a thin basis: where any of its pairs is
    # slow against that level alone (not the baseline or the line rate), two pairs with known-good
    # partners are run again. The median pair may be a slow partner's, below the floor, while the
    # pair that makes the host a suspect is a healthy one dipping under the job's level.
    firm = all(reference.judged_by(f.gbps, thresholds) != FLEET for f in ordered)
    repeated = sum(1 for f in ordered if len(f.runs_gbps) >= 2 and f.peer(host) in known_good)
    fresh = _fresh_pairs(host, ordered, known_good, reference, thresholds)
    gbps = fresh.gbps if fresh is not None else statistics.median(sorted(f.gbps for f in ordered))
    source = FLEET if fresh is not None else reference.judged_by(gbps, thresholds)
    if reference.fleet_gbps is not None and not reference.job_level:
        confirmed = len(good) >= wanted and fresh is not None and fresh.verdict == SLOW_AGAIN
    else:
        on_one_run = (firm or not reference.job_level) and _far_below(host, ordered, known_good, reference,
                                                                      thresholds)
        confirmed = len(good) >= wanted and (repeated >= 2 or on_one_run)
    cleared = len(good) >= wanted and fresh is not None and fresh.verdict == FINE_AGAIN
    deficit = reference.deficit_pct(gbps, source)
    figures = listed(f"{f.peer(host)} {fixed(f.gbps)}" for f in ordered)
    slow = sum(1 for f in ordered if f.slow)
    partners = (f"slow with all {plural(len(ordered), 'partner')}" if slow == len(ordered) else
                f"slow with {slow} of its {plural(len(ordered), 'partner')} and below the level with the rest "
                "(median of its pairs)")
    evidence = f"{host} {partners} on {group.describe()}: {figures} {UNIT} vs {reference.describe(source)}"
    evidence += f"; {fresh.note}" if fresh is not None else f"; {deficit_text(deficit)}"
    if not confirmed and len(good) < wanted:
        evidence += f" (not yet confirmed: {len(good)} of its partners known good, {wanted} wanted)"
    elif not confirmed and fresh is None and reference.fleet_gbps is not None and not reference.job_level:
        evidence += " (not yet confirmed: no pair with a known-good partner beyond those that made it a suspect)"
    elif not confirmed and not cleared and fresh is not None:
        evidence += " (not yet confirmed: neither slow again nor clearly fine with its further partners)"
    elif not confirmed and not cleared:
        evidence += (" (not yet confirmed: against a small group's own level, two of its pairs with known-good "
                     "partners are run twice)")
    return NicSuspect(host, group.backend, group.rail, group.line_rate_gbps, gbps, reference.value_gbps(source),
                      deficit, reference.robust_z(gbps, source), ordered, good, confirmed, evidence,
                      _source_label(source), cleared)


# The pairs that make a NIC a suspect: the screen tests every host with two partners, and a host
# slow with both is re-paired with a host that passed (gpudiag.links.schedule.confirm_rounds).
CHOOSING_PAIRS = 2
# A NIC's further pairs (``_fresh_pairs``) are slow again, fine again, or neither yet.
SLOW_AGAIN, FINE_AGAIN, UNSETTLED = "slow again", "fine again", "neither slow again nor clearly fine"


@dataclass(frozen=True)
class _Fresh:
    """A NIC suspect's pairs but its CHOOSING_PAIRS lowest, with known-good partners: their mean
    (Gb/s), its z against the level (sigma of such a mean, the level's error with it), and the verdict."""

    gbps: float
    robust_z: float
    verdict: str
    note: str


def _fresh_pairs(host: str, pairs: Sequence[PairFigure], known_good: frozenset[str], reference: GroupReference,
                 thresholds: LinkThresholds) -> _Fresh | None:
    """A NIC suspect in a group with a fleet level, judged on its pairs but the CHOOSING_PAIRS
    lowest, those with known-good partners (None: no such pair, or no fleet level). The pairs that
    made it a suspect were chosen for being slow: two healthy pairs a little low by chance, against
    a rail's level a spread high, made a healthy NIC "slow with every partner", and a third
    partner, merely below the level, confirmed it by the median of the three. Which pairs chose it
    is not known here (the attribution is the same whatever the order of its results); its lowest
    two are those or lower still, so what is left is judged no more harshly than the pairs after
    the suspicion. Their mean must fall ``deficit_pct`` and ``robust_z`` sigmas of such a mean (the
    rail's spread over the square root of the pairs, and the level's own error) below the level:
    slow again. Less than half of either: fine again (a dip, not a NIC). Else neither yet."""
    if reference.fleet_gbps is None or reference.job_level or reference.spread_gbps is None:
        return None
    later = sorted(pairs, key=lambda f: (f.gbps, f.peer(host)))[CHOOSING_PAIRS:]
    fresh = [f for f in later if f.peer(host) in known_good]
    if not fresh:
        return None
    gbps = mean_gbps(f.gbps for f in fresh)
    spread = math.hypot(reference.spread_gbps / math.sqrt(len(fresh)), reference.level_error_gbps)
    z = (gbps - reference.fleet_gbps) / spread
    deficit = reference.deficit_pct(gbps, FLEET)
    bar = -thresholds.robust_z
    if deficit >= thresholds.deficit_pct and z <= -bar:
        verdict = SLOW_AGAIN
    elif deficit < thresholds.deficit_pct / 2 or z > -bar / 2:
        verdict = FINE_AGAIN
    else:
        verdict = UNSETTLED
    partners = listed(f.peer(host) for f in fresh)
    note = (f"with {partners} beyond the two lowest pairs (those that made it a suspect, or lower still): "
            f"{'mean ' if len(fresh) > 1 else ''}{fixed(gbps)} {UNIT}, {deficit_text(deficit)}, "
            f"{-z:.1f} sigma of such a figure below the level with its error (bar {bar:.1f}): {verdict}")
    return _Fresh(gbps, z, verdict, note)


def _link_suspect(figure: PairFigure, undecided: tuple[str, ...], unproven: set[str],
                  mine: Mapping[str, Sequence[PairFigure]], reference: GroupReference,
                  thresholds: LinkThresholds, retests: Retests) -> LinkSuspect:
    group = reference.group
    runs = figure.runs_gbps
    source = reference.judged_by(figure.gbps, thresholds)
    # A run chosen for being slow cannot also confirm the pair: it is confirmed on its runs but
    # the lowest (the one that chose it, or one lower still: ``judge_again``), their figure slow too.
    again = judge_again(figure, reference, thresholds, retests)
    confirmed = again is not None and again.confirmed and figure.slow and not unproven & set(undecided)
    deficit = reference.deficit_pct(figure.gbps, source)
    measured = f"{fixed(figure.gbps)} {UNIT}"
    if len(runs) > 1:
        how = "mean" if len(runs) == 2 else "median"
        measured += f" ({how} of {len(runs)} runs: {', '.join(f'{fixed(value)}' for value in runs)})"
    evidence = (f"{figure.a} ↔ {figure.b} slow on {group.describe()}: {measured} vs {reference.describe(source)}; "
                f"{deficit_text(deficit)}")
    lone = [host for host in undecided if host not in unproven]
    doubted = [host for host in undecided if host in unproven]
    if lone:
        who = " and ".join(lone)
        evidence += (f"; {who} {'was' if len(lone) == 1 else 'were'} tested with this partner only, "
                     f"so {'its NIC' if len(lone) == 1 else 'either NIC'} may be the cause as well as the link")
    if doubted:
        evidence += (f"; no other pair of {' or '.join(doubted)} is clearly good (each slow or just over the "
                     f"line-rate floor), so {'its NIC' if len(doubted) == 1 else 'either NIC'} may be the cause "
                     "as well as the link")
    if not undecided:
        fine = [_fine_elsewhere(host, figure, mine[host]) for host in (figure.a, figure.b)]
        evidence += f"; both ends fine with other partners: {', '.join(fine)} {UNIT}"
    if again is not None:
        evidence += f"; {again.note}"
    if not confirmed:
        evidence += " (not yet confirmed by a re-test)"
    return LinkSuspect(figure.a, figure.b, group.backend, group.rail, group.line_rate_gbps, figure.gbps, runs,
                       reference.value_gbps(source), deficit, reference.robust_z(figure.gbps, source), undecided,
                       confirmed, evidence, _source_label(source))


def _source_label(source: str) -> str:
    # A finding judged by the floor alone has always said "fleet"; only the baseline is new.
    return BASELINE if source == BASELINE else FLEET


def _fine_elsewhere(host: str, slow: PairFigure, pairs: Sequence[PairFigure]) -> str:
    fine = sorted((f for f in pairs if (f.a, f.b) != (slow.a, slow.b) and not f.slow), key=lambda f: f.peer(host))
    if not fine:  # its NIC shown good at a higher line rate on this rail (``good_elsewhere``)
        return f"{host} at a higher line rate"
    return f"{host} with " + listed(f"{f.peer(host)} {fixed(f.gbps)}" for f in fine)


def _doubting_shift(mine: Mapping[str, Sequence[PairFigure]], at_floor: set[str], trusted: frozenset[str],
                    thresholds: LinkThresholds, reference: GroupReference) -> set[str]:
    """Hosts of a shifted group below the floor that cannot yet tell the shift from faults of
    their own or their partners': fewer than ``confirm_partners`` partners (in a small job,
    every other host of it, and the one pair of a 2-node job run twice), or, where some hosts do
    reach the floor, none of them among their partners."""
    wanted = thresholds.confirm_partners
    if reference.job_level:
        wanted = max(1, min(wanted, len(mine) - 1))
    return {host for host, pairs in mine.items() if host not in at_floor
            and (len(pairs) < wanted or (len(mine) == 2 and len(pairs[0].runs_gbps) < 2)
                 or (trusted and not trusted & {f.peer(host) for f in pairs}))}


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
                 f"{pct(reference.floor_share_pct)} of line rate {line:g} {UNIT} = "
                 f"{fixed(reference.floor_gbps)} {UNIT}")
    base = reference.baseline if reference.baseline_shifted else None
    if base is not None:
        evidence = (f"links on {group.describe()} run below baseline {base.name}: fleet {fixed(fleet)} {UNIT} vs "
                    f"baseline {base.name} {fixed(base.median_gbps)} {UNIT} (median of {base.count} pair figures), "
                    f"{deficit_text(base.deficit_pct(fleet))}; {below} of {plural(len(figures), 'pair')} below "
                    f"{fixed(base.cutoff_gbps)} {UNIT}")
        if reference.shifted:
            evidence += f"; below its line rate too ({line_text})"
    else:
        evidence = (f"links on {group.describe()} run below their line rate: fleet {fixed(fleet)} {UNIT} vs "
                    f"{line_text}; {below} of {plural(len(figures), 'pair')} below")
    if len(figures) == 1:  # one pair: either end's NIC, or the fabric between them
        a, b = figures[0].a, figures[0].b
        evidence += (f" — the one pair {a} ↔ {b}: either end's NIC or the fabric between them (one pair cannot "
                     "tell which)")
    else:
        evidence += " — a cause the fabric shares (switch ports, cabling, firmware, congestion control), not one NIC"
    if not confirmed:
        what = "the baseline's cutoff" if base is not None else "the floor"
        evidence += (f" (not yet confirmed: {plural(len(doubting), 'host')} below {what} lack a partner that reaches "
                     f"it, or enough partners)")
    return LinkShift(group.backend, group.rail, line, fleet, floor, below, len(figures), confirmed, evidence,
                     None if base is None else base.median_gbps, None if base is None else base.name)


def _passed(outcomes: Sequence[_GroupOutcome], excluded: set[str]) -> tuple[str, ...]:
    compared = [outcome for outcome in outcomes if outcome.reference.compared]
    hosts = {host for outcome in compared for host in outcome.hosts} - excluded
    good = {host for host in hosts if all(host in o.trusted for o in compared if host in o.hosts)}
    clean = {host for host in good if all(host in o.clean for o in compared if host in o.hosts)}
    return (*sorted(clean), *sorted(good - clean))
