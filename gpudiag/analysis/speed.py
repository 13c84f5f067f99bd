"""Speed suspects become findings by what else is known: NVML reasons, the PCIe link, NVLink
state, the host's facts, how many of the host's GPUs are slow. Telemetry rules add findings of
their own, and findings of one GPU and kind are merged."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from ..findings import Basis, Finding, FindingView, Kind, Severity, cost_order
from ..words import deficit_text, figure, plural
from . import actions, clocks, coverage, rules
from .actions import Cause
from .identity import NO_GPU, GpuIdentity, HostGpus
from .measurements import HOST_DEVICES, NODE_MEDIAN, Measurement
from .noisy import MEDIAN_EFFICIENCY
from .pairs import Pair, attribute_pairs
from .reference import BASELINE, FLEET, MAD_TO_SIGMA, SKU, KeyReferences
from .suspects import COMPUTE_PROBES, Suspect
from .suspicion import below_its_siblings, cleared_by_siblings
from .thresholds import Thresholds


def finding_order(finding: Finding) -> tuple[Any, ...]:
    """What a finding costs a job first (gpudiag.findings.cost_order, as reports sort them), read
    through a view (a sort keeps every key: not a whole document object each)."""
    return cost_order(FindingView(finding))


@dataclass(frozen=True)
class Context:
    thresholds: Thresholds
    telemetry: Mapping[str, Mapping[str, rules.GpuTelemetry]]
    facts: Mapping[str, Mapping[str, Any]]
    refs: Mapping[str, KeyReferences]
    found: Sequence[Measurement]
    by_host: Mapping[str, Sequence[Measurement]]
    # Which GPU each host's records name (NVML's index, UUID, bus id): gpudiag.analysis.identity.
    identities: Mapping[str, HostGpus] = dataclasses.field(default_factory=dict)
    # Per key of a compute probe, its GPUs' median clock cost under load: gpudiag.analysis.clocks.
    clock_costs: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def gpu(self, m: Measurement) -> rules.GpuTelemetry | None:
        return self.telemetry.get(m.host, {}).get(m.gpu_uuid or "")

    def identity(self, host: str, device: str, gpu_uuid: str | None = None) -> GpuIdentity:
        """The GPU ``device`` (``cuda:N``, ``gpu:N``) of ``host`` names, by NVML's index."""
        gpus = self.identities.get(host)
        if gpus is None:
            gpus = HostGpus(self.facts.get(host, {}))
        return gpus.of(device, gpu_uuid) if device not in HOST_DEVICES else NO_GPU

    def gpu_name(self, host: str, device: str) -> str:
        """``GPU 5``, or ``GPU 5 (cuda:4)`` where CUDA numbers it otherwise; the label where NVML's
        index is unknown."""
        found = self.identity(host, device)
        if found.nvml_index is None:
            return device
        return f"GPU {found.nvml_index}" + ("" if found.renumbered_note() is None else f" ({device})")

    def host_values(self, host: str, key: str) -> list[float]:
        """Every value ``host`` measured for ``key`` (its GPUs' figures of one metric and shape)."""
        return [m.value for m in self.by_host.get(host, ()) if m.key == key]

    def gpu_count(self, host: str) -> int:
        count = self.facts.get(host, {}).get("gpu_count")
        return int(count) if isinstance(count, (int, float)) else 0


# ------------------------------------------------------------------------------------ speed findings


def speed_findings(suspects: Sequence[Suspect], context: Context) -> list[Finding]:
    culprits, pairs = attribute_pairs(suspects, context.found, context.thresholds, context.refs)
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
    # A node median low where its GPUs' telemetry explains them (a throttle, a PCIe link) is theirs.
    causes = {(f.host, f.metric) for f in explained}
    for host in sorted(unexplained):
        group = [s for s in unexplained[host] if s.measurement.device != NODE_MEDIAN
                 or (host, f"{s.measurement.probe}.{s.measurement.metric}") not in causes]
        findings += _unexplained(host, group, context) if group else []
    return findings


def _cause(suspect: Suspect, context: Context) -> Cause | None:
    """What the GPU's telemetry says slowed this measurement, or None."""
    m = suspect.measurement
    gpu = context.gpu(m)
    if gpu is None:
        return None
    if m.probe in COMPUTE_PROBES:  # a reason explains only what its clock drop explains
        cause = clocks.clock_cause(suspect, gpu, context.clock_costs, context.thresholds)
        if cause is not None:
            return cause
    if m.probe == "pcie" and rules.pcie_problems(gpu):
        return Cause.DEGRADED_PCIE
    if m.probe == "p2p" and rules.nvlink_down(gpu) is not None:
        return Cause.NVLINK_DOWN
    return None


