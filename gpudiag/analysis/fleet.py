"""What the findings mean for the fleet: a metric slow on a share of the hosts is a fleet-wide
shift, and a synchronous job's slowdown is its slowest GPU against the reference that judges it."""

from __future__ import annotations

import math
import operator
import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from itertools import compress, repeat
from typing import Any

from ..findings import INTERRUPTED, Basis, Finding, Kind, Severity
from ..hosts import fold_hosts
from ..records import HostRecords
from ..words import deficit_text, plural
from . import actions
from .actions import Cause
from .identity import HostGpus
from .measurements import NODE_MEDIAN, Measurement
from .reference import KeyReferences
from .suspects import Suspect
from .thresholds import Thresholds

# A group of fewer hosts that is low is its hosts' own findings (a 2-node job with one slow node,
# two slow nodes of eight): never a group's finding (fleet_shifts, gpudiag.analysis.groups).
MIN_GROUP_HOSTS = 3


@dataclass(frozen=True)
class Impact:
    """Estimated slowdown (percent) of a synchronous job on these hosts and what excluding recovers;
    None when no GEMM result could be compared (nothing to estimate from, which is not 0 %)."""

    slowdown_pct: float | None
    slowest: Mapping[str, Any] | None
    recovered_pct: float | None
    exclude: tuple[str, ...]
    hosts_total: int
    # The hosts an interrupt stopped before they finished: not checked, so never a pass, but no
    # finding of theirs says to keep them out (a hook must not exclude a fleet for a Ctrl-C).
    unfinished: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"slowdown_pct": _round(self.slowdown_pct), "slowest": dict(self.slowest) if self.slowest else None,
                "recovered_pct": _round(self.recovered_pct), "exclude": list(self.exclude),
                "hosts_total": self.hosts_total, **({"unfinished": list(self.unfinished)} if self.unfinished else {})}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def fleet_shifts(suspects: Sequence[Suspect], grouped: Mapping[str, Sequence[Measurement]],
                 thresholds: Thresholds) -> list[Finding]:
    """One ``fleet_shift`` per probe and metric on which ``fleet_shift_share`` of the hosts
    measuring it (at least ``min_peers`` of them) are slow as a whole: their node median is
    itself a suspect, on ``MIN_GROUP_HOSTS`` hosts or more. A host whose only suspects are single
    GPUs is that GPU's finding, never part of a group: separate broken GPUs on a quarter of a
    small fleet are no shared regression; nor are two slow nodes of eight (each its own
    ``slow_node``, and draining them fixes it), as a group of fewer hosts is nowhere else. The
    hosts counted are the largest set slow alike (``_slow_alike``): three nodes of twelve slow by
    12, 15 and 25 % are three findings, not one level a shared cause set."""
    slow: dict[tuple[str, str], list[Suspect]] = defaultdict(list)
    for s in suspects:
        if s.measurement.device == NODE_MEDIAN:
            slow[(s.measurement.probe, s.measurement.metric)].append(s)
    measured = hosts_measuring(grouped, set(slow)) if slow else {}
    findings = []
    for (probe, metric), group in sorted(slow.items()):
        hosts = _slow_alike(group, thresholds)
        group = [s for s in group if s.measurement.host in hosts]
        total = len(measured[(probe, metric)])
        share = 100 * len(hosts) / total
        # A slow host or two are their own findings, never a shift (in a small fleet they are a quarter).
        if len(hosts) < MIN_GROUP_HOSTS or total < thresholds.min_peers or share < thresholds.fleet_shift_share_pct:
            continue
        findings.append(_fleet_shift(probe, metric, group, hosts, total, share, thresholds))
    return findings


def _slow_alike(group: Sequence[Suspect], thresholds: Thresholds) -> list[str]:
    """The largest set of ``group``'s hosts whose deficits (each host's largest) share one level:
    from the least deficit of the set to the most, at most twice ``deficit_warn`` or half the
    least, whichever is more (noise spreads a shared cause's hosts a little, and a deeper cause
    more). Sorted; the less slow set where two are as large."""
    deficits: dict[str, float] = {}
    for s in group:
        host = s.measurement.host
        deficits[host] = max(deficits.get(host, s.deficit_pct), s.deficit_pct)
    ordered = sorted(deficits.items(), key=lambda item: (item[1], item[0]))
    best, low = (0, 0), 0
    for high, (_, deficit) in enumerate(ordered):
        while deficit - ordered[low][1] > max(2 * thresholds.deficit_warn_pct, ordered[low][1] / 2):
            low += 1
        if high + 1 - low > best[1] - best[0]:
            best = (low, high + 1)
    return sorted(host for host, _ in ordered[best[0]:best[1]])


