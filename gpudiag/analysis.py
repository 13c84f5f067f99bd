"""Fleet comparison: from measurements to findings, with evidence, an action, and job impact.

1. Every ok result of a compared probe gets its baseline key (gpudiag.keys); keys never pool,
   and a host without facts has no keys (its results are ``unchecked``, never pooled).
2. Every key's references (gpudiag.reference): the fleet's healthy level when ``min_peers``
   distinct hosts have it, the stored baseline, and the SKU figure. A result is judged against
   each of them, so neither a regression the whole fleet shares nor a 2-node job escapes.
3. A suspect needs robust z <= ``robust_z`` AND a deficit >= ``deficit_warn`` against one
   reference. It is re-tested on its host in the first pass's mode; only a repeat is
   ``confirmed``, and only a confirmed ``deficit_fail`` is a ``fail``. A suspect whose re-test
   could not measure it stays, unconfirmed, with the reason.
4. Suspects become findings by what else is known: NVML reasons seen in enough loaded samples
   make ``throttled`` (a software power cap: a warning unless it costs ``deficit_fail`` against
   the SKU), a narrow or slow-generation PCIe link ``degraded_pcie``, a link down
   ``nvlink_down``; a GPU slow with most of its NVLink partners is the culprit of its pairs, a
   pair slow while both GPUs are fine elsewhere a ``slow_link``; a starved host (its facts) or
   most GPUs of a host slow on one metric make one ``slow_node``; otherwise ``slow_gpu``.
   Telemetry rules add findings of their own (gpudiag.rules); gaps add ``unchecked`` and
   ``missing_gpu`` (gpudiag.coverage); a metric slow on ``fleet_shift_share`` of the hosts adds
   one ``fleet_shift``.
5. Job impact: a synchronous job runs at the pace of its slowest GPU, measured against the same
   reference that judges it.

Pure functions of the measurements: the same input gives byte-identical findings.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from . import coverage, rules
from .findings import (
    BASIS_ERROR_RECORD,
    BASIS_FACTS,
    BASIS_RETEST,
    BASIS_SINGLE_RUN,
    BASIS_TELEMETRY,
    FAIL,
    WARN,
    Finding,
    cost_order,
    unchecked,
)
from .hosts import fold_hosts
from .keys import COMPARED_PROBES, host_keys
from .reference import SKU, KeyReferences, Reference, key_references
from .results import device_index
from .sku import FloorKey, floor_key, floors_for
from .thresholds import Thresholds

# Probes whose speed the SM clock and throttle reasons explain (their evidence quotes them).
COMPUTE_PROBES = ("gemm", "smclock", "membw")
HOST_DEVICES = ("cpu", "host")


class BaselineLookup(Protocol):
    def get(self, key: str) -> Any: ...


SkuFigures = Callable[[str | None], Mapping[FloorKey, float]]


class Measurement(NamedTuple):
    """One ok result of a compared probe, with where it came from and its baseline key.

    A NamedTuple rather than a dataclass: a 10,000-node sweep makes a million of them."""

    host: str
    device: str
    gpu_uuid: str | None
    key: str
    probe: str
    metric: str
    value: float
    params: Mapping[str, Any]
    unit: str | None = None
    gpu_model: str | None = None

    @property
    def gpu(self) -> int | None:
        return None if self.device in HOST_DEVICES else device_index(self.device)

    @property
    def repeat_key(self) -> tuple[str, str, str, str, str]:
        """What a re-test must match: the same host, device, probe, metric and parameters except
        ``mode``."""
        params = {k: v for k, v in sorted(self.params.items()) if k != "mode"}
        return self.host, self.device, self.probe, self.metric, repr(params)


@dataclass(frozen=True)
class Suspect:
    """A measurement below one of its references (the first that flags it: fleet, baseline,
    SKU); ``note`` says why it is unconfirmed when a re-test could not measure it; ``why`` why
    it was pinned on this GPU (a P2P culprit)."""

    measurement: Measurement
    reference: Reference
    robust_z: float
    deficit_pct: float
    confirmed: bool = False
    note: str | None = None
    why: str | None = None
    retest_failed: bool = False


@dataclass(frozen=True)
class Impact:
    """Estimated slowdown (percent) of a synchronous job on these hosts and what excluding recovers;
    None when no GEMM result could be compared (nothing to estimate from, which is not 0 %)."""

    slowdown_pct: float | None
    slowest: Mapping[str, Any] | None
    recovered_pct: float | None
    exclude: tuple[str, ...]
    hosts_total: int

    def to_dict(self) -> dict[str, Any]:
        return {"slowdown_pct": _round(self.slowdown_pct), "slowest": dict(self.slowest) if self.slowest else None,
                "recovered_pct": _round(self.recovered_pct), "exclude": list(self.exclude),
                "hosts_total": self.hosts_total}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


@dataclass(frozen=True)
class Analysis:
    """Findings (most costly first), the suspects behind the speed findings, job impact, and how
    many results were compared with a reference and how many had none."""

    findings: tuple[Finding, ...]
    suspects: tuple[Suspect, ...]
    impact: Impact
    results_compared: int = 0
    results_not_compared: int = 0

    def comparison_counts(self) -> dict[str, int]:
        return {"results_compared": self.results_compared, "results_not_compared": self.results_not_compared}


@dataclass
class _Readings:
    """What one pass over a sweep's hosts gathers."""

    found: list[Measurement]
    telemetry: dict[str, dict[str, rules.GpuTelemetry]]
    gaps: list[Finding]
    unkeyed: dict[str, int]
    not_ok: dict[str, list[Mapping[str, Any]]]