KIND_OF_CAUSE = {Cause.THROTTLED: Kind.THROTTLED, Cause.POWER_CAPPED: Kind.THROTTLED,
                 Cause.DEGRADED_PCIE: Kind.DEGRADED_PCIE, Cause.NVLINK_DOWN: Kind.NVLINK_DOWN}


def _explained(suspect: Suspect, cause: Cause, context: Context) -> Finding:
    severity = _severity(suspect, context.thresholds)
    if cause == Cause.POWER_CAPPED:  # a cap is a policy, not a broken part: a fail only when it costs against the SKU
        sku = context.refs[suspect.measurement.key].get(SKU)
        costly = sku is not None and sku.deficit_pct(suspect.measurement.value) >= context.thresholds.deficit_fail_pct
        severity = Severity.FAIL if suspect.confirmed and costly else Severity.WARN
    return _speed_finding(KIND_OF_CAUSE[cause], cause, severity, suspect, _speed_evidence(suspect, context), context)


def _unexplained(host: str, group: Sequence[Suspect], context: Context) -> list[Finding]:
    """A host's speed suspects with no GPU-level cause: one ``slow_node`` when its facts say it
    is starved or most of its GPUs are slow on one metric; otherwise one ``slow_gpu`` each."""
    starved = coverage.starvation(context.facts.get(host, {}), context.thresholds)
    by_metric: dict[tuple[str, str], list[Suspect]] = defaultdict(list)
    for suspect in group:
        by_metric[(suspect.measurement.probe, suspect.measurement.metric)].append(suspect)
    wide = {metric for metric, suspects in by_metric.items() if _node_wide(host, suspects, context)}
    if starved or wide:
        # A GPU far below its own siblings in its own arithmetic or memory is broken besides, and
        # named too; host-bound copies (PCIe) may differ by NUMA node on a starved host.
        beside = [judged for judged in map(below_its_siblings, group)
                  if judged is not None and judged.measurement.probe in COMPUTE_PROBES]
        return [_slow_node(host, group, starved, wide, context)] + [_slow_gpu(s, context) for s in beside]
    return [_slow_gpu(suspect, context) for suspect in group]


def _slow_gpu(suspect: Suspect, context: Context) -> Finding:
    probe = suspect.measurement.probe
    cause = {"pcie": Cause.SLOW_GPU_PCIE, "p2p": Cause.SLOW_GPU_P2P}.get(probe, Cause.SLOW_GPU)
    evidence = _speed_evidence(suspect, context)
    if probe == "pcie":
        evidence += "; the PCIe link trains at full width and generation"
    severity = _severity(suspect, context.thresholds)
    return _speed_finding(Kind.SLOW_GPU, cause, severity, suspect, evidence, context)


def _node_wide(host: str, group: Sequence[Suspect], context: Context) -> bool:
    """Host-side results are slow, or most of the host's GPUs are slow on one metric, or half of
    them are and the host's median on that metric is itself below the reference (a whole node
    slowed by about the threshold has some GPUs that noise lifts just above it), or the host's
    median is itself ``deficit_warn`` below the reference and its slow GPUs that are not below
    their siblings are within noise of it (a node 8 % below the SKU figure on every GPU, one of
    which noise pushed past the bar: the deficit is the node's, not that GPU's)."""
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
    median = statistics.median(values)
    if 2 * len(devices) >= gpu_count and first.reference.flags(median, context.thresholds):
        return True
    warn = context.thresholds.deficit_warn_pct
    node_deficit = first.reference.deficit_pct(median)
    # Within noise of its node: less than deficit_warn below the node's median, or (a noisy node)
    # less than the bar's sigmas of the node's own scatter. A GPU its siblings found below them is
    # broken besides (``_unexplained`` names it beside the node), and does not speak for the node.
    scatter = 100 * MAD_TO_SIGMA * statistics.median(abs(v - median) for v in values) / median if median > 0 else 0.0
    tolerance = max(warn, abs(context.thresholds.robust_z) * scatter)
    # One its siblings screened and its re-test cleared of them is like its node by that test, which
    # its runs made: the node's own scatter over 8 first-pass values can read tight by chance (a
    # node 10 % below the SKU figure at 2 % noise, a GPU whose re-test read 3.4 % under the
    # node's median, named three GPUs slow_gpu and passed five GPUs 9 % below).
    alike = [s for s in group if below_its_siblings(s) is None]
    like_its_node = bool(alike) and all(cleared_by_siblings(s) or s.deficit_pct - node_deficit < tolerance
                                        for s in alike)
    # The node's own deficit must be more than its median's noise makes by chance: at 3 % noise a
    # median of 8 GPUs scatters 1.3 %, and a healthy node with one 10 %-slow GPU read 3.3 % low.
    # One GPU's noise: a measured reference's spread, else (a SKU figure's is fixed) the node's own.
    measured = first.reference.source in (FLEET, BASELINE) and first.reference.value
    noise = 100 * first.reference.spread / abs(first.reference.value) if measured else scatter
    chance = abs(context.thresholds.robust_z) * MEDIAN_EFFICIENCY * noise / math.sqrt(len(values))
    return len(values) >= context.thresholds.sibling_min_gpus and like_its_node and node_deficit >= max(warn, chance)


