"""The link figures of a sweep document as the reports show them (docs/document.md, links).

One figure per pair and rail: the median of that pair's runs on the rail (a confirm round adds a
run). Each figure is read against the reference of its group — backend, rail and line rate, never
pooled — which is the median of the group's pair figures. Per host: its measured partners, worst
first, and the link findings (``slow_nic``, ``slow_link``, ``link_error``) that name it. Hosts are
ordered for someone on call: hosts named by a link finding first (``slow_nic``, then the ends of
a ``slow_link``, then those of a ``link_error``; ``fail`` before ``warn``, the largest deficit
first), then hosts with an error pair, then every other host by its worst pair. A host's worst
pair leaves out partners whose own finding explains the pair (a ``slow_nic`` or ``nic_port`` of
the partner): one slow NIC would otherwise make every host it was paired with look slow. Hosts of
the sweep that no pair test reached are ``not tested``, with the reason the document gives.

Pure and tolerant of stored documents: a missing key counts as null, an entry with no number is
a pair that could not be tested, entries of another metric are counted, not shown.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..findings import Kind, Severity
from ..schema.fields import is_finite_number
from ..words import deficit_text, fixed, plural, share_text
from .phrasing import OK, Document, _findings, _hosts

LINK_METRIC = "gbps"
LINK_UNITS = {"gbps": "Gbit/s"}
# Rows named by a link finding come first, in this order of kinds.
ROW_KINDS = (Kind.SLOW_NIC, Kind.SLOW_LINK, Kind.LINK_ERROR)
# A finding of these kinds about a host explains every pair of it: its partners' worst pair leaves it out.
EXPLAINING_KINDS = (Kind.SLOW_NIC, Kind.NIC_PORT)
SEVERITY_RANK = {Severity.FAIL: 0, Severity.WARN: 1}
# The status word of the ``unchecked`` finding for a host left out of the link rounds (plan.py).
NOT_PAIR_TESTED = "not pair-tested"
NO_FIGURE = "no figure"

Pair = tuple[str, str]
# (backend, rail, line rate in Gb/s): the baseline key of a link figure.
GroupKey = tuple[str, int | None, float | None]


@dataclass(frozen=True)
class RailFigure:
    """A pair's figure on one backend and rail: ``gbps`` is the median of the runs that gave a
    figure (None: every run failed, ``errors`` say why), against ``reference_gbps``, the reference
    its group was judged against (the document's ``link_groups``; in a document without them,
    the median pair figure of the group; None when the group has no figure at all)."""

    backend: str
    rail: int | None
    line_rate_gbps: float | None
    gbps: float | None
    runs: int
    errors: tuple[str, ...]
    reference_gbps: float | None

    @property
    def group(self) -> GroupKey:
        return (self.backend, self.rail, self.line_rate_gbps)

    @property
    def ratio(self) -> float | None:
        """The figure over its group's reference (1.0 = at it); None without either."""
        if self.gbps is None or not self.reference_gbps:
            return None
        return self.gbps / self.reference_gbps

    @property
    def line_rate_pct(self) -> float | None:
        """The figure in percent of the port's line rate; None where that is unknown."""
        if self.gbps is None or not self.line_rate_gbps:
            return None
        return 100 * self.gbps / self.line_rate_gbps


@dataclass(frozen=True)
class PairFigures:
    """Every rail figure of one unordered pair (``a`` < ``b``), in group order; ``worst`` is the
    measured rail furthest below its reference (None when no rail gave a figure) and ``errors``
    the rails on which the pair could not be tested at all. Made by ``pair_figures``."""

    a: str
    b: str
    rails: tuple[RailFigure, ...]
    worst: RailFigure | None
    errors: tuple[RailFigure, ...]

    @property
    def worst_ratio(self) -> float | None:
        worst = self.worst
        return None if worst is None else worst.ratio

    def partner(self, host: str) -> str:
        return self.b if host == self.a else self.a


@dataclass(frozen=True)
class HostRow:
    """One host: its partners (errors first, then the worst pair first), the link findings that
    name it (cost order), whether it is a suspect (named by a finding, or with an error pair),
    its worst pair and the partners left out of choosing it (``explained``)."""

    host: str
    partners: tuple[PairFigures, ...]
    findings: tuple[Mapping[str, Any], ...]
    suspect: bool
    # The partner pair with the lowest ratio to its reference, among partners whose own finding
    # does not explain the pair (all partners when every one is explained); None without a figure.
    worst: PairFigures | None
    # Partners with a figure whose own finding (EXPLAINING_KINDS) explains their pair with this host.
    explained: tuple[str, ...] = ()

    @property
    def worst_ratio(self) -> float | None:
        worst = self.worst
        return None if worst is None else worst.worst_ratio

    @property
    def error_pairs(self) -> int:
        return sum(1 for pair in self.partners if pair.errors)

    @property
    def rails(self) -> tuple[tuple[str, int | None], ...]:
        """(backend, rail) of every figure of the host's pairs, sorted."""
        return tuple(sorted({(r.backend, r.rail) for pair in self.partners for r in pair.rails}, key=_rail_key))