def measurements(hosts: Sequence[Mapping[str, Any]],
                 telemetry: dict[str, dict[str, rules.GpuTelemetry]] | None = None) -> list[Measurement]:
    """The compared results of every ok host, in document order. With ``telemetry``, each ok
    host's GPU telemetry is gathered into it in the same pass (a large sweep is read once)."""
    return _read(hosts, telemetry is not None, telemetry).found


def _read(hosts: Sequence[Mapping[str, Any]], with_telemetry: bool,
          telemetry: dict[str, dict[str, rules.GpuTelemetry]] | None = None) -> _Readings:
    found: list[Measurement] = []
    telemetry = telemetry if telemetry is not None else {}
    gaps: list[Finding] = []
    unkeyed: dict[str, int] = {}
    failed: dict[str, list[Mapping[str, Any]]] = {}
    for host in hosts:
        if host.get("status") != "ok":
            continue
        facts = host.get("facts") or {}
        key_of = host_keys(facts)
        name, model = host["host"], facts.get("gpu_model")
        collector = rules.TelemetryCollector(name) if with_telemetry else None
        not_ok = []
        for result in host.get("results") or ():
            probe = result.get("probe")
            if collector is not None and probe in ("telemetry", "gemm", "pcie"):
                collector.add(result)
            if result.get("status") != "ok":
                not_ok.append(result)
                continue
            if probe not in COMPARED_PROBES or result.get("value") is None:
                continue
            key = key_of(result)
            if key is None:
                unkeyed[name] = unkeyed.get(name, 0) + 1
                continue
            found.append(Measurement(name, result["device"], result.get("gpu_uuid"), key, probe, result["metric"],
                                     float(result["value"]), result.get("params") or {}, result.get("unit"),
                                     model))
        if collector is not None:
            telemetry[name] = collector.gpus()
            gaps += coverage.record_gaps(name, not_ok, facts)
        failed[name] = not_ok
    return _Readings(found, telemetry, gaps, unkeyed, failed)


def references(found: Iterable[Measurement], thresholds: Thresholds, baseline: BaselineLookup | None = None,
               skus: SkuFigures = floors_for) -> dict[str, KeyReferences]:
    """The references of every key seen that has any (see gpudiag.reference)."""
    values: dict[str, list[float]] = defaultdict(list)
    hosts: dict[str, set[str]] = defaultdict(set)
    first: dict[str, Measurement] = {}
    for m in found:
        values[m.key].append(m.value)
        hosts[m.key].add(m.host)
        first.setdefault(m.key, m)
    figures: dict[str | None, Mapping[FloorKey, float]] = {}
    refs = {}
    for key, key_values in values.items():
        m = first[key]
        if m.gpu_model not in figures:
            figures[m.gpu_model] = skus(m.gpu_model) if m.device not in HOST_DEVICES else {}
        figure = figures[m.gpu_model].get(floor_key(m.probe, m.metric, m.params))
        found_refs = key_references(key_values, len(hosts[key]), baseline.get(key) if baseline else None,
                                    figure, thresholds)
        if found_refs is not None:
            refs[key] = found_refs
    return refs