def _slow_node(host: str, group: Sequence[Suspect], starved: Sequence[str], wide: set[tuple[str, str]],
               context: Context) -> Finding:
    metrics = sorted(wide) or sorted({(s.measurement.probe, s.measurement.metric) for s in group})

    def weight(metric: tuple[str, str]) -> tuple[bool, float]:
        mine = [s for s in group if (s.measurement.probe, s.measurement.metric) == metric]
        return all(s.confirmed for s in mine), statistics.median(s.deficit_pct for s in mine)

    # The node's worst metric (confirmed first) heads it and sets its severity: a node 12 % low in
    # PCIe bandwidth on every GPU and 4.5 % in GEMM was a warning by its GEMM, the first by name.
    headline_metric = max(metrics, key=weight)
    headline = [s for s in group if (s.measurement.probe, s.measurement.metric) == headline_metric]
    worst = max(headline, key=lambda s: (s.deficit_pct, s.measurement.device))
    deficit = statistics.median(s.deficit_pct for s in headline)
    parts = []
    for probe, metric in [headline_metric, *(m for m in metrics if m != headline_metric)]:
        mine = [s for s in group if (s.measurement.probe, s.measurement.metric) == (probe, metric)]
        devices = sorted({s.measurement.device for s in mine})
        gpus = [device for device in devices if device not in HOST_DEVICES]
        scopes = [f"{len(gpus)} of {plural(context.gpu_count(host), 'GPU')}"] if gpus else []
        if NODE_MEDIAN in devices:
            scopes.append("the median of its GPUs, against the fleet's node medians")
        scope = " and ".join(scopes) or "host-side measurement"
        parts.append(f"{probe}.{metric} low on {scope} (median deficit "
                     f"{deficit_text(statistics.median(s.deficit_pct for s in mine))})")
    if starved:
        parts.append("host starved: " + ", ".join(starved))
    parts.append("the host, not one GPU")
    representative = dataclasses.replace(worst, deficit_pct=deficit, confirmed=all(s.confirmed for s in headline))
    cause = Cause.STARVED_NODE if starved else Cause.SLOW_NODE
    severity = _severity(representative, context.thresholds)
    finding = _speed_finding(Kind.SLOW_NODE, cause, severity, representative, "; ".join(parts), context)
    return dataclasses.replace(finding, gpu=None, gpu_uuid=None, pci_bus_id=None)


def starved_hosts(suspects: Sequence[Suspect], context: Context) -> list[Finding]:
    """A starved host with no slow measurement is still worth a warning: it will slow a job."""
    slow = {s.measurement.host for s in suspects}
    findings = []
    for host in sorted(context.facts):
        starved = coverage.starvation(context.facts[host], context.thresholds)
        if starved and host not in slow:
            verb, detail = actions.action(Cause.STARVED_NODE, Severity.WARN)
            findings.append(Finding(kind=Kind.SLOW_NODE, severity=Severity.WARN, host=host, basis=Basis.FACTS,
                                    action=verb, action_detail=detail, evidence="host starved: " + ", ".join(starved)
                                    + "; no measurement slow yet"))
    return findings


def _severity(suspect: Suspect, thresholds: Thresholds) -> Severity:
    return Severity.FAIL if suspect.confirmed and suspect.deficit_pct >= thresholds.deficit_fail_pct else Severity.WARN


