"""Groups that moved together: one finding for a group whose level fell, never drains at random.

A group is one baseline key's measurements: the same hardware, software, probe and parameters.
Its level is its live fleet reference where ``min_peers`` hosts have the key; a smaller group of
``MIN_GROUP_HOSTS`` or more hosts has the level of its own values (the same robust estimate),
used only when every one of its hosts is low, and its GPU-pair keys (one figure a host) only
when their pairs together are (``_pairs_not_held``). The level is judged, in this order,
against

1. the level of the same hardware under other software (driver, CUDA, torch) in this sweep,
   itself not shifted: ``deficit_warn`` below it, and ``robust_z`` of the two levels' own errors
   (each ``LEVEL_ERROR`` of its spread over the square root of its hosts), a
   ``software_regression`` naming the versions;
2. the stored baseline of the key (flagged the same way): a ``fleet_shift``;
3. the stored baseline of the same hardware under the previous software (a key the baseline
   lacks, as after a driver upgrade): a ``software_regression``;
4. the SKU figure: a level ``deficit_fail`` or more below it is a ``fleet_shift`` (a healthy
   fleet may sit a few percent under a published figure: ``sku_spread``).

A shifted group is one finding (groups of one hardware and cause folded together, each metric
named), ``inspect``: it drains no node. A group with a live level has its parts judged against
that level alone (``judging_references``): the baseline and the SKU figure judge the level, and a
part is a suspect only when it falls below its own group — never a subset of a uniformly
shifted group picked by noise. The evidence says what the group's NVML evidence shows: a power
cap or a slowdown on most of its GPUs whose clock drop explains the deficit names that cause.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..findings import Basis, Finding, Kind, Severity
from ..hosts import fold_hosts
from ..words import deficit_text, figure, plural
from . import actions, rules
from .actions import Cause
from .fleet import MIN_GROUP_HOSTS, hosts_measuring
from .keys import hardware_key, pairless_key, software_change
from .measurements import Measurement
from .noisy import LEVEL_ERROR
from .reference import BASELINE, FLEET, MAD_TO_SIGMA, SKU, KeyReferences, Reference, spread, with_cutoff
from .suspects import COMPUTE_PROBES, BaselineLookup
from .thresholds import Thresholds


@dataclass(frozen=True)
class Group:
    """One key's measurements, and each host's values (gathered when first asked: most keys of a
    10,000-node sweep have a fleet level and never need them)."""

    key: str
    measurements: Sequence[Measurement]

    @property
    def sample(self) -> Measurement:
        return self.measurements[0]

    @functools.cached_property
    def by_host(self) -> dict[str, list[float]]:
        by_host: dict[str, list[float]] = defaultdict(list)
        for m in self.measurements:
            by_host[m.host].append(m.value)
        return by_host

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(sorted(self.by_host))


@dataclass(frozen=True)
class GroupShift:
    """A group whose ``level`` fell below ``against``: ``kind`` (``fleet_shift`` or
    ``software_regression``) and ``change`` (the software it differs in from ``against``, in
    words; empty for a ``fleet_shift``)."""

    group: Group
    level: Reference
    against: Reference
    kind: Kind
    change: str = ""

    @property
    def deficit_pct(self) -> float:
        return self.against.deficit_pct(self.level.value)

    def shifted_hosts(self, thresholds: Thresholds) -> list[str]:
        """The group's hosts whose own median is ``deficit_warn`` below ``against``: all of a
        uniformly shifted group; where most of a key's hosts fell and the rest still measure at
        the reference, the fallen ones only (the level is theirs)."""
        return [host for host, values in sorted(self.group.by_host.items())
                if self.against.deficit_pct(statistics.median(values)) >= thresholds.deficit_warn_pct]


def group_shifts(grouped: Mapping[str, Sequence[Measurement]], refs: Mapping[str, KeyReferences],
                 thresholds: Thresholds, baseline: BaselineLookup | None = None) -> dict[str, GroupShift]:
    """Every shifted group by key (see the module docstring; ``grouped``: the measurements by
    key, measurements.by_key)."""
    groups = _groups(grouped)
    levels = {key: level for key, group in groups.items()
              if (level := _level(group, refs.get(key), thresholds)) is not None}
    absolute = {key: _absolute_shift(groups[key], level, refs.get(key), baseline, thresholds)
                for key, level in levels.items()}
    for key in _pairs_not_held(grouped, groups, refs, absolute, baseline, thresholds):
        absolute[key] = None
    siblings: dict[str, list[str]] = defaultdict(list)
    for key in sorted(levels):
        siblings[hardware_key(key)].append(key)
    shifts = {}
    for key in sorted(levels):
        others = [other for other in siblings[hardware_key(key)] if other != key and absolute[other] is None]
        shift = _sibling_shift(groups[key], levels[key], [(other, levels[other]) for other in others], thresholds)
        shift = shift or absolute[key]
        if shift is not None:
            shifts[key] = shift
    return shifts


def judging_references(refs: Mapping[str, KeyReferences], shifts: Mapping[str, GroupShift],
                       thresholds: Thresholds) -> dict[str, KeyReferences]:
    """The references a key's parts are judged by: where the key has a live level (or its
    small group is shifted), that level and none of the baseline or SKU figure, which judge the
    level instead (gpudiag.analysis.groups)."""
    judging = {}
    for key, key_refs in refs.items():
        shift = shifts.get(key)
        kept = tuple(ref for ref in key_refs.references if ref.source not in (BASELINE, SKU))
        if shift is not None and not any(ref.source == FLEET for ref in kept):
            kept = (shift.level, *kept)
        has_level = any(ref.source == FLEET for ref in kept)
        judging[key] = with_cutoff(tuple(dataclasses.replace(ref, fleet_below=False) for ref in kept), thresholds) \
            if has_level else key_refs
    return judging


def _pairs_not_held(grouped: Mapping[str, Sequence[Measurement]], groups: Mapping[str, Group],
                    refs: Mapping[str, KeyReferences], absolute: Mapping[str, GroupShift | None],
                    baseline: BaselineLookup | None, thresholds: Thresholds) -> list[str]:
    """The shifted GPU-pair keys of small groups (no fleet level: keys.pairless_key) whose pairs
    together are not shifted: one metric between the GPUs of the same hosts, each host its
    median over every pair. A pair key has one figure a host, and over three hosts one pair of 56
    fell 7 % under the SKU figure by chance in one healthy sweep of twenty at 3 % noise: a
    fleet_shift of a healthy group."""
    members: dict[str, list[str]] = defaultdict(list)
    for key in groups:
        key_refs = refs.get(key)
        if (key_refs is None or key_refs.get(FLEET) is None) and (pooled := pairless_key(key)) is not None:
            members[pooled].append(key)
    dropped = []
    for keys in members.values():
        shifted = [key for key in keys if absolute.get(key) is not None]
        if not shifted:
            continue  # nothing of it to hold
        whole = Group(keys[0], [m for key in keys for m in grouped[key]])
        level = _level(whole, None, thresholds)
        if level is None or _absolute_shift(whole, level, refs.get(keys[0]), baseline, thresholds) is None:
            dropped += shifted
    return dropped


def _groups(grouped: Mapping[str, Sequence[Measurement]]) -> dict[str, Group]:
    return {key: Group(key, same) for key, same in grouped.items()}


def _level(group: Group, key_refs: KeyReferences | None, thresholds: Thresholds) -> Reference | None:
    """The group's live level: its fleet reference, else (``MIN_GROUP_HOSTS`` hosts or more) the
    same estimate over its values, each host weighing once."""
    fleet = key_refs.get(FLEET) if key_refs is not None else None
    if fleet is not None:
        return fleet
    if len(group.by_host) < MIN_GROUP_HOSTS:
        return None
    # Every host of a small group must be low for a shift: the median of its hosts' medians
    # (no window from the top, which few values would bias upwards).
    medians = [statistics.median(values) for values in group.by_host.values()]
    level = statistics.median(medians)
    mad = statistics.median([abs(value - level) for values in group.by_host.values() for value in values])
    return Reference(level, spread(MAD_TO_SIGMA * mad, level, thresholds), FLEET, len(medians),
                     level_values=len(medians))


def _absolute_shift(group: Group, level: Reference, key_refs: KeyReferences | None,
                    baseline: BaselineLookup | None, thresholds: Thresholds) -> GroupShift | None:
    """The group's level against its own baseline, the previous software's baseline, then the SKU figure."""
    own = key_refs.get(BASELINE) if key_refs is not None else None
    if own is not None and _below(group, level, own, thresholds):
        return GroupShift(group, level, own, Kind.FLEET_SHIFT)
    previous = _previous_software(group.key, baseline, thresholds)
    if previous is not None and _below(group, level, previous[1], thresholds):
        return GroupShift(group, level, previous[1], Kind.SOFTWARE_REGRESSION, software_change(previous[0], group.key))
    sku = key_refs.get(SKU) if key_refs is not None else None
    if sku is not None and _below(group, level, sku, thresholds):
        return GroupShift(group, level, sku, Kind.FLEET_SHIFT)
    return None


def _sibling_shift(group: Group, level: Reference, siblings: Sequence[tuple[str, Reference]],
                   thresholds: Thresholds) -> GroupShift | None:
    """The group's level against the highest level of its hardware under other software: two
    levels, each off by its own error (``_level_error``), not by a part's spread. Against a
    part's spread, 16 hosts on a new driver, every GPU 10 % slow at 3 % noise, were 3.3 sigma
    below the other 48 hosts' level, and a ``fleet_shift`` against the SKU figure named them in
    2 sweeps of 20 instead of the driver; the deficit (``deficit_warn``) still has to be there."""
    if not siblings:
        return None
    key, best = max(siblings, key=lambda item: (item[1].value, item[0]))
    error = math.hypot(_level_error(level), _level_error(best))
    against = dataclasses.replace(best, fleet_below=False, spread=error)
    if not _below(group, level, against, thresholds):
        return None
    return GroupShift(group, level, against, Kind.SOFTWARE_REGRESSION, software_change(key, group.key))


def _level_error(level: Reference) -> float:
    """A live level's own error: ``LEVEL_ERROR`` of its spread over the square root of the values
    (hosts) it rests on; a part's spread where that count is not known."""
    return LEVEL_ERROR * level.spread / math.sqrt(level.level_values) if level.level_values >= 1 else level.spread