def hosts_measuring(grouped: Mapping[str, Sequence[Measurement]],
                    wanted: Set[tuple[str, str]]) -> dict[tuple[str, str], set[str]]:
    """The hosts that measured each ``wanted`` (probe, metric), from the measurements by key
    (measurements.by_key: only the keys of those metrics are read)."""
    measured: dict[tuple[str, str], set[str]] = {place: set() for place in wanted}
    for same in grouped.values():
        hosts = measured.get((same[0].probe, same[0].metric))
        if hosts is not None:
            hosts.update(m.host for m in same)
    return measured


def _fleet_shift(probe: str, metric: str, group: Sequence[Suspect], hosts: Sequence[str], total: int,
                 share: float, thresholds: Thresholds) -> Finding:
    deficit = statistics.median(s.deficit_pct for s in group)
    confirmed_hosts = {s.measurement.host for s in group if s.confirmed}
    confirmed = 2 * len(confirmed_hosts) >= len(hosts)
    severity = Severity.FAIL if confirmed and deficit >= thresholds.deficit_fail_pct else Severity.WARN
    sources = Counter(s.reference.source for s in group)
    source = sorted(sources, key=lambda name: (-sources[name], name))[0]
    keys = {s.measurement.key for s in group}
    one_key = len(keys) == 1
    value = statistics.median(s.measurement.value for s in group) if one_key else None
    unit = group[0].measurement.unit if one_key else None
    verb, detail = actions.action(Cause.FLEET_SHIFT, severity)
    evidence = (f"{probe}.{metric} low as a whole (the median of their GPUs) on {len(hosts)} of "
                f"{plural(total, 'host')} ({share:.0f} %), median deficit {deficit_text(deficit)} the {source} "
                f"reference; {plural(len(confirmed_hosts), 'host')} confirmed by re-test")
    return Finding(kind=Kind.FLEET_SHIFT, severity=severity, host=fold_hosts(hosts), metric=f"{probe}.{metric}",
                   value=round(value, 3) if value is not None else None,
                   reference=round(group[0].reference.value, 3) if one_key else None, unit=unit,
                   reference_source=source, deficit_pct=round(deficit, 2), share_pct=round(share, 1),
                   confirmed=confirmed, basis=Basis.RETEST if confirmed else Basis.SINGLE_RUN, evidence=evidence,
                   action=verb, action_detail=detail)



# A group's finding, or the network's, keeps no host out.
NOT_EXCLUDING = (Kind.FLEET_SHIFT, Kind.SOFTWARE_REGRESSION, Kind.SLOW_NETWORK, Kind.SLOW_FABRIC_LINK,
                 Kind.SLOW_SWITCH)


def _not_checked(finding: Finding) -> bool:
    """A host left unchecked (not a result without a reference), or one no pair test could reach."""
    if finding.kind == Kind.UNCHECKED:
        return finding.basis != Basis.COMPARISON
    return finding.kind == Kind.LINK_ERROR and finding.peer is None


def _unfinished(finding: Finding, unfinished: Sequence[str]) -> bool:
    """The finding that says a host was interrupted before it finished (its status), nothing more."""
    return finding.kind == Kind.UNCHECKED and finding.basis == Basis.HOST_STATUS and finding.host in unfinished


def _excluded_ends(finding: Finding) -> tuple[str, ...]:
    """The hosts a finding keeps out of the job: its host, and for a pair that fails while it
    cannot say which end is at fault (a slow link), the peer too: the job must not get the pair,
    and neither end is blamed (nor drained) for it."""
    if finding.peer is not None and finding.severity == Severity.FAIL:
        return (finding.host, finding.peer)
    return (finding.host,)


def _judged_gemm(findings: Sequence[Finding], suspects: Sequence[Suspect]) -> dict[tuple[str, str], float]:
    """The GEMM figure each GPU's finding quotes (after its re-test: the confirming runs' mean),
    by (host, GPU UUID): the impact quotes the figure the finding does. A GPU's confirmed GEMM
    suspect whose finding leads with another metric (a throttled GPU's clock, a few tenths of a
    percent further below) quotes that figure too, as its "also gemm.tflops" deficit."""
    judged = {(s.measurement.host, s.measurement.gpu_uuid): s.measurement.value for s in suspects
              if s.confirmed and s.measurement.probe == "gemm" and s.measurement.gpu_uuid}
    judged.update({(f.host, f.gpu_uuid): f.value for f in findings
                   if f.metric == "gemm.tflops" and f.host and f.gpu_uuid and f.value is not None})
    return judged