def _speed_finding(kind: Kind, cause: Cause, severity: Severity, suspect: Suspect, evidence: str,
                   context: Context) -> Finding:
    m, ref = suspect.measurement, suspect.reference
    gpu = context.gpu(m)
    who = context.identity(m.host, m.device, m.gpu_uuid)
    verb, detail = actions.action(cause, severity, who.nvml_index)
    note = who.renumbered_note()
    if note is not None and m.probe != "p2p":  # a pair's evidence names its ends by NVML's index already
        evidence = f"{evidence}; {note}"
    return Finding(kind=kind, severity=severity, host=m.host, gpu=who.nvml_index, gpu_uuid=who.gpu_uuid or m.gpu_uuid,
                   pci_bus_id=(gpu.pci_bus_id if gpu else None) or who.pci_bus_id, metric=f"{m.probe}.{m.metric}",
                   value=round(m.value, 3), reference=round(ref.value, 3), unit=m.unit, reference_source=ref.source,
                   deficit_pct=round(suspect.deficit_pct, 2), robust_z=round(suspect.robust_z, 2),
                   confirmed=suspect.confirmed, basis=Basis.RETEST if suspect.confirmed else Basis.SINGLE_RUN,
                   evidence=evidence, action=verb, action_detail=detail)


def _speed_evidence(suspect: Suspect, context: Context) -> str:
    m, ref = suspect.measurement, suspect.reference
    where = ""
    if m.probe == "p2p":
        ends = [context.gpu_name(m.host, str(m.params.get(end))) for end in ("src", "dst")]
        where = f" ({ends[0]}->{ends[1]} {m.params.get('direction')})"
    parts = [f"{m.probe}.{m.metric} {figure(m.value, m.unit)} vs {ref.source} reference {figure(ref.value, m.unit)}"
             f"{where}"]
    if suspect.why:
        parts.append(suspect.why)
    others = [r for r in context.refs[m.key].references if r.source != ref.source]
    if others:
        parts.append("also " + ", ".join(f"{r.source} {figure(r.value, m.unit)}" for r in others))
    gpu = context.gpu(m)
    if gpu is not None and gpu.under_load and m.probe in COMPUTE_PROBES:
        reasons = rules.seen_reasons(gpu.under_load)  # in any share of the samples: never "none seen" then
        if not reasons:
            parts.append("no throttle reason seen by NVML")
        seen = rules.load_evidence(gpu.under_load, reasons)
        if seen:
            parts.append(seen)
        explained = clocks.explanation(suspect, gpu, context.clock_costs)
        if explained:
            parts.append(explained)
    if not suspect.confirmed:
        parts.append(suspect.note or "not re-tested")
    elif suspect.note:  # how several re-test runs confirmed it (gpudiag.analysis.noisy)
        parts.append(suspect.note)
    return "; ".join(parts)


# ------------------------------------------------------------------------------------ GPU pairs



def rule_findings(telemetry: Mapping[str, Mapping[str, rules.GpuTelemetry]], thresholds: Thresholds,
                  quiet: Mapping[str, Set[str]] | None = None) -> list[Finding]:
    """The telemetry rules' findings of every GPU but those ``quiet`` names (host -> GPU UUIDs
    whose readings can make none: gpudiag.analysis.quiet, decided as each host was read)."""
    findings = []
    quiet = quiet or {}
    for host in sorted(telemetry):
        settled = quiet.get(host, frozenset())
        for gpu in telemetry[host].values():
            if gpu.gpu_uuid in settled:
                continue
            for rule in rules.telemetry_findings(gpu, thresholds.throttle_share_pct):
                verb, detail = actions.action(rule.cause, rule.severity, rule.nvml_index)
                findings.append(Finding(kind=rule.kind, severity=rule.severity, host=host, gpu=rule.nvml_index,
                                        gpu_uuid=rule.gpu_uuid, pci_bus_id=gpu.pci_bus_id, evidence=rule.evidence,
                                        action=verb, action_detail=detail, basis=Basis.TELEMETRY))
    return findings


