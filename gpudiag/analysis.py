"""Fleet comparison: from measurements to findings, with evidence, an action, and job impact.

1. Every ok result of a compared probe gets its baseline key (gpudiag.keys); keys never pool.
2. Reference per key: the live fleet median with ``min_peers`` results or more, else the stored
   baseline's median, else the SKU figure times ``sku_floor``. Spread: MAD x 1.4826 (a normal
   sigma), at least ``mad_floor`` of the reference, so a perfectly tight fleet flags no noise.
3. A suspect needs robust z <= ``robust_z`` AND a deficit >= ``deficit_warn`` (``fail`` from
   ``deficit_fail``). It is re-tested alone on its host; only a repeat is ``confirmed``.
4. Suspects become findings by what else is known: NVML reasons make ``throttled``, a narrow
   PCIe link ``degraded_pcie``, a link down ``nvlink_down``; most GPUs of a host slow on one
   metric (or its host-side results slow) make one ``slow_node``; otherwise ``slow_gpu``.
   Telemetry rules add findings of their own (gpudiag.rules).
5. Job impact: a synchronous job runs at the pace of its slowest GPU.

Pure functions of the measurements: the same input gives byte-identical findings.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from . import rules
from .findings import FAIL, WARN, Finding, cost_order, unchecked
from .keys import COMPARED_PROBES, host_keys
from .results import device_index
from .sku import FloorKey, floor_key
from .thresholds import Thresholds

MAD_TO_SIGMA = 1.4826
SPEED_KINDS = {"gemm": "slow_gpu", "membw": "slow_gpu", "smclock": "slow_gpu", "p2p": "slow_gpu",
               "pcie": "degraded_pcie"}
# Probes whose speed the SM clock and throttle reasons explain (their evidence quotes them).
COMPUTE_PROBES = ("gemm", "smclock", "membw")
# A speed suspect takes the kind of a telemetry finding of its GPU that explains it.
EXPLAINED_BY = {"gemm": ("throttled",), "smclock": ("throttled",), "membw": ("throttled",),
                "p2p": ("nvlink_down",), "pcie": ("degraded_pcie",)}


class BaselineLookup(Protocol):
    def get(self, key: str) -> Any: ...


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

    @property
    def gpu(self) -> int | None:
        return device_index(self.device)

    @property
    def repeat_key(self) -> tuple[str, str, str, str, str]:
        """What a re-test must match: the same host, device, probe, metric and parameters except
        ``mode`` (the re-test runs GPUs one at a time)."""
        params = {k: v for k, v in sorted(self.params.items()) if k != "mode"}
        return self.host, self.device, self.probe, self.metric, repr(params)


@dataclass(frozen=True)
class Reference:
    """The expected value of a key, its spread (a robust sigma), where it came from, and peers."""

    value: float
    spread: float
    source: str
    peers: int


@dataclass(frozen=True)
class Suspect:
    measurement: Measurement
    reference: Reference
    robust_z: float
    deficit_pct: float
    confirmed: bool = False


@dataclass(frozen=True)
class Impact:
    """Estimated slowdown (percent) of a synchronous job on these hosts and what excluding recovers."""

    slowdown_pct: float
    slowest: Mapping[str, Any] | None
    recovered_pct: float
    exclude: tuple[str, ...]
    hosts_total: int

    def to_dict(self) -> dict[str, Any]:
        return {"slowdown_pct": round(self.slowdown_pct, 2), "slowest": dict(self.slowest) if self.slowest else None,
                "recovered_pct": round(self.recovered_pct, 2), "exclude": list(self.exclude),
                "hosts_total": self.hosts_total}


@dataclass(frozen=True)
class Analysis:
    findings: tuple[Finding, ...]
    suspects: tuple[Suspect, ...]
    impact: Impact


def measurements(hosts: Sequence[Mapping[str, Any]],
                 telemetry: dict[str, dict[str, rules.GpuTelemetry]] | None = None) -> list[Measurement]:
    """The compared results of every ok host, in document order. With ``telemetry``, each ok
    host's GPU telemetry is gathered into it in the same pass (a large sweep is read once)."""
    found = []
    for host in hosts:
        if host.get("status") != "ok":
            continue
        key_of = host_keys(host.get("facts") or {})
        name = host["host"]
        collector = rules.TelemetryCollector(name) if telemetry is not None else None
        for result in host.get("results") or ():
            probe = result.get("probe")
            if collector is not None and probe in ("telemetry", "gemm"):
                collector.add(result)
            if probe not in COMPARED_PROBES:
                continue
            key = key_of(result)
            if key is not None and result.get("value") is not None:
                found.append(Measurement(name, result["device"], result.get("gpu_uuid"), key, probe,
                                         result["metric"], float(result["value"]), result.get("params") or {}))
        if collector is not None and telemetry is not None:
            telemetry[name] = collector.gpus()
    return found