def find_suspects(found: Iterable[Measurement], refs: Mapping[str, KeyReferences],
                  thresholds: Thresholds) -> list[Suspect]:
    """Results both far (robust z) and materially (deficit) below one of their references."""
    suspects = []
    for m in found:
        key_refs = refs.get(m.key)
        ref = key_refs.flagging(m.value, thresholds) if key_refs is not None else None
        if ref is not None:
            suspects.append(Suspect(m, ref, ref.robust_z(m.value), ref.deficit_pct(m.value)))
    return suspects


def confirm(suspects: Sequence[Suspect], retest_hosts: Sequence[Mapping[str, Any]] | None,
            thresholds: Thresholds) -> list[Suspect]:
    """Suspects whose re-test repeats the deficit are confirmed; those whose re-test does not are
    dropped (a one-off dip). A suspect the re-test could not measure (its host unreachable or
    timed out, an error record, no figure) stays, unconfirmed, with the reason as its note.

    Both measurements are evidence: their mean must fall ``retest_deficit`` below the reference
    that flagged it and be as far below it (robust z) as one suspect must be, and the re-test
    must itself fall below it. Averaging halves the noise's variance, so a real 5 % deficit is
    rarely lost to one unlucky draw, and a noise dip rarely repeats."""
    if retest_hosts is None:
        return [dataclasses.replace(s, note="not re-tested") for s in suspects]
    repeats = {m.repeat_key: m for m in measurements([h for h in retest_hosts if h.get("status") == "ok"])}
    by_host = {h["host"]: h for h in retest_hosts}
    kept = []
    for suspect in suspects:
        again = repeats.get(suspect.measurement.repeat_key)
        if again is None:
            host = by_host.get(suspect.measurement.host)
            kept.append(dataclasses.replace(suspect, note=_retest_gap(suspect.measurement, host),
                                            retest_failed=host is not None))
            continue
        ref = suspect.reference
        mean_deficit = (suspect.deficit_pct + ref.deficit_pct(again.value)) / 2
        mean_z = (suspect.robust_z + ref.robust_z(again.value)) / 2
        if again.value < ref.value and mean_deficit >= thresholds.retest_deficit_pct and mean_z <= thresholds.robust_z:
            kept.append(dataclasses.replace(suspect, deficit_pct=mean_deficit, confirmed=True))
    return kept


def _retest_gap(m: Measurement, host: Mapping[str, Any] | None) -> str:
    if host is None:
        return "not re-tested"
    if host.get("status") != "ok":
        return f"re-test {host.get('status')}: {host.get('error') or 'no detail'}"
    for record in host.get("results") or ():
        if (record.get("probe"), record.get("device")) == (m.probe, m.device) and record.get("status") == "error":
            return f"re-test failed: {record.get('reason') or 'no reason given'}"
    return "the re-test gave no figure for it"


def analyse(hosts: Sequence[Mapping[str, Any]], thresholds: Thresholds, *, baseline: BaselineLookup | None = None,
            skus: SkuFigures = floors_for, retest_hosts: Sequence[Mapping[str, Any]] | None = None,
            retested: bool = False) -> Analysis:
    """Findings, suspects and job impact of one sweep. ``retest_hosts``: the re-test's host
    dicts, every status (``retested`` with None: a re-test was wanted but none ran)."""
    readings = _read(hosts, True)
    found, telemetry = readings.found, readings.telemetry
    refs = references(found, thresholds, baseline, skus)
    suspects = find_suspects(found, refs, thresholds)
    if retest_hosts is not None or retested:
        suspects = confirm(suspects, retest_hosts, thresholds)
    facts = {h["host"]: h.get("facts") or {} for h in hosts if h.get("status") == "ok"}
    by_host: dict[str, list[Measurement]] = defaultdict(list)
    for m in found:
        by_host[m.host].append(m)
    context = _Context(thresholds, telemetry, facts, refs, found, by_host)
    findings = (_speed_findings(suspects, context) + _rule_findings(telemetry, thresholds)
                + _starved_hosts(suspects, context))
    findings = _merge(findings) + _fleet_shifts(suspects, found, thresholds)
    findings += readings.gaps + coverage.missing_gpus(hosts, readings.not_ok) + _unkeyed(readings.unkeyed)
    findings += [_unmeasured_retest(s) for s in suspects if s.retest_failed]
    not_compared = [m for m in found if m.key not in refs]
    findings += coverage.not_compared(_hosts_by_metric(not_compared), thresholds)
    findings += [unchecked(h["host"], h["status"], h.get("error")) for h in hosts if h.get("status") != "ok"]
    ordered = tuple(sorted(findings, key=finding_order))
    impact = job_impact(found, refs, ordered, hosts, thresholds)
    return Analysis(ordered, tuple(suspects), impact, len(found) - len(not_compared),
                    len(not_compared) + sum(readings.unkeyed.values()))