@dataclass(frozen=True)
class LinkGroup:
    """One baseline key: its reference (the level its pairs were judged against, None without any) and how many pairs
    gave a figure and how many could not be tested."""

    backend: str
    rail: int | None
    line_rate_gbps: float | None
    reference_gbps: float | None
    pairs: int
    error_pairs: int


@dataclass(frozen=True)
class NotTested:
    """A host of the sweep that no pair test reached, and why (as the document says)."""

    host: str
    reason: str


@dataclass(frozen=True)
class BackendCounts:
    """What one backend measured: pairs, rails, pair-rail figures, and pairs and pair-rails that
    could not be tested."""

    backend: str
    pairs: int
    rails: tuple[int | None, ...]
    figures: int
    error_pairs: int
    error_rails: int


@dataclass(frozen=True)
class LinkView:
    """The link figures of one sweep document (``link_view``)."""

    metric: str
    unit: str
    groups: tuple[LinkGroup, ...]
    pairs: Mapping[Pair, PairFigures]
    rows: tuple[HostRow, ...]
    not_tested: tuple[NotTested, ...]
    shifts: tuple[Mapping[str, Any], ...]
    other_metric_entries: int

    @property
    def error_pairs(self) -> tuple[PairFigures, ...]:
        return tuple(pair for pair in self.pairs.values() if pair.errors)

    @property
    def figures(self) -> int:
        """Pair-rail figures (each the median of its runs)."""
        return sum(1 for pair in self.pairs.values() for rail in pair.rails if rail.gbps is not None)

    def slowest_pairs(self, count: int) -> list[PairFigures]:
        """The ``count`` measured pairs furthest below their reference, worst first."""
        measured = [pair for pair in self.pairs.values() if pair.worst is not None]
        return sorted(measured, key=_pair_order)[:count]

    def backends(self) -> list[BackendCounts]:
        """Counts per backend, in name order."""
        pairs: dict[str, set[Pair]] = defaultdict(set)
        errors: dict[str, set[Pair]] = defaultdict(set)
        rails: dict[str, set[int | None]] = defaultdict(set)
        figures: Counter[str] = Counter()
        error_rails: Counter[str] = Counter()
        for key, pair in self.pairs.items():
            for rail in pair.rails:
                pairs[rail.backend].add(key)
                rails[rail.backend].add(rail.rail)
                if rail.gbps is None:
                    errors[rail.backend].add(key)
                    error_rails[rail.backend] += 1
                else:
                    figures[rail.backend] += 1
        return [BackendCounts(backend, len(pairs[backend]), tuple(sorted(rails[backend], key=_none_last)),
                              figures[backend], len(errors[backend]), error_rails[backend])
                for backend in sorted(pairs)]


def link_view(document: Document) -> LinkView:
    """The link figures of ``document`` (its ``links``, ``findings`` and ``hosts``)."""
    entries = [link for link in document.get("links") or [] if isinstance(link, Mapping)]
    metric = _main_metric(entries)
    kept = [link for link in entries if str(link.get("metric") or LINK_METRIC) == metric]
    runs = _runs(kept)
    references = {**_references(runs), **_judged_references(document)}
    pairs = _pair_figures(runs, references)
    findings = _link_findings(document)
    rows = _rows(pairs, findings, _explaining_hosts(document))
    tested = {host for pair in pairs for host in pair}
    return LinkView(metric=metric, unit=_unit(kept, metric), groups=_groups(pairs, references), pairs=pairs,
                    rows=rows, not_tested=_not_tested(document, tested) if entries else (),
                    shifts=tuple(f for f in _findings(document) if f.get("kind") == Kind.FLEET_SHIFT
                                 and str(f.get("metric") or "").startswith("link.")),
                    other_metric_entries=len(entries) - len(kept))


def rail_label(backend: str, rail: int | None, *, with_backend: bool = True) -> str:
    """``tcp rail 3``, ``rail 3`` (without the backend), ``tcp`` for a figure with no rail."""
    if rail is None:
        return backend
    return f"{backend} rail {rail}" if with_backend else f"rail {rail}"