def references(found: Iterable[Measurement], thresholds: Thresholds, baseline: BaselineLookup | None = None,
               sku_floors: Mapping[FloorKey, float] | None = None) -> dict[str, Reference]:
    """The reference of every key seen (see the module docstring)."""
    by_key: dict[str, list[float]] = defaultdict(list)
    floor_keys: dict[str, FloorKey] = {}
    for m in found:
        values = by_key[m.key]
        if not values:
            floor_keys[m.key] = floor_key(m.probe, m.metric, m.params)
        values.append(m.value)
    refs = {}
    for key, values in by_key.items():
        ref = _reference(values, thresholds, baseline.get(key) if baseline else None,
                         (sku_floors or {}).get(floor_keys[key]))
        if ref is not None:
            refs[key] = ref
    return refs


def _reference(values: list[float], thresholds: Thresholds, stored: Any, floor: float | None) -> Reference | None:
    if len(values) >= thresholds.min_peers:
        median = statistics.median(values)
        mad = statistics.median([abs(v - median) for v in values])
        return Reference(median, _spread(mad, median, thresholds), "fleet", len(values))
    if stored is not None:
        return Reference(stored.median, _spread(stored.mad, stored.median, thresholds), "baseline", stored.count)
    if floor is not None:
        value = floor * thresholds.sku_floor_pct / 100
        return Reference(value, _spread(0.0, value, thresholds), "sku", 0)
    return None


def _spread(mad: float, reference: float, thresholds: Thresholds) -> float:
    return max(MAD_TO_SIGMA * mad, abs(reference) * thresholds.mad_floor_pct / 100)


def find_suspects(found: Iterable[Measurement], refs: Mapping[str, Reference], thresholds: Thresholds) -> list[Suspect]:
    """Results both far (robust z) and materially (deficit) below their reference."""
    suspects = []
    for m in found:
        ref = refs.get(m.key)
        if ref is None or ref.value <= 0:
            continue
        deficit = 100 * (ref.value - m.value) / ref.value
        z = (m.value - ref.value) / ref.spread
        if z <= thresholds.robust_z and deficit >= thresholds.deficit_warn_pct:
            suspects.append(Suspect(m, ref, z, deficit))
    return suspects