def finding_order(finding: Finding) -> tuple[Any, ...]:
    """What a finding costs a job first (gpudiag.findings.cost_order, as reports sort them)."""
    return cost_order(finding.to_dict())


@dataclass(frozen=True)
class _Context:
    thresholds: Thresholds
    telemetry: Mapping[str, Mapping[str, rules.GpuTelemetry]]
    facts: Mapping[str, Mapping[str, Any]]
    refs: Mapping[str, KeyReferences]
    found: Sequence[Measurement]
    by_host: Mapping[str, Sequence[Measurement]]

    def gpu(self, m: Measurement) -> rules.GpuTelemetry | None:
        return self.telemetry.get(m.host, {}).get(m.gpu_uuid or "")

    def host_values(self, host: str, key: str) -> list[float]:
        """Every value ``host`` measured for ``key`` (its GPUs' figures of one metric and shape)."""
        return [m.value for m in self.by_host.get(host, ()) if m.key == key]

    def gpu_count(self, host: str) -> int:
        count = self.facts.get(host, {}).get("gpu_count")
        return int(count) if isinstance(count, (int, float)) else 0


# ------------------------------------------------------------------------------------ speed findings


def _speed_findings(suspects: Sequence[Suspect], context: _Context) -> list[Finding]:
    culprits, pairs = _attribute_pairs(suspects, context.found, context.thresholds)
    singles = [s for s in suspects if s.measurement.probe != "p2p"] + culprits
    explained: list[Finding] = []
    unexplained: dict[str, list[Suspect]] = defaultdict(list)
    for suspect in singles:
        cause = _cause(suspect, context)
        if cause is None:
            unexplained[suspect.measurement.host].append(suspect)
        else:
            explained.append(_explained(suspect, cause, context))
    findings = explained + [_pair_finding(pair, context) for pair in pairs]
    for host in sorted(unexplained):
        findings += _unexplained(host, unexplained[host], context)
    return findings


def _cause(suspect: Suspect, context: _Context) -> str | None:
    """What the GPU's telemetry says slowed this measurement, or None."""
    m = suspect.measurement
    gpu = context.gpu(m)
    if gpu is None:
        return None
    if m.probe in COMPUTE_PROBES:
        reasons = rules.active_reasons(gpu.under_load, context.thresholds.throttle_share_pct) or []
        if any(r in rules.HARDWARE_REASONS or r in rules.SOFTWARE_REASONS for r in reasons):
            return "throttled"
        if rules.POWER_CAP in reasons:
            return "power_capped"
    if m.probe == "pcie" and rules.pcie_problems(gpu):
        return "degraded_pcie"
    if m.probe == "p2p" and any(r.kind == "nvlink_down" for r in rules.telemetry_findings(gpu, 100.0)):
        return "nvlink_down"
    return None


KIND_OF_CAUSE = {"throttled": "throttled", "power_capped": "throttled", "degraded_pcie": "degraded_pcie",
                 "nvlink_down": "nvlink_down"}


def _explained(suspect: Suspect, cause: str, context: _Context) -> Finding:
    severity = _severity(suspect, context.thresholds)
    if cause == "power_capped":  # a cap is a policy, not a broken part: a fail only when it costs against the SKU
        sku = context.refs[suspect.measurement.key].get(SKU)
        costly = sku is not None and sku.deficit_pct(suspect.measurement.value) >= context.thresholds.deficit_fail_pct
        severity = FAIL if suspect.confirmed and costly else WARN
    return _speed_finding(KIND_OF_CAUSE[cause], cause, severity, suspect, _speed_evidence(suspect, context), context)


def _unexplained(host: str, group: Sequence[Suspect], context: _Context) -> list[Finding]:
    """A host's speed suspects with no GPU-level cause: one ``slow_node`` when its facts say it
    is starved or most of its GPUs are slow on one metric; otherwise one ``slow_gpu`` each."""
    starved = coverage.starvation(context.facts.get(host, {}), context.thresholds)
    by_metric: dict[tuple[str, str], list[Suspect]] = defaultdict(list)
    for suspect in group:
        by_metric[(suspect.measurement.probe, suspect.measurement.metric)].append(suspect)
    wide = {metric for metric, suspects in by_metric.items() if _node_wide(host, suspects, context)}
    if starved or wide:
        return [_slow_node(host, group, starved, wide, context)]
    findings = []
    for suspect in group:
        probe = suspect.measurement.probe
        cause = {"pcie": "slow_gpu_pcie", "p2p": "slow_gpu_p2p"}.get(probe, "slow_gpu")
        evidence = _speed_evidence(suspect, context)
        if probe == "pcie":
            evidence += "; the PCIe link trains at full width and generation"
        severity = _severity(suspect, context.thresholds)
        findings.append(_speed_finding("slow_gpu", cause, severity, suspect, evidence, context))
    return findings