def merge(findings: Sequence[Finding]) -> list[Finding]:
    """One finding per host, GPU and kind: the speed one (it has figures) or the more severe."""
    chosen: dict[tuple[str, int | None, int | None, Kind], Finding] = {}
    for f in sorted(findings, key=finding_order):
        key = (f.host, f.gpu, f.peer_gpu, f.kind)
        current = chosen.get(key)
        if current is None:
            chosen[key] = f
        elif _measured(current) != _measured(f):
            # a speed finding and a telemetry one of the same GPU: the figures and both evidences
            speed, rule = (current, f) if _measured(current) else (f, current)
            severity = Severity.FAIL if Severity.FAIL in (f.severity, current.severity) else Severity.WARN
            verb, detail = (rule.action, rule.action_detail) if rule.severity == severity else \
                (speed.action, speed.action_detail)
            chosen[key] = dataclasses.replace(speed, severity=severity, action=verb, action_detail=detail,
                                              evidence=_join_evidence(speed.evidence, rule.evidence))
        elif not _measured(f):  # two telemetry findings (a narrow link that also replays): the worse, both evidences
            chosen[key] = dataclasses.replace(current, evidence=_join_evidence(current.evidence, f.evidence))
        elif f.metric != current.metric:
            chosen[key] = dataclasses.replace(current, evidence=f"{current.evidence}; also {f.metric} "
                                                                f"{deficit_text(f.deficit_pct)}")
    return list(chosen.values())


def _measured(finding: Finding) -> bool:
    """A speed finding (a measured figure against a reference), not a telemetry one (which may
    carry a counter as its figure)."""
    return finding.metric is not None and finding.basis != Basis.TELEMETRY


def _join_evidence(*texts: str) -> str:
    """Evidence parts in order, each once (a rule may restate what the speed finding saw)."""
    parts: list[str] = []
    for text in texts:
        parts += [part for part in text.split("; ") if part and part not in parts]
    return "; ".join(parts)



def unkeyed(unkeyed: Mapping[str, int]) -> list[Finding]:
    """Hosts whose results could not be keyed: without facts they would pool every model and driver."""
    return [coverage.unchecked_finding(host, f"no host facts (GPU model, driver): {unkeyed[host]} results not "
                                             "compared", Basis.FACTS) for host in sorted(unkeyed)]


def unmeasured_retest(suspect: Suspect, why: str | None = None) -> Finding:
    """A suspect its re-test could not measure (or, ``why``, that was not re-tested): it was
    neither confirmed nor cleared."""
    m = suspect.measurement
    why = why or f"its re-test could not measure it ({suspect.note})"
    evidence = f"{m.probe}.{m.metric} was {suspect.deficit_pct:.1f} % low and {why}: neither confirmed nor cleared"
    who = suspect.identity if suspect.identity is not None else GpuIdentity(m.gpu, m.gpu_uuid)
    note = who.renumbered_note()
    return coverage.unchecked_finding(m.host, evidence + (f"; {note}" if note else ""), Basis.ERROR_RECORD,
                                      gpu=who.nvml_index, gpu_uuid=who.gpu_uuid or m.gpu_uuid,
                                      pci_bus_id=who.pci_bus_id, metric=f"{m.probe}.{m.metric}")


def not_retested(suspects: Iterable[Suspect], why: str = "--no-retest") -> list[Finding]:
    """Each suspect that was not re-tested (``why``: the option or the budget) as an unchecked finding."""
    return [unmeasured_retest(suspect, f"it was not re-tested ({why})") for suspect in suspects]


def hosts_by_metric(found: Iterable[Measurement]) -> dict[tuple[str, str], list[str]]:
    hosts: dict[tuple[str, str], list[str]] = defaultdict(list)
    for m in found:
        hosts[(m.probe, m.metric)].append(m.host)
    return hosts


def _pair_finding(pair: Pair, context: Context) -> Finding:
    a, b = pair.ends
    # one figure of the pair low and its others fine: a warning (gpudiag.analysis.pairs)
    severity = _severity(pair.worst, context.thresholds) if pair.corroborated else Severity.WARN
    evidence = (f"{context.gpu_name(pair.host, a)}<->{context.gpu_name(pair.host, b)} slow while both GPUs are "
                "fine with their other partners; "
                + _speed_evidence(pair.worst, context))
    if not pair.corroborated:
        evidence += "; the pair's other direction and both-ways figures are not low: one figure alone, a warning"
    finding = _speed_finding(Kind.SLOW_LINK, Cause.SLOW_LINK, severity, pair.worst, evidence, context)
    first, second = context.identity(pair.host, a), context.identity(pair.host, b)
    verb, detail = actions.action(Cause.SLOW_LINK, severity, first.nvml_index, second.nvml_index)
    if a != pair.worst.measurement.device:  # the finding names end ``a``: its UUID and bus id, not the other's
        finding = dataclasses.replace(finding, gpu_uuid=first.gpu_uuid, pci_bus_id=first.pci_bus_id)
    return dataclasses.replace(finding, gpu=first.nvml_index, peer=pair.host, peer_gpu=second.nvml_index,
                               action=verb, action_detail=detail)


# ------------------------------------------------------------------------------------ the rest