def confirm(suspects: Sequence[Suspect], retested: Sequence[Measurement] | None,
            retested_hosts: Iterable[str], thresholds: Thresholds) -> list[Suspect]:
    """Suspects whose re-test repeats the deficit are confirmed; those whose re-test does not are
    dropped (a one-off dip). A suspect whose host could not be re-tested stays, unconfirmed.

    Both measurements are evidence: their mean must fall ``retest_deficit`` below the reference
    and be as far below it (robust z) as one suspect must be, and the re-test must itself fall
    below the reference. Averaging halves the noise's variance, so
    a real 5 % deficit is rarely lost to one unlucky draw, and a noise dip rarely repeats."""
    if retested is None:
        return list(suspects)
    repeats = {m.repeat_key: m for m in retested}
    hosts = set(retested_hosts)
    kept = []
    for suspect in suspects:
        again = repeats.get(suspect.measurement.repeat_key)
        if again is not None:
            deficit = 100 * (suspect.reference.value - again.value) / suspect.reference.value
            mean_deficit = (suspect.deficit_pct + deficit) / 2
            mean_z = (suspect.robust_z + (again.value - suspect.reference.value) / suspect.reference.spread) / 2
            if deficit > 0 and mean_deficit >= thresholds.retest_deficit_pct and mean_z <= thresholds.robust_z:
                kept.append(Suspect(suspect.measurement, suspect.reference, suspect.robust_z, mean_deficit,
                                    confirmed=True))
        elif suspect.measurement.host not in hosts:
            kept.append(suspect)
    return kept


def analyse(hosts: Sequence[Mapping[str, Any]], thresholds: Thresholds, *, baseline: BaselineLookup | None = None,
            sku_floors: Mapping[FloorKey, float] | None = None,
            retest_hosts: Sequence[Mapping[str, Any]] | None = None) -> Analysis:
    """Findings, suspects and job impact of one sweep (``retest_hosts``: the re-test's host dicts)."""
    telemetry: dict[str, dict[str, rules.GpuTelemetry]] = {}
    found = measurements(hosts, telemetry)
    refs = references(found, thresholds, baseline, sku_floors)
    suspects = find_suspects(found, refs, thresholds)
    if retest_hosts is not None:
        suspects = confirm(suspects, measurements(retest_hosts), [h["host"] for h in retest_hosts], thresholds)
    findings = _speed_findings(suspects, telemetry, hosts, thresholds) + _rule_findings(telemetry)
    findings = _merge(findings) + [unchecked(h["host"], h["status"], h.get("error")) for h in hosts
                                   if h.get("status") != "ok"]
    ordered = tuple(sorted(findings, key=finding_order))
    return Analysis(ordered, tuple(suspects), job_impact(found, refs, ordered, hosts))


def finding_order(finding: Finding) -> tuple[Any, ...]:
    """What a finding costs a job first (gpudiag.findings.cost_order, as reports sort them)."""
    return cost_order(finding.to_dict())


def _speed_findings(suspects: Sequence[Suspect], telemetry: Mapping[str, Mapping[str, rules.GpuTelemetry]],
                    hosts: Sequence[Mapping[str, Any]], thresholds: Thresholds) -> list[Finding]:
    gpu_counts = {h["host"]: (h.get("facts") or {}).get("gpu_count") or 0 for h in hosts}
    by_host_metric: dict[tuple[str, str, str], list[Suspect]] = defaultdict(list)
    for suspect in _attribute_pairs(suspects):
        m = suspect.measurement
        by_host_metric[(m.host, m.probe, m.metric)].append(suspect)
    node_wide = {key for key, group in by_host_metric.items()
                 if _node_wide(group, gpu_counts.get(key[0], 0), thresholds)}
    slow_hosts = {host for host, _, _ in node_wide}
    findings = []
    for (host, probe, metric), group in sorted(by_host_metric.items()):
        if (host, probe, metric) in node_wide:
            findings.append(_slow_node(host, probe, metric, group, gpu_counts.get(host, 0), thresholds))
            continue
        for suspect in group:
            finding = _gpu_finding(suspect, telemetry.get(host, {}), thresholds)
            # On a slow node, a GPU slower than its peers with no GPU-level cause is the node's doing.
            if not (host in slow_hosts and finding.kind == "slow_gpu"):
                findings.append(finding)
    return findings


def _node_wide(group: Sequence[Suspect], gpu_count: int, thresholds: Thresholds) -> bool:
    """Host-side results are slow, or most of the host's GPUs are slow on one metric."""
    devices = {s.measurement.device for s in group}
    if "cpu" in devices:
        return True
    return gpu_count >= 2 and 100 * len(devices) / gpu_count >= thresholds.slow_node_share_pct