def _node_wide(host: str, group: Sequence[Suspect], context: _Context) -> bool:
    """Host-side results are slow, or most of the host's GPUs are slow on one metric, or half of
    them are and the host's median on that metric is itself below the reference (a whole node
    slowed by about the threshold has some GPUs that noise lifts just above it)."""
    devices = {s.measurement.device for s in group}
    if devices & set(HOST_DEVICES):
        return True
    gpu_count = context.gpu_count(host)
    if gpu_count < 2:
        return False
    share = 100 * len(devices) / gpu_count
    if share >= context.thresholds.slow_node_share_pct:
        return True
    first = group[0]
    values = context.host_values(host, first.measurement.key)
    return 2 * len(devices) >= gpu_count and first.reference.flags(statistics.median(values), context.thresholds)


def _slow_node(host: str, group: Sequence[Suspect], starved: Sequence[str], wide: set[tuple[str, str]],
               context: _Context) -> Finding:
    metrics = sorted(wide) or sorted({(s.measurement.probe, s.measurement.metric) for s in group})
    headline = [s for s in group if (s.measurement.probe, s.measurement.metric) == metrics[0]]
    worst = max(headline, key=lambda s: (s.deficit_pct, s.measurement.device))
    deficit = statistics.median(s.deficit_pct for s in headline)
    parts = []
    for probe, metric in metrics:
        mine = [s for s in group if (s.measurement.probe, s.measurement.metric) == (probe, metric)]
        devices = sorted({s.measurement.device for s in mine})
        scope = "host-side measurement" if set(devices) <= set(HOST_DEVICES) else \
            f"{len(devices)} of {context.gpu_count(host)} GPUs"
        parts.append(f"{probe}.{metric} low on {scope} (median deficit "
                     f"{statistics.median(s.deficit_pct for s in mine):.1f} %)")
    if starved:
        parts.append("host starved: " + ", ".join(starved))
    parts.append("the host, not one GPU")
    representative = dataclasses.replace(worst, deficit_pct=deficit, confirmed=all(s.confirmed for s in headline))
    cause = "starved_node" if starved else "slow_node"
    severity = _severity(representative, context.thresholds)
    finding = _speed_finding("slow_node", cause, severity, representative, "; ".join(parts), context)
    return dataclasses.replace(finding, gpu=None, gpu_uuid=None, pci_bus_id=None)


def _starved_hosts(suspects: Sequence[Suspect], context: _Context) -> list[Finding]:
    """A starved host with no slow measurement is still worth a warning: it will slow a job."""
    slow = {s.measurement.host for s in suspects}
    findings = []
    for host in sorted(context.facts):
        starved = coverage.starvation(context.facts[host], context.thresholds)
        if starved and host not in slow:
            verb, detail = rules.action("starved_node", WARN)
            findings.append(Finding(kind="slow_node", severity=WARN, host=host, basis=BASIS_FACTS, action=verb,
                                    action_detail=detail, evidence="host starved: " + ", ".join(starved)
                                    + "; no measurement slow yet"))
    return findings


def _severity(suspect: Suspect, thresholds: Thresholds) -> str:
    return FAIL if suspect.confirmed and suspect.deficit_pct >= thresholds.deficit_fail_pct else WARN


def _speed_finding(kind: str, cause: str, severity: str, suspect: Suspect, evidence: str,
                   context: _Context) -> Finding:
    m, ref = suspect.measurement, suspect.reference
    gpu = context.gpu(m)
    verb, detail = rules.action(cause, severity)
    return Finding(kind=kind, severity=severity, host=m.host, gpu=m.gpu, gpu_uuid=m.gpu_uuid,
                   pci_bus_id=gpu.pci_bus_id if gpu else None, metric=f"{m.probe}.{m.metric}",
                   value=round(m.value, 3), reference=round(ref.value, 3), unit=m.unit, reference_source=ref.source,
                   deficit_pct=round(suspect.deficit_pct, 2), robust_z=round(suspect.robust_z, 2),
                   confirmed=suspect.confirmed, basis=BASIS_RETEST if suspect.confirmed else BASIS_SINGLE_RUN,
                   evidence=evidence, action=verb, action_detail=detail)