_HOST, _VALUE = operator.attrgetter("host"), operator.attrgetter("value")


def _slowest(ratios: Sequence[float], gemms: Sequence[Measurement]) -> tuple[float, Measurement]:
    """The lowest of ``ratios`` (each that of the GEMM result beside it), the lowest host and
    device among those as low; the first of them where they tie on those too. 80,000 ratios are
    compared in C; the few as low as the lowest, in Python."""
    if any(map(math.isnan, ratios)):  # (no total order: compared as the tuples are, one by one)
        return min(zip(ratios, gemms, strict=True), key=_RATIO_HOST_DEVICE)
    lowest = min(ratios)
    tied = compress(range(len(ratios)), map(lowest.__eq__, ratios))
    return min(((ratios[index], gemms[index]) for index in tied), key=_RATIO_HOST_DEVICE)


def _RATIO_HOST_DEVICE(item: tuple[float, Measurement]) -> tuple[float, str, str]:  # noqa: N802 - a sort key
    return item[0], item[1].host, item[1].device


def _with_judged(same: Sequence[Measurement], judged: Mapping[tuple[str, str], float]) -> list[Measurement]:
    """``same`` with each GPU's figure its finding quotes (``_as_judged``): the results of the
    few hosts ``judged`` names are found without a Python loop over 80,000."""
    hosts = {host for host, _ in judged}
    same = list(same)
    for index in compress(range(len(same)), map(hosts.__contains__, map(_HOST, same))):
        same[index] = _as_judged(same[index], judged)
    return same


def _as_judged(m: Measurement, judged: Mapping[tuple[str, str], float]) -> Measurement:
    value = judged.get((m.host, m.gpu_uuid)) if m.gpu_uuid else None
    return m if value is None else m._replace(value=value)


def job_impact(grouped: Mapping[str, Sequence[Measurement]], refs: Mapping[str, KeyReferences],
               findings: Sequence[Finding], hosts: Sequence[HostRecords],
               identities: Mapping[str, HostGpus] | None = None, suspects: Sequence[Suspect] = ()) -> Impact:
    """A synchronous job runs at its slowest GPU's GEMM pace, against the reference that judges
    it (the fleet's level, or the baseline or SKU figure where the whole fleet fell below it):
    the slowdown on all hosts, and what keeping out the hosts with fail findings (both ends of a
    failing pair) or no check recovers. ``grouped``: the measurements by key (measurements.by_key);
    ``suspects``: the sweep's, whose confirmed GEMM figures (their re-test's) stand for their first runs."""
    names = {h.host for h in hosts}
    unfinished = tuple(sorted(h.host for h in hosts if h.status == INTERRUPTED))
    exclude = tuple(sorted({host for f in findings if f.kind not in NOT_EXCLUDING
                            and (f.severity == Severity.FAIL or _not_checked(f)) and not _unfinished(f, unfinished)
                            for host in _excluded_ends(f) if host in names}))
    expected = {key: key_refs.expected() for key, key_refs in refs.items()}
    gemm_keys = [key for key, same in grouped.items() if key in expected and same[0].probe == "gemm"]
    # (a finding names its metric, not its parameters: with one GEMM key, its figure is that key's)
    judged = _judged_gemm(findings, suspects) if len(gemm_keys) == 1 else {}
    ratios: list[float] = []
    gemms: list[Measurement] = []
    for key in gemm_keys:
        same = grouped[key] if not judged else _with_judged(grouped[key], judged)
        gemms += same
        ratios += map(operator.truediv, map(_VALUE, same), repeat(expected[key].value))
    if not ratios:
        return Impact(None, None, None, exclude, len(hosts), unfinished)
    slowest_ratio, slowest = _slowest(ratios, gemms)
    excluded = set(exclude)
    kept = ratios if not excluded else [ratio for ratio, m in zip(ratios, gemms, strict=True) if m.host not in excluded]
    slowdown = max(0.0, 100 * (1 - slowest_ratio))
    remaining = max(0.0, 100 * (1 - min(kept))) if kept else 0.0
    gpus = (identities or {}).get(slowest.host)
    gpu = gpus.of(slowest.device, slowest.gpu_uuid).nvml_index if gpus is not None else slowest.gpu  # NVML's index
    return Impact(slowdown, {"host": slowest.host, "gpu": gpu, "metric": "gemm.tflops",
                             "value": round(slowest.value, 3), "reference": round(expected[slowest.key].value, 3),
                             "unit": slowest.unit, "reference_source": expected[slowest.key].source},
                  max(0.0, slowdown - remaining), exclude, len(hosts), unfinished)