def _attribute_pairs(suspects: Sequence[Suspect]) -> list[Suspect]:
    """A P2P pair is slow when either end is: keep the pairs of the GPU in most slow pairs."""
    pairs = [s for s in suspects if s.measurement.probe == "p2p"]
    if not pairs:
        return list(suspects)
    kept = [s for s in suspects if s.measurement.probe != "p2p"]
    by_host: dict[str, list[Suspect]] = defaultdict(list)
    for s in pairs:
        by_host[s.measurement.host].append(s)
    for host, group in sorted(by_host.items()):
        involvement: dict[str, int] = defaultdict(int)
        for s in group:
            for end in (s.measurement.params.get("src"), s.measurement.params.get("dst")):
                involvement[str(end)] += 1
        worst = max(involvement.values())
        culprits = sorted(d for d, n in involvement.items() if n == worst)
        for device in culprits:
            mine = [s for s in group if device in (s.measurement.params.get("src"), s.measurement.params.get("dst"))]
            best = max(mine, key=lambda s: (s.deficit_pct, s.measurement.params.get("dst", "")))
            moved = Measurement(host, device, best.measurement.gpu_uuid if best.measurement.device == device else None,
                                best.measurement.key, "p2p", best.measurement.metric, best.measurement.value,
                                best.measurement.params)
            kept.append(Suspect(moved, best.reference, best.robust_z, best.deficit_pct, best.confirmed))
    return kept


def _gpu_finding(suspect: Suspect, telemetry: Mapping[str, rules.GpuTelemetry], thresholds: Thresholds) -> Finding:
    m = suspect.measurement
    gpu_rules = telemetry.get(m.gpu_uuid or "")
    kind = SPEED_KINDS.get(m.probe, "slow_gpu")
    context = {r.kind for r in rules.telemetry_findings(gpu_rules)} if gpu_rules else set()
    kind = next((k for k in EXPLAINED_BY.get(m.probe, ()) if k in context), kind)
    evidence = _speed_evidence(suspect, gpu_rules)
    return _finding(kind, m.host, m.gpu, suspect, evidence, thresholds)


def _slow_node(host: str, probe: str, metric: str, group: Sequence[Suspect], gpu_count: int,
               thresholds: Thresholds) -> Finding:
    worst = max(group, key=lambda s: (s.deficit_pct, s.measurement.device))
    deficit = statistics.median(s.deficit_pct for s in group)
    devices = sorted({s.measurement.device for s in group})
    scope = "host-side measurement" if devices == ["cpu"] else f"{len(devices)} of {gpu_count} GPUs"
    evidence = f"{probe}.{metric} low on {scope} (median deficit {deficit:.1f} %): the host, not one GPU"
    median_suspect = Suspect(worst.measurement, worst.reference, worst.robust_z, deficit,
                             all(s.confirmed for s in group))
    return _finding("slow_node", host, None, median_suspect, evidence, thresholds)


def _finding(kind: str, host: str, gpu: int | None, suspect: Suspect, evidence: str,
             thresholds: Thresholds) -> Finding:
    m = suspect.measurement
    severity = FAIL if suspect.deficit_pct >= thresholds.deficit_fail_pct and suspect.confirmed else WARN
    return Finding(kind=kind, severity=severity, host=host, gpu=gpu, metric=f"{m.probe}.{m.metric}",
                   value=round(m.value, 3), reference=round(suspect.reference.value, 3),
                   deficit_pct=round(suspect.deficit_pct, 2), robust_z=round(suspect.robust_z, 2),
                   confirmed=suspect.confirmed, evidence=evidence, action=rules.ACTIONS[kind])