def _speed_evidence(suspect: Suspect, context: _Context) -> str:
    m, ref = suspect.measurement, suspect.reference
    unit = f" {m.unit}" if m.unit else ""
    where = f" ({m.params.get('src')}->{m.params.get('dst')} {m.params.get('direction')})" if m.probe == "p2p" else ""
    parts = [f"{m.probe}.{m.metric} {m.value:.4g}{unit} vs {ref.source} reference {ref.value:.4g}{unit}{where}"]
    if suspect.why:
        parts.append(suspect.why)
    others = [r for r in context.refs[m.key].references if r.source != ref.source]
    if others:
        parts.append("also " + ", ".join(f"{r.source} {r.value:.4g}{unit}" for r in others))
    gpu = context.gpu(m)
    if gpu is not None and gpu.under_load and m.probe in COMPUTE_PROBES:
        reasons = rules.active_reasons(gpu.under_load, context.thresholds.throttle_share_pct) or []
        if not [r for r in reasons if r in rules.REASON_WORDS]:
            parts.append("no throttle reason seen by NVML")
        seen = rules.load_evidence(gpu.under_load, reasons)
        if seen:
            parts.append(seen)
    if not suspect.confirmed:
        parts.append(suspect.note or "not re-tested")
    return "; ".join(parts)


# ------------------------------------------------------------------------------------ GPU pairs


@dataclass(frozen=True)
class _Pair:
    """An intra-node GPU pair slow while neither GPU is slow with most of its partners."""

    host: str
    ends: tuple[str, str]
    worst: Suspect


def _attribute_pairs(suspects: Sequence[Suspect], found: Sequence[Measurement],
                     thresholds: Thresholds) -> tuple[list[Suspect], list[_Pair]]:
    """Attribute slow P2P pairs the way links are attributed: a GPU slow with most of its
    partners (``slow_node_share``, at least two partners) is the culprit, and its worst pair
    becomes its suspect; a slow pair between two GPUs that are fine elsewhere is a pair."""
    slow: dict[str, list[Suspect]] = defaultdict(list)
    for s in suspects:
        if s.measurement.probe == "p2p":
            slow[s.measurement.host].append(s)
    if not slow:
        return [], []
    partners: dict[tuple[str, str], set[str]] = defaultdict(set)
    uuids: dict[tuple[str, str], str | None] = {}
    for m in found:
        if m.probe == "p2p" and m.host in slow:
            src, dst = str(m.params.get("src")), str(m.params.get("dst"))
            partners[(m.host, src)].add(dst)
            partners[(m.host, dst)].add(src)
            uuids.setdefault((m.host, src), m.gpu_uuid)
    culprits: list[Suspect] = []
    pairs: list[_Pair] = []
    for host in sorted(slow):
        group = slow[host]
        slow_with: dict[str, set[str]] = defaultdict(set)
        for s in group:
            src, dst = _ends(s)
            slow_with[src].add(dst)
            slow_with[dst].add(src)
        blamed = sorted(device for device, others in slow_with.items()
                        if len(partners[(host, device)]) >= 2
                        and 100 * len(others) / len(partners[(host, device)]) >= thresholds.slow_node_share_pct)
        for device in blamed:
            mine = [s for s in group if device in _ends(s)]
            worst = max(mine, key=lambda s: (s.deficit_pct, _ends(s)))
            m = worst.measurement
            moved = m._replace(device=device, gpu_uuid=uuids.get((host, device)))
            why = f"slow with {len(slow_with[device])} of {len(partners[(host, device)])} NVLink partners"
            culprits.append(dataclasses.replace(worst, measurement=moved, why=why))
        by_pair: dict[tuple[str, str], list[Suspect]] = defaultdict(list)
        for s in group:
            ends = tuple(sorted(_ends(s)))
            if not set(ends) & set(blamed):
                by_pair[(ends[0], ends[1])].append(s)
        for ends, mine in sorted(by_pair.items()):
            pairs.append(_Pair(host, ends, max(mine, key=lambda s: (s.deficit_pct, _ends(s)))))
    return culprits, pairs


def _ends(suspect: Suspect) -> tuple[str, str]:
    params = suspect.measurement.params
    return str(params.get("src")), str(params.get("dst"))