def rails_text(rails: Sequence[tuple[str, int | None]]) -> str:
    """``0-7``, ``0-3,6``; ``tcp 0-7; perftest 0-1`` when several backends; ``-`` for no rail."""
    by_backend: dict[str, list[int | None]] = defaultdict(list)
    for backend, rail in rails:
        by_backend[backend].append(rail)
    parts = {backend: _ranges(values) for backend, values in by_backend.items()}
    if len(parts) == 1:
        return next(iter(parts.values()))
    return "; ".join(f"{backend} {text}" for backend, text in parts.items())


# ---------------------------------------------------------------------------------------- parts


_RunKey = tuple[Pair, str, int | None, float | None]


@dataclass
class _Runs:
    values: list[float]
    errors: list[str]


def _main_metric(entries: Sequence[Mapping[str, Any]]) -> str:
    metrics = Counter(str(link.get("metric") or LINK_METRIC) for link in entries)
    return metrics.most_common(1)[0][0] if metrics else LINK_METRIC


def _unit(entries: Sequence[Mapping[str, Any]], metric: str) -> str:
    units = Counter(str(link["unit"]) for link in entries if link.get("unit"))
    return units.most_common(1)[0][0] if units else LINK_UNITS.get(metric, metric)


def _runs(entries: Iterable[Mapping[str, Any]]) -> dict[_RunKey, _Runs]:
    """Every run, by pair, backend, rail and line rate; an entry without a number is an error."""
    runs: dict[_RunKey, _Runs] = {}
    for link in entries:
        a, b = str(link.get("a")), str(link.get("b"))
        if a == b:
            continue
        key = (_pair(a, b), str(link.get("backend") or "?"), _rail(link.get("rail")),
               _positive(link.get("line_rate_gbps")))
        found = runs.setdefault(key, _Runs([], []))
        value = link.get("value")
        if is_finite_number(value):
            found.values.append(float(value))
        else:
            found.errors.append(str(link.get("error") or NO_FIGURE))
    return runs


def _judged_references(document: Document) -> dict[GroupKey, float]:
    """The reference each group was judged against (the document's ``link_groups``): the one its
    findings quote."""
    found = {}
    for group in document.get("link_groups") or []:
        if isinstance(group, Mapping) and is_finite_number(group.get("reference_gbps")):
            key = (str(group.get("backend") or "?"), _rail(group.get("rail")), _positive(group.get("line_rate_gbps")))
            found[key] = float(group["reference_gbps"])
    return found


def _references(runs: Mapping[_RunKey, _Runs]) -> dict[GroupKey, float]:
    """The median pair figure (each the median of its runs) of every group that has one: the
    reference of a document that does not carry its groups' (``link_groups``)."""
    pooled: dict[GroupKey, list[float]] = defaultdict(list)
    for (_, backend, rail, line), found in runs.items():
        if found.values:
            pooled[(backend, rail, line)].append(statistics.median(found.values))
    return {group: statistics.median(values) for group, values in pooled.items()}


def _pair_figures(runs: Mapping[_RunKey, _Runs], references: Mapping[GroupKey, float]) -> dict[Pair, PairFigures]:
    rails: dict[Pair, list[RailFigure]] = defaultdict(list)
    for (pair, backend, rail, line), found in runs.items():
        rails[pair].append(RailFigure(backend, rail, line, statistics.median(found.values) if found.values else None,
                                      len(found.values) + len(found.errors), tuple(found.errors),
                                      references.get((backend, rail, line))))
    return {pair: pair_figures(pair, figures) for pair, figures in sorted(rails.items())}


def pair_figures(pair: Pair, rails: Iterable[RailFigure]) -> PairFigures:
    """The figures of ``pair`` (a, b sorted), its worst rail and its errors found once."""
    ordered = tuple(sorted(rails, key=lambda r: _group_order(r.group)))
    measured = [rail for rail in ordered if rail.gbps is not None]
    return PairFigures(pair[0], pair[1], ordered, min(measured, key=_rail_order) if measured else None,
                       tuple(rail for rail in ordered if rail.gbps is None))


def _groups(pairs: Mapping[Pair, PairFigures], references: Mapping[GroupKey, float]) -> tuple[LinkGroup, ...]:
    measured: Counter[GroupKey] = Counter()
    errors: Counter[GroupKey] = Counter()
    for pair in pairs.values():
        for rail in pair.rails:
            (measured if rail.gbps is not None else errors)[rail.group] += 1
    keys = sorted(set(measured) | set(errors), key=_group_order)
    return tuple(LinkGroup(*key, references.get(key), measured[key], errors[key]) for key in keys)