def _previous_software(key: str, baseline: BaselineLookup | None,
                       thresholds: Thresholds) -> tuple[str, Reference] | None:
    """The stored baseline's entry of the same hardware under other software, as a reference."""
    same_hardware = getattr(baseline, "same_hardware", None)
    entry = same_hardware(key) if same_hardware is not None else None
    if entry is None or float(entry.median) <= 0:
        return None
    median = float(entry.median)
    return entry.key, Reference(median, spread(MAD_TO_SIGMA * float(entry.mad), median, thresholds), BASELINE,
                                int(entry.count), level_values=int(entry.count))


def _below(group: Group, level: Reference, against: Reference, thresholds: Thresholds) -> bool:
    """Whether ``level`` is shifted below ``against`` (the SKU figure: ``deficit_fail`` below it;
    any other: flagged as a part would be), and, for a group without a fleet reference, every
    one of its hosts is ``deficit_warn`` below it too."""
    deficit = against.deficit_pct(level.value)
    if against.source == SKU:
        shifted = deficit >= thresholds.deficit_fail_pct
    else:
        shifted = deficit >= thresholds.deficit_warn_pct and against.robust_z(level.value) <= thresholds.robust_z
    if not shifted or level.source == FLEET and level.peers >= thresholds.min_peers:
        return shifted
    return all(against.deficit_pct(statistics.median(values)) >= thresholds.deficit_warn_pct
               for values in group.by_host.values())