def _pair_finding(pair: _Pair, context: _Context) -> Finding:
    a, b = pair.ends
    severity = _severity(pair.worst, context.thresholds)
    evidence = (f"{a}<->{b} slow while both GPUs are fine with their other partners; "
                + _speed_evidence(pair.worst, context))
    finding = _speed_finding("slow_link", "slow_link", severity, pair.worst, evidence, context)
    return dataclasses.replace(finding, gpu=device_index(a), peer=pair.host, peer_gpu=device_index(b))


# ------------------------------------------------------------------------------------ the rest


def _rule_findings(telemetry: Mapping[str, Mapping[str, rules.GpuTelemetry]], thresholds: Thresholds) -> list[Finding]:
    findings = []
    for host in sorted(telemetry):
        for gpu in telemetry[host].values():
            for rule in rules.telemetry_findings(gpu, thresholds.throttle_share_pct):
                verb, detail = rules.action(rule.cause, rule.severity)
                findings.append(Finding(kind=rule.kind, severity=rule.severity, host=host, gpu=rule.nvml_index,
                                        gpu_uuid=rule.gpu_uuid, pci_bus_id=gpu.pci_bus_id, evidence=rule.evidence,
                                        action=verb, action_detail=detail, basis=BASIS_TELEMETRY))
    return findings


def _merge(findings: Sequence[Finding]) -> list[Finding]:
    """One finding per host, GPU and kind: the speed one (it has figures) or the more severe."""
    chosen: dict[tuple[str, int | None, int | None, str], Finding] = {}
    for f in sorted(findings, key=finding_order):
        key = (f.host, f.gpu, f.peer_gpu, f.kind)
        current = chosen.get(key)
        if current is None:
            chosen[key] = f
        elif (current.metric is None) != (f.metric is None):
            # a speed finding and a telemetry one of the same GPU: the figures and both evidences
            speed, rule = (f, current) if current.metric is None else (current, f)
            severity = FAIL if FAIL in (f.severity, current.severity) else WARN
            verb, detail = (rule.action, rule.action_detail) if rule.severity == severity else \
                (speed.action, speed.action_detail)
            chosen[key] = dataclasses.replace(speed, severity=severity, action=verb, action_detail=detail,
                                              evidence=_join_evidence(speed.evidence, rule.evidence))
        elif f.metric is not None and f.metric != current.metric:
            chosen[key] = dataclasses.replace(current, evidence=f"{current.evidence}; also {f.metric} "
                                                                f"-{f.deficit_pct:.1f} %")
    return list(chosen.values())


def _join_evidence(*texts: str) -> str:
    """Evidence parts in order, each once (a rule may restate what the speed finding saw)."""
    parts: list[str] = []
    for text in texts:
        parts += [part for part in text.split("; ") if part and part not in parts]
    return "; ".join(parts)


def _fleet_shifts(suspects: Sequence[Suspect], found: Sequence[Measurement], thresholds: Thresholds) -> list[Finding]:
    """One ``fleet_shift`` per probe and metric that is slow on ``fleet_shift_share`` of the hosts
    measuring it (at least ``min_peers`` of them): a regression most of the fleet shares."""
    measured: dict[tuple[str, str], set[str]] = defaultdict(set)
    for m in found:
        measured[(m.probe, m.metric)].add(m.host)
    slow: dict[tuple[str, str], list[Suspect]] = defaultdict(list)
    for s in suspects:
        slow[(s.measurement.probe, s.measurement.metric)].append(s)
    findings = []
    for (probe, metric), group in sorted(slow.items()):
        hosts = sorted({s.measurement.host for s in group})
        total = len(measured[(probe, metric)])
        share = 100 * len(hosts) / total
        if total < thresholds.min_peers or share < thresholds.fleet_shift_share_pct:
            continue
        findings.append(_fleet_shift(probe, metric, group, hosts, total, share, thresholds))
    return findings