def _link_findings(document: Document) -> dict[str, list[Mapping[str, Any]]]:
    """The link findings naming each host (as ``host`` or ``peer``)."""
    named: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for finding in _findings(document):
        if finding.get("kind") not in ROW_KINDS or not finding.get("host"):
            continue
        ends = {str(finding["host"])}
        if finding.get("peer") and finding.get("kind") != Kind.SLOW_NIC:
            ends.add(str(finding["peer"]))
        for end in ends:
            named[end].append(finding)
    return named


def _explaining_hosts(document: Document) -> set[str]:
    """Hosts whose own finding (EXPLAINING_KINDS) explains every pair they are an end of."""
    return {str(finding["host"]) for finding in _findings(document)
            if finding.get("kind") in EXPLAINING_KINDS and finding.get("host")}


def _rows(pairs: Mapping[Pair, PairFigures], findings: Mapping[str, list[Mapping[str, Any]]],
          explaining: set[str]) -> tuple[HostRow, ...]:
    partners: dict[str, list[PairFigures]] = defaultdict(list)
    for pair in pairs.values():
        partners[pair.a].append(pair)
        partners[pair.b].append(pair)
    rows = []
    for host in set(partners) | set(findings):
        mine = sorted(partners.get(host, []), key=lambda pair: (not pair.errors, *_pair_order(pair)))
        named = sorted(findings.get(host, []), key=_finding_order)
        measured = [pair for pair in mine if pair.worst is not None]
        unexplained = [pair for pair in measured if pair.partner(host) not in explaining] or measured
        explained = tuple(pair.partner(host) for pair in measured if pair not in unexplained)
        rows.append(HostRow(host, tuple(mine), tuple(named), suspect=bool(named) or any(pair.errors for pair in mine),
                            worst=min(unexplained, key=_pair_order) if unexplained else None, explained=explained))
    return tuple(sorted(rows, key=_row_order))


def _row_order(row: HostRow) -> tuple[Any, ...]:
    """Named by a link finding (by kind, severity, deficit, the finding's ends), then with an
    error pair, then the rest; each by its worst ratio, then name."""
    ratio = row.worst_ratio
    ratio_key = math.inf if ratio is None else ratio
    if row.findings:
        # The two ends of one finding stay together, the end with the worse pair first.
        return (0, *_finding_order(row.findings[0]), ratio_key, row.host)
    return (1 if row.error_pairs else 2, 0, 0, 0.0, "", "", ratio_key, row.host)


def _finding_order(finding: Mapping[str, Any]) -> tuple[Any, ...]:
    deficit = finding.get("deficit_pct")
    return (ROW_KINDS.index(str(finding.get("kind"))), SEVERITY_RANK.get(str(finding.get("severity")), 2),
            -float(deficit) if is_finite_number(deficit) else 0.0, str(finding.get("host")), str(finding.get("peer")))


def _not_tested(document: Document, tested: set[str]) -> tuple[NotTested, ...]:
    """Hosts of ``hosts[]`` in no pair: the host's status and error where it is not ok, else the
    ``not pair-tested`` finding's evidence, else a plain "no pair test recorded"."""
    left_out: dict[str, str] = {}
    for finding in _findings(document):
        evidence = str(finding.get("evidence") or "")
        if finding.get("kind") == Kind.UNCHECKED and evidence.startswith(NOT_PAIR_TESTED):
            left_out.setdefault(str(finding.get("host")), evidence.removeprefix(NOT_PAIR_TESTED).lstrip(": "))
    found = []
    for host in _hosts(document):
        label = str(host.get("host"))
        if label in tested:
            continue
        status = str(host.get("status") or "?")
        if status != OK:
            reason = f"{status}: {host['error']}" if host.get("error") else status
        else:
            reason = left_out.get(label) or "no pair test recorded for it"
        found.append(NotTested(label, reason))
    return tuple(found)


def _rail_order(rail: RailFigure) -> tuple[Any, ...]:
    ratio = rail.ratio
    return (ratio is None, ratio if ratio is not None else 0.0, rail.gbps or 0.0, _group_order(rail.group))


def _pair_order(pair: PairFigures) -> tuple[Any, ...]:
    worst = pair.worst
    return ((math.inf,) if worst is None else _rail_order(worst)[:2]) + (pair.a, pair.b)


def _group_order(group: GroupKey) -> tuple[Any, ...]:
    backend, rail, line = group
    return (backend, *_none_last(rail), *_none_last(line))


def _rail_key(item: tuple[str, int | None]) -> tuple[Any, ...]:
    return (item[0], *_none_last(item[1]))


def _none_last(value: float | None) -> tuple[bool, float]:
    return (value is None, value if value is not None else 0)