def _speed_evidence(suspect: Suspect, telemetry: rules.GpuTelemetry | None) -> str:
    m, ref = suspect.measurement, suspect.reference
    where = f" ({m.params.get('src')}->{m.params.get('dst')} {m.params.get('direction')})" if m.probe == "p2p" else ""
    parts = [f"{m.probe}.{m.metric} {m.value:.4g} vs {ref.source} reference {ref.value:.4g}{where}"]
    if telemetry is not None and telemetry.under_load and m.probe in COMPUTE_PROBES:
        reasons = [r for r in telemetry.under_load.get("clocks_event_reasons") or [] if r in rules.REASON_WORDS]
        if not reasons:
            parts.append("no throttle reason seen by NVML")
        seen = rules.load_evidence(telemetry.under_load)
        if seen:
            parts.append(seen)
    if not suspect.confirmed:
        parts.append("not re-tested")
    return "; ".join(parts)


def _rule_findings(telemetry: Mapping[str, Mapping[str, rules.GpuTelemetry]]) -> list[Finding]:
    findings = []
    for host in sorted(telemetry):
        for gpu in telemetry[host].values():
            for rule in rules.telemetry_findings(gpu):
                findings.append(Finding(kind=rule.kind, severity=rule.severity, host=host, gpu=rule.nvml_index,
                                        evidence=rule.evidence, action=rules.ACTIONS[rule.kind], confirmed=True))
    return findings


def _merge(findings: Sequence[Finding]) -> list[Finding]:
    """One finding per host, GPU and kind: the speed one (it has figures) or the more severe."""
    chosen: dict[tuple[str, int | None, str], Finding] = {}
    for f in sorted(findings, key=finding_order):
        key = (f.host, f.gpu, f.kind)
        current = chosen.get(key)
        if current is None:
            chosen[key] = f
        elif (current.metric is None) != (f.metric is None):
            # a speed finding and a telemetry one of the same GPU: the figures and both evidences
            speed, rule = (f, current) if current.metric is None else (current, f)
            chosen[key] = _with(speed, severity=FAIL if FAIL in (f.severity, current.severity) else WARN,
                                evidence=_join_evidence(speed.evidence, rule.evidence))
        elif f.metric is not None and f.metric != current.metric:
            chosen[key] = _with(current, evidence=f"{current.evidence}; also {f.metric} -{f.deficit_pct:.1f} %")
    return list(chosen.values())


def _join_evidence(*texts: str) -> str:
    """Evidence parts in order, each once (a rule may restate what the speed finding saw)."""
    parts: list[str] = []
    for text in texts:
        parts += [part for part in text.split("; ") if part and part not in parts]
    return "; ".join(parts)


def _with(finding: Finding, **changes: Any) -> Finding:
    return dataclasses.replace(finding, **changes)


def job_impact(found: Sequence[Measurement], refs: Mapping[str, Reference], findings: Sequence[Finding],
               hosts: Sequence[Mapping[str, Any]]) -> Impact:
    """A synchronous job runs at its slowest GPU's GEMM pace: the slowdown on all hosts, and what
    keeping out the hosts with fail findings or no check recovers."""
    exclude = tuple(sorted({f.host for f in findings if f.severity == FAIL or f.kind == "unchecked"}))
    ratios = [(m.value / refs[m.key].value, m) for m in found
              if m.probe == "gemm" and m.key in refs and refs[m.key].value > 0]
    if not ratios:
        return Impact(0.0, None, 0.0, exclude, len(hosts))
    slowest_ratio, slowest = min(ratios, key=lambda item: (item[0], item[1].host, item[1].device))
    kept = [ratio for ratio, m in ratios if m.host not in exclude]
    slowdown = max(0.0, 100 * (1 - slowest_ratio))
    remaining = max(0.0, 100 * (1 - min(kept))) if kept else 0.0
    return Impact(slowdown, {"host": slowest.host, "gpu": slowest.gpu, "metric": "gemm.tflops",
                             "value": round(slowest.value, 3), "reference": round(refs[slowest.key].value, 3)},
                  max(0.0, slowdown - remaining), exclude, len(hosts))