def _fleet_shift(probe: str, metric: str, group: Sequence[Suspect], hosts: Sequence[str], total: int,
                 share: float, thresholds: Thresholds) -> Finding:
    deficit = statistics.median(s.deficit_pct for s in group)
    confirmed_hosts = {s.measurement.host for s in group if s.confirmed}
    confirmed = 2 * len(confirmed_hosts) >= len(hosts)
    severity = FAIL if confirmed and deficit >= thresholds.deficit_fail_pct else WARN
    sources = Counter(s.reference.source for s in group)
    source = sorted(sources, key=lambda name: (-sources[name], name))[0]
    keys = {s.measurement.key for s in group}
    one_key = len(keys) == 1
    value = statistics.median(s.measurement.value for s in group) if one_key else None
    unit = group[0].measurement.unit if one_key else None
    verb, detail = rules.action("fleet_shift", severity)
    evidence = (f"{probe}.{metric} low on {len(hosts)} of {total} hosts ({share:.0f} %), median deficit "
                f"{deficit:.1f} % against the {source} reference; {len(confirmed_hosts)} hosts confirmed by re-test")
    return Finding(kind="fleet_shift", severity=severity, host=fold_hosts(hosts), metric=f"{probe}.{metric}",
                   value=round(value, 3) if value is not None else None,
                   reference=round(group[0].reference.value, 3) if one_key else None, unit=unit,
                   reference_source=source, deficit_pct=round(deficit, 2), share_pct=round(share, 1),
                   confirmed=confirmed, basis=BASIS_RETEST if confirmed else BASIS_SINGLE_RUN, evidence=evidence,
                   action=verb, action_detail=detail)


def _unkeyed(unkeyed: Mapping[str, int]) -> list[Finding]:
    """Hosts whose results could not be keyed: without facts they would pool every model and driver."""
    findings = []
    for host in sorted(unkeyed):
        verb, detail = rules.action("unchecked", WARN)
        findings.append(Finding(kind="unchecked", severity=WARN, host=host, basis=BASIS_FACTS, action=verb,
                                action_detail=detail,
                                evidence=f"no host facts (GPU model, driver): {unkeyed[host]} results not compared"))
    return findings


def _unmeasured_retest(suspect: Suspect) -> Finding:
    """A suspect its re-test could not measure: it was neither confirmed nor cleared."""
    m = suspect.measurement
    verb, detail = rules.action("unchecked", WARN)
    return Finding(kind="unchecked", severity=WARN, host=m.host, gpu=m.gpu, gpu_uuid=m.gpu_uuid,
                   metric=f"{m.probe}.{m.metric}", basis=BASIS_ERROR_RECORD, action=verb, action_detail=detail,
                   evidence=f"{m.probe}.{m.metric} was {suspect.deficit_pct:.1f} % low and its re-test could not "
                            f"measure it ({suspect.note}): neither confirmed nor cleared")


def _hosts_by_metric(found: Iterable[Measurement]) -> dict[tuple[str, str], list[str]]:
    hosts: dict[tuple[str, str], list[str]] = defaultdict(list)
    for m in found:
        hosts[(m.probe, m.metric)].append(m.host)
    return hosts


# Findings that keep a host out of a job: any fail on the host itself, or a host or GPU that
# could not be checked. A fleet-wide shift names no host to exclude; a result with nothing to
# compare against is no reason to exclude its host.
NOT_EXCLUDING = ("fleet_shift",)


def job_impact(found: Sequence[Measurement], refs: Mapping[str, KeyReferences], findings: Sequence[Finding],
               hosts: Sequence[Mapping[str, Any]], thresholds: Thresholds) -> Impact:
    """A synchronous job runs at its slowest GPU's GEMM pace, against the reference that judges
    it (the fleet's level, or the baseline or SKU figure where the whole fleet fell below it):
    the slowdown on all hosts, and what keeping out the hosts with fail findings or no check
    recovers."""
    names = {h["host"] for h in hosts}
    exclude = tuple(sorted({f.host for f in findings if f.host in names and f.kind not in NOT_EXCLUDING
                            and (f.severity == FAIL or (f.kind == "unchecked" and f.basis != "comparison"))}))
    expected = {key: key_refs.expected(thresholds) for key, key_refs in refs.items()}
    ratios = [(m.value / expected[m.key].value, m) for m in found if m.probe == "gemm" and m.key in expected]
    if not ratios:
        return Impact(None, None, None, exclude, len(hosts))
    slowest_ratio, slowest = min(ratios, key=lambda item: (item[0], item[1].host, item[1].device))
    excluded = set(exclude)
    kept = [ratio for ratio, m in ratios if m.host not in excluded]
    slowdown = max(0.0, 100 * (1 - slowest_ratio))
    remaining = max(0.0, 100 * (1 - min(kept))) if kept else 0.0
    return Impact(slowdown, {"host": slowest.host, "gpu": slowest.gpu, "metric": "gemm.tflops",
                             "value": round(slowest.value, 3), "reference": round(expected[slowest.key].value, 3),
                             "unit": slowest.unit, "reference_source": expected[slowest.key].source},
                  max(0.0, slowdown - remaining), exclude, len(hosts))