# ------------------------------------------------------------------------------------ findings


def shift_findings(shifts: Mapping[str, GroupShift], grouped: Mapping[str, Sequence[Measurement]],
                   telemetry: Mapping[str, Mapping[str, rules.GpuTelemetry]], clock_costs: Mapping[str, float],
                   thresholds: Thresholds) -> list[Finding]:
    """One finding per kind, software change and GPU model of the shifted groups, naming each
    metric (``grouped``: the measurements by key); the headline is the largest deficit."""
    if not shifts:
        return []
    measured = hosts_measuring(grouped, {(s.group.sample.probe, s.group.sample.metric) for s in shifts.values()})
    folded: dict[tuple[Kind, str, str], list[GroupShift]] = defaultdict(list)
    for key in sorted(shifts):
        shift = shifts[key]
        folded[(shift.kind, shift.change, str(shift.group.sample.gpu_model))].append(shift)
    findings = []
    for (kind, change, model), members in sorted(folded.items()):
        ordered = sorted(members, key=lambda s: (-s.deficit_pct, s.group.key))
        findings.append(_finding(kind, change, model, ordered, measured, telemetry, clock_costs, thresholds))
    return findings


def _finding(kind: Kind, change: str, model: str, shifts: Sequence[GroupShift],
             measured: Mapping[tuple[str, str], set[str]], telemetry: Mapping[str, Mapping[str, rules.GpuTelemetry]],
             clock_costs: Mapping[str, float], thresholds: Thresholds) -> Finding:
    head = shifts[0]
    m = head.group.sample
    members = {host for shift in shifts for host in shift.group.by_host}
    hosts = sorted({host for shift in shifts for host in shift.shifted_hosts(thresholds)} or members)
    at_reference = sorted(members - set(hosts))
    total = len(measured[(m.probe, m.metric)])
    deficit = head.deficit_pct
    severity = Severity.FAIL if deficit >= thresholds.deficit_fail_pct else Severity.WARN
    cause, cause_words = _cause(head, telemetry, clock_costs, thresholds)
    verb, detail = actions.action(cause, severity)
    parts = [_group_words(kind, change, model, len(hosts), total)]
    parts += [_metric_words(shift) for shift in shifts]
    if at_reference:  # a fleet split in two: the rest of the group is no part of the shift
        parts.append(f"{plural(len(at_reference), 'host')} of the group measure at the {head.against.source} "
                     f"reference and are not part of it: {fold_hosts(at_reference)}")
    if cause_words:
        parts.append(cause_words)
    parts.append("one finding for the group: its parts are judged against its own level, and a node is drained "
                 "only for falling below it")
    return Finding(kind=kind, severity=severity, host=fold_hosts(hosts), metric=f"{m.probe}.{m.metric}",
                   value=round(head.level.value, 3), reference=round(head.against.value, 3), unit=m.unit,
                   reference_source=head.against.source, deficit_pct=round(deficit, 2),
                   share_pct=round(100 * len(hosts) / max(1, total), 1), confirmed=False, basis=Basis.SINGLE_RUN,
                   evidence="; ".join(parts), action=verb, action_detail=detail)


