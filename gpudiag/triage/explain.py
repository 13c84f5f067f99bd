"""The triage's explanation: each finding in plain words with its evidence and the next action,
most severe first; what was checked; and, plainly, what could not be checked.

Explained findings come from four places:

- the kernel log's Xids, decoded with the catalog (gpudiag.analysis.xid);
- NVML's pending recovery action of each GPU;
- the sweep's own analysis of the host's results (throttling, slow GPUs, PCIe and NVLink, ECC,
  missing GPUs ...), each finding with the plain action an on-call engineer takes (check cooling,
  reseat, RMA ...) beside the fixed verb;
- the host's own history: a figure now ``deficit_warn`` or more below its median over the host's
  stored sweeps.

The exit code is the sweep's (gpudiag.exitcodes): 1 for a ``fail`` finding, else 3 when something
could not be checked (the host, a measurement, the kernel log), else 0; 130 when interrupted.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..analysis import measurements
from ..analysis.xid import PendingRecovery, XidCatalog, XidEvent, XidReport, decode, load_catalog
from ..exitcodes import ExitCode, decide_exit_code
from ..findings import Action, Basis, Finding, Kind, Severity
from ..records import ProbeResult
from ..schema.times import iso_time
from ..words import plural
from .run import TriageRun

SCHEMA = "gpudiag.triage/1"
XID_PROBE = "xid"
# The plain action an on-call engineer takes for each kind of the analysis's findings.
PLAIN_ACTIONS = {
    Kind.THROTTLED: "check cooling", Kind.DEGRADED_PCIE: "reseat the GPU or its riser",
    Kind.MISSING_GPU: "reboot; reseat, then RMA if it stays missing", Kind.ECC: "reset the GPU; RMA if it repeats",
    Kind.NVLINK_DOWN: "reset the GPU; reseat or replace the NVLink part", Kind.NVLINK_ERRORS: "inspect the NVLink",
    Kind.SLOW_GPU: "drain and run diagnostics; RMA if it repeats", Kind.SLOW_NODE: "inspect the host",
    Kind.SLOW_LINK: "inspect the NVLink path", Kind.FLEET_SHIFT: "compare with the baseline's sweeps",
    Kind.NIC_PORT: "check the NIC port's cable, transceiver and switch port",
    Kind.SLOW_NIC: "check the NIC's port, cable and transceiver",
}
# Figures below the host's history named in the evidence (the rest are counted).
HISTORY_SHOWN = 8
# Words a throttled finding's evidence uses when power, not heat, holds the clocks down.
POWER_WORDS = ("power brake", "power cap")


@dataclass(frozen=True)
class ExplainedFinding:
    """A finding explained for the engineer on call (one of the document's ``problems``):
    ``severity`` fail or warn, the ``action`` verb, the ``next_step`` in plain words and its
    ``detail``, a one-line ``title``, the ``evidence`` lines, the GPU index where it is about one,
    and its ``source`` (kernel log, NVML, analysis, history)."""

    severity: Severity
    action: Action
    next_step: str
    detail: str
    title: str
    evidence: tuple[str, ...]
    source: str
    gpu: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "action": self.action, "next_step": self.next_step,
                "detail": self.detail, "title": self.title, "evidence": list(self.evidence), "source": self.source,
                "gpu": self.gpu}


@dataclass(frozen=True)
class Triage:
    """The explanation of one triage run (see the module docstring); ``to_dict`` is the ``--json``
    document."""

    host: str
    status: str
    error: str | None
    explained: tuple[ExplainedFinding, ...]
    checked: tuple[str, ...]
    not_checked: tuple[str, ...]
    notes: tuple[str, ...]
    history: tuple[str, ...]
    exit_code: ExitCode
    run: TriageRun = field(repr=False)
    xid: XidReport = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        run = self.run
        return {"schema": SCHEMA, "host": self.host, "status": self.status, "error": self.error,
                "started_at": iso_time(run.started_at), "finished_at": iso_time(run.finished_at),
                "probes": list(run.probe.names), "duration_s": run.probe.duration_s, "baseline": run.baseline,
                "retested": run.retested, "interrupted": run.interrupted,
                "problems": [finding.to_dict() for finding in self.explained], "checked": list(self.checked),
                "not_checked": list(self.not_checked), "notes": list(self.notes), "history": list(self.history),
                "fabric": list(run.fabric),
                "xid": _xid_dict(self.xid), "findings": [finding.to_dict() for finding in run.analysis.findings],
                "facts": dict(run.outcome.facts), "exit_code": int(self.exit_code)}


def explain(run: TriageRun, catalog: XidCatalog | None = None) -> Triage:
    """The explanation of ``run``: its findings explained, most severe first, what was checked and what not."""
    catalog = catalog or load_catalog()
    records = run.outcome.results
    report = decode(records, catalog)
    findings = [f for f in run.analysis.findings if not (f.metric or "").startswith(f"{XID_PROBE}.")]
    explained = [*_xid_findings(report), *(_explained(f) for f in findings if f.kind != Kind.UNCHECKED),
                 *_history_findings(run)]
    gaps = _gaps(run, report, findings)
    explained.sort(key=_order)
    has_fail = any(finding.severity == Severity.FAIL for finding in explained)
    code = decide_exit_code(has_fail=has_fail, has_unchecked=bool(gaps), interrupted=run.interrupted)
    return Triage(host=run.host, status=run.outcome.status, error=run.outcome.error, explained=tuple(explained),
                  checked=tuple(_checked(run, report, records)), not_checked=tuple(gaps),
                  notes=(*run.notes, *_not_applicable(report)), history=tuple(_history_lines(run.history)),
                  exit_code=code, run=run, xid=report)


def _order(finding: ExplainedFinding) -> tuple[Any, ...]:
    severity = {Severity.FAIL: 0, Severity.WARN: 1}.get(finding.severity, 2)
    verbs = tuple(Action)
    verb = verbs.index(finding.action) if finding.action in verbs else len(verbs)
    return severity, verb, finding.gpu is None, finding.gpu or 0, finding.title


# --------------------------------------------------------------------------------- the sources


def _xid_findings(report: XidReport) -> list[ExplainedFinding]:
    """A finding per Xid event, and per GPU with a recovery action pending. A pending action on a GPU
    that also has Xids is evidence of its most severe Xid (the driver's verdict on that fault),
    not a finding of its own."""
    recovery = {pending.gpu.index: pending for pending in report.pending if pending.gpu.index is not None}
    explained = []
    for event in report.events:  # most severe first (gpudiag.analysis.xid)
        pending = recovery.pop(event.gpu.index, None) if event.gpu.index is not None else None
        explained.append(_xid_finding(event, report, pending))
    leftover = [pending for pending in report.pending if pending.gpu.index is None or pending.gpu.index in recovery]
    return explained + [_recovery_finding(pending) for pending in leftover]


def _xid_finding(event: XidEvent, report: XidReport, pending: PendingRecovery | None) -> ExplainedFinding:
    advice = event.advice
    times = "once" if event.count == 1 else f"{event.count} times"
    span = f", first {event.first_seen}, last {event.last_seen}" if event.first_seen else ""
    evidence = [f"Xid {event.code} logged {times} for {event.gpu.describe()} in the kernel log "
                f"({report.log_source}: {report.log_scope}){span}"]
    evidence += [f"the driver said: {message}" for message in event.messages]
    evidence.append(f"what it means: {advice.meaning}")
    if pending is not None:
        evidence.append(_recovery_evidence(pending))
    known = "" if event.known else " (not in gpudiag's Xid catalog)"
    return ExplainedFinding(severity=advice.severity or Severity.WARN, action=advice.action or Action.WATCH,
                            next_step=advice.plain if advice.severity else "ignore", detail=advice.detail,
                            title=f"Xid {event.code} on {event.gpu.describe()}: {advice.name}{known}",
                            evidence=tuple(evidence), source="kernel log", gpu=event.gpu.index)


def _recovery_finding(pending: PendingRecovery) -> ExplainedFinding:
    advice = pending.advice
    return ExplainedFinding(severity=advice.severity or Severity.WARN, action=advice.action or Action.INSPECT,
                            next_step=advice.plain, detail=advice.detail,
                            title=f"{pending.gpu.describe()} has a recovery action pending: {advice.name}",
                            evidence=(_recovery_evidence(pending),), source="NVML recovery action",
                            gpu=pending.gpu.index)


def _recovery_evidence(pending: PendingRecovery) -> str:
    return (f"NVML reports recovery action {pending.code} ({pending.advice.name}) pending for "
            f"GPU {pending.gpu.index}: {pending.advice.meaning}")


def _explained(finding: Finding) -> ExplainedFinding:
    evidence = [finding.evidence]
    if finding.value is not None and finding.reference is not None:
        unit = f" {finding.unit}" if finding.unit else ""
        deficit = f", {finding.deficit_pct:.1f} % below" if finding.deficit_pct is not None else ""
        confirmed = "confirmed by a re-test" if finding.confirmed else f"basis: {finding.basis}"
        evidence.append(f"{finding.metric}: {finding.value:g}{unit} against {finding.reference:g}{unit} "
                        f"({finding.reference_source or 'reference'}{deficit}; {confirmed})")
    ids = ", ".join(part for part in (f"PCI {finding.pci_bus_id}" if finding.pci_bus_id else None,
                                      finding.gpu_uuid) if part)
    where = finding.host if finding.gpu is None else f"GPU {finding.gpu}" + (f" ({ids})" if ids else "")
    peer = f" and {finding.peer}" if finding.peer else (
        f" with GPU {finding.peer_gpu}" if finding.peer_gpu is not None else "")
    return ExplainedFinding(severity=finding.severity, action=finding.action, next_step=_plain_action(finding),
                            detail=finding.action_detail, title=f"{finding.kind.replace('_', ' ')} on {where}{peer}",
                            evidence=tuple(evidence), source=f"analysis ({finding.basis})", gpu=finding.gpu)


def _plain_action(finding: Finding) -> str:
    if finding.kind == Kind.THROTTLED and any(word in finding.evidence.lower() for word in POWER_WORDS):
        return "check power delivery and the power limit"
    plain = PLAIN_ACTIONS.get(finding.kind)
    return plain if plain is not None else finding.action_detail.split(";")[0]


def _history_findings(run: TriageRun) -> list[ExplainedFinding]:
    """One finding naming each figure of a GPU (or of the host) now ``deficit_warn_pct`` or more
    below its median over the host's stored sweeps, the worst first (none when no figure is)."""
    past = _history_values(run.history)
    below = []
    for key, now in _current_values(run).items():
        values = past.get(key)
        before = statistics.median(values) if values else 0.0
        if before > 0 and (before - now) / before * 100 >= run.deficit_warn_pct:
            below.append(((before - now) / before * 100, key, now, before, len(values or ())))
    if not below:
        return []
    below.sort(key=lambda item: (-item[0], item[1]))
    evidence = [f"{_figure_words(key)}: {now:.4g} now, {before:.4g} over its last {count} stored "
                f"sweep{'s' if count != 1 else ''} ({deficit:.1f} % below)"
                for deficit, key, now, before, count in below[:HISTORY_SHOWN]]
    if len(below) > HISTORY_SHOWN:
        evidence.append(f"and {len(below) - HISTORY_SHOWN} more figures below their history")
    gpus = {key[2] for _, key, *_ in below}
    return [ExplainedFinding(severity=Severity.WARN, action=Action.INSPECT,
                             next_step="compare with its last good sweep",
                             detail="the host is slower than it used to be: compare driver, firmware, clocks and "
                                    "power settings with its last good sweep (gpudiag history), and look at the "
                                    "problems above for a cause",
                             title=f"{len(below)} figure{'s' if len(below) != 1 else ''} below this host's own history "
                                   f"(up to {below[0][0]:.1f} %)", evidence=tuple(evidence), source="history",
                             gpu=next(iter(gpus)) if len(gpus) == 1 else None)]


# (probe.metric, parameters as canonical JSON, GPU index or None)
FigureKey = tuple[str, str, int | None]


def _current_values(run: TriageRun) -> dict[FigureKey, float]:
    """Each GPU's figure, and under GPU None the median of the host's GPUs (what a store without
    per-GPU history keeps; a figure of no GPU is its own median)."""
    if not run.outcome.ok:
        return {}
    values: dict[FigureKey, float] = {}
    grouped: dict[tuple[str, str], list[float]] = defaultdict(list)
    for m in measurements([run.outcome]):
        metric, params = f"{m.probe}.{m.metric}", _params_text(m.params)
        grouped[(metric, params)].append(m.value)
        if m.gpu is not None:
            values[(metric, params, m.gpu)] = m.value
    for (metric, params), group in grouped.items():
        values[(metric, params, None)] = statistics.median(group)
    return values


def _history_values(history: Iterable[Mapping[str, Any]]) -> dict[FigureKey, list[float]]:
    """Each GPU's figures over the ok sweeps (``per_gpu``); a sweep stored without them gives the
    median of the host's GPUs, under GPU None."""
    found: dict[FigureKey, list[float]] = defaultdict(list)
    for sweep in history:
        if sweep.get("status") != "ok":
            continue
        for figure in sweep.get("figures") or ():
            metric, params = str(figure["metric"]), _params_text(figure.get("params") or {})
            if "per_gpu" not in figure:
                found[(metric, params, None)].append(float(figure["median"]))
            per_gpu = figure.get("per_gpu") or ()
            for gpu, value in per_gpu:
                if gpu is None and len(per_gpu) > 1:
                    continue  # a GPU whose NVML index was not known: not a series of its own
                found[(metric, params, gpu)].append(float(value))
    return found


def _figure_words(key: FigureKey) -> str:
    metric, params_text, gpu = key
    where = "" if gpu is None else f"GPU {gpu} "
    return f"{where}{metric}{_params_words(params_text)}"


def _params_text(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True)


def _params_words(params_text: str) -> str:
    params = json.loads(params_text)
    return f" ({', '.join(f'{k} {v}' for k, v in params.items())})" if params else ""


# ------------------------------------------------------------------------- checked and not


def _gaps(run: TriageRun, report: XidReport, findings: Sequence[Finding]) -> list[str]:
    """What could not be checked: each makes the exit code 3 when nothing failed."""
    gaps = []
    if run.interrupted:
        gaps.append("the triage was interrupted before it finished: what is here is partial")
    if not run.outcome.ok:
        gaps.append(f"the host itself: {run.outcome.status}: {run.outcome.error or 'no detail'}")
    gaps += [f.evidence for f in findings if f.kind == Kind.UNCHECKED and f.basis != Basis.HOST_STATUS]
    if report.log_read is None and run.outcome.ok:
        gaps.append("the kernel log: the xid probe printed nothing (no Xid history checked)")
    elif report.log_read is False:
        gaps.append(f"the kernel log (Xid history): {report.log_reason}")
    if report.unparsed:
        gaps.append(f"{len(report.unparsed)} kernel-log line(s) name an Xid in a shape gpudiag cannot read, "
                    f"the first: {report.unparsed[0]!r}")
    gaps += [gap.describe() for gap in report.recovery_gaps if not gap.not_applicable]
    return gaps


def _not_applicable(report: XidReport) -> list[str]:
    return [gap.describe() for gap in report.recovery_gaps if gap.not_applicable]


def _checked(run: TriageRun, report: XidReport, records: Sequence[ProbeResult]) -> list[str]:
    checked = []
    counts: dict[str, int] = defaultdict(int)
    for record in records:
        if record.status == "ok" and record.probe != XID_PROBE:
            counts[record.probe] += 1
    facts = run.outcome.facts
    if facts.get("gpu_model"):
        checked.append(f"{facts.get('gpu_count')} x {facts.get('gpu_model')}, driver {facts.get('driver')}")
    if counts:
        measured = ", ".join(f"{probe} ({count} readings)" for probe, count in sorted(counts.items()))
        checked.append(f"measured: {measured}; load probes ran {run.probe.duration_s:g} s each")
    analysis = run.analysis
    if analysis.results_compared:
        against = "the SKU figures" + (f" and baseline {run.baseline!r}" if run.baseline else "")
        checked.append(f"{analysis.results_compared} results compared with {against}"
                       + ("; suspects re-tested" if run.retested else ""))
    if report.log_read:
        checked.append(f"kernel log: {report.lines_scanned} lines from {report.log_source} ({report.log_scope}), "
                       f"{sum(event.count for event in report.events)} Xid lines")
    if report.recovery_checked:
        checked.append(f"NVML recovery action of {plural(report.recovery_checked, 'GPU')}")
    if run.history:
        checked.append(f"the host's history: {plural(len(run.history), 'stored sweep')}")
    return checked


def _history_lines(history: Iterable[Mapping[str, Any]]) -> list[str]:
    lines = []
    for sweep in history:
        error = f" ({sweep['error']})" if sweep.get("error") else ""
        lines.append(f"{sweep.get('started_at')} sweep {sweep.get('sweep_id')}: {sweep.get('status')}{error}")
    return lines


def _xid_dict(report: XidReport) -> dict[str, Any]:
    return {"log_read": report.log_read, "log_reason": report.log_reason, "source": report.log_source,
            "scope": report.log_scope, "lines_scanned": report.lines_scanned, "unparsed": list(report.unparsed),
            "events": [{"code": e.code, "count": e.count, "known": e.known, "name": e.advice.name,
                        "gpu": e.gpu.index, "gpu_uuid": e.gpu.gpu_uuid, "pci_bus_id": e.gpu.pci_bus_id,
                        "first_seen": e.first_seen, "last_seen": e.last_seen, "messages": list(e.messages),
                        "severity": e.advice.severity, "action": e.advice.action} for e in report.events],
            "pending_recovery": [{"gpu": p.gpu.index, "gpu_uuid": p.gpu.gpu_uuid, "code": p.code,
                                  "name": p.advice.name} for p in report.pending],
            "recovery_checked": report.recovery_checked,
            "recovery_gaps": [gap.describe() for gap in report.recovery_gaps]}