def _ranges(rails: Sequence[int | None]) -> str:
    """``0-3,6`` from rails 0, 1, 2, 3, 6; ``-`` for a figure with no rail."""
    numbers = sorted({rail for rail in rails if rail is not None})
    parts: list[str] = []
    start = previous = None
    for number in [*numbers, None]:
        if number is not None and previous is not None and number == previous + 1:
            previous = number
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = number
    if any(rail is None for rail in rails):
        parts.append("-")
    return ",".join(parts)


def _pair(a: str, b: str) -> Pair:
    return (a, b) if a <= b else (b, a)


def _rail(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _positive(value: object) -> float | None:
    # (isinstance first: it tells a type checker what value is)
    if not isinstance(value, int | float) or not is_finite_number(value):
        return None
    return float(value) if value > 0 else None


# ------------------------------------------------------------------------- words for the reports


SLOWEST_PAIRS_LISTED = 10
ERROR_PAIRS_LISTED = 10
SLOWEST_PAIR_COLUMNS = ["slowest pair", "rail", "figure", "reference", "below reference", "of line rate"]
ERROR_PAIR_COLUMNS = ["error pair", "rails", "reason"]
BACKEND_COLUMNS = ["backend", "pairs", "rails", "figures", "pairs not tested", "pair-rails not tested"]
NOT_TESTED_COLUMNS = ["not tested", "count", "reason"]


def counts_text(view: LinkView) -> str:
    """``1998 pairs measured in 8 groups, 3 could not be tested; 998 hosts pair-tested, 2 not``."""
    tested = sum(1 for row in view.rows if row.partners)
    text = (f"{plural(len(view.pairs), 'pair')} in {plural(len(view.groups), 'group')} (backend, rail, line rate), "
            f"{len(view.error_pairs)} could not be tested; {plural(tested, 'host')} pair-tested, "
            f"{len(view.not_tested)} not tested")
    if view.other_metric_entries:
        text += f"; {view.other_metric_entries} entries of another metric left out"
    return text


def backend_rows(view: LinkView) -> list[list[str]]:
    """One row per backend, in BACKEND_COLUMNS order."""
    return [[counts.backend, str(counts.pairs), _ranges(counts.rails), str(counts.figures), str(counts.error_pairs),
             str(counts.error_rails)] for counts in view.backends()]


def slowest_pair_rows(view: LinkView, count: int = SLOWEST_PAIRS_LISTED) -> list[list[str]]:
    """The ``count`` pairs furthest below their reference, in SLOWEST_PAIR_COLUMNS order: the
    worst rail's figure, its group's reference, the deficit below it and the share of the line rate. The rail
    names its backend only where the sweep used several."""
    several = len({group.backend for group in view.groups}) > 1
    rows = []
    for pair in view.slowest_pairs(count):
        worst = pair.worst
        assert worst is not None and worst.gbps is not None  # slowest_pairs holds measured pairs only
        ratio, line = worst.ratio, worst.line_rate_pct
        rows.append([f"{pair.a} ↔ {pair.b}", rail_label(worst.backend, worst.rail, with_backend=several),
                     f"{fixed(worst.gbps)} {view.unit}",
                     "" if worst.reference_gbps is None else f"{fixed(worst.reference_gbps)} {view.unit}",
                     "" if ratio is None else deficit_text(100 * (1 - ratio)),
                     "" if line is None else share_text(line, "line rate")])
    return rows


def error_pair_rows(view: LinkView, count: int = ERROR_PAIRS_LISTED) -> list[list[str]]:
    """The first ``count`` pairs that could not be tested, in ERROR_PAIR_COLUMNS order."""
    rows = []
    for pair in view.error_pairs[:count]:
        rails: dict[str, list[int | None]] = defaultdict(list)
        for rail in pair.errors:
            rails[rail.backend].append(rail.rail)
        where = "; ".join(backend if numbers == [None] else
                          f"{backend} rail{'s' if len(numbers) > 1 else ''} {_ranges(numbers)}"
                          for backend, numbers in rails.items())
        reasons = sorted({reason for rail in pair.errors for reason in rail.errors}) or [NO_FIGURE]
        rows.append([f"{pair.a} ↔ {pair.b}", where, "; ".join(reasons)])
    return rows


def not_tested_groups(view: LinkView) -> list[tuple[str, list[str]]]:
    """(reason, hosts) of the hosts no pair test reached, the largest group first."""
    by_reason: dict[str, list[str]] = defaultdict(list)
    for host in view.not_tested:
        by_reason[host.reason].append(host.host)
    return sorted(by_reason.items(), key=lambda item: (-len(item[1]), item[0]))