def _group_words(kind: Kind, change: str, model: str, hosts: int, total: int) -> str:
    if kind == Kind.SOFTWARE_REGRESSION:
        return (f"{hosts} of {plural(total, 'host')} ({model}) run slower on other software than the same "
                f"hardware: {change}")
    return f"{hosts} of {plural(total, 'host')} ({model}) shifted together"


def _metric_words(shift: GroupShift) -> str:
    m, against = shift.group.sample, shift.against
    params = " ".join(str(value) for name, value in sorted(m.params.items()) if name in ("dtype", "direction"))
    name = f"{m.probe}.{m.metric}" + (f" {params}" if params else "")
    return (f"{name} level {figure(shift.level.value, m.unit)} over {plural(len(shift.group.by_host), 'host')}, "
            f"{deficit_text(shift.deficit_pct)} the {against.source} reference {figure(against.value, m.unit)}")


def _cause(shift: GroupShift, telemetry: Mapping[str, Mapping[str, rules.GpuTelemetry]],
           clock_costs: Mapping[str, float], thresholds: Thresholds) -> tuple[Cause, str]:
    """The action's cause and plain words for what the group's NVML evidence shows: a reason
    on at least half its GPUs whose clock drop explains the deficit is the cause (a power cap:
    ``power_policy``); otherwise the kind's own (software, or an unexplained shift)."""
    gpus = _group_gpus(shift.group, telemetry)
    seen: dict[str, int] = defaultdict(int)
    for gpu in gpus:
        for reason in rules.active_reasons(gpu.under_load, thresholds.throttle_share_pct) or []:
            if reason in rules.REASON_WORDS:
                seen[reason] += 1
    common = sorted((reason for reason, count in seen.items() if 2 * count >= len(gpus) > 0),
                    key=lambda reason: (-seen[reason], reason))
    fallback = Cause.SOFTWARE_REGRESSION if shift.kind == Kind.SOFTWARE_REGRESSION else Cause.FLEET_SHIFT
    if not common:
        return fallback, "no throttle reason NVML saw on most of its GPUs" if gpus else ""
    cost = clock_costs.get(shift.group.key, 0.0)
    words = "; ".join(f"{rules.REASON_WORDS[reason]} active on {seen[reason]} of {len(gpus)} GPUs"
                      for reason in common)
    words += f"; the clock drop under load ({cost:.1f} % of the maximum clock) explains"
    if shift.deficit_pct - cost >= thresholds.deficit_warn_pct:
        return fallback, f"{words} only part of it"
    words += " it"
    if common == [rules.POWER_CAP]:
        return Cause.POWER_POLICY, words + ": a power limit every node shares (a site or job power policy)"
    return fallback, words


def _group_gpus(group: Group, telemetry: Mapping[str, Mapping[str, rules.GpuTelemetry]]
                ) -> list[rules.GpuTelemetry]:
    """The GPUs of the group's hosts with load evidence (none for a probe the clock does not pace)."""
    if group.sample.probe not in COMPUTE_PROBES:
        return []
    return [gpu for host in sorted(group.by_host) for _, gpu in sorted(telemetry.get(host, {}).items())
            if gpu.under_load]
