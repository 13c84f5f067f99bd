"""Decoding the xid probe's records (probes/xid.py): each Xid in plain words with what to do,
on the GPU it happened to, and each GPU's pending recovery action.

The catalog (gpudiag/data/xid_catalog.json) is data: for each Xid code its name, what it means in
plain words, a severity (``fail``: act on it, ``warn``: watch it), an action verb a hook can branch
on (drain, reset_gpu, reboot, inspect, watch) and the plain action (reseat, RMA, check cooling,
ignore ...). It is written from NVIDIA's documentation, in our own words:

- Xid errors and the Xid catalog (Ampere and later: immediate and investigatory resolution
  buckets such as RESET_GPU, RESTART_BM for Xid 79, WORKFLOW_XID_48):
  https://docs.nvidia.com/deploy/xid-errors/index.html and
  https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
- GPU memory error management (row remapping, Xid 63/64, contained and uncontained errors
  Xid 94/95, the RMA criterion of a failed remap, the recovery-action flag):
  https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html and its page
  error-recovery-and-response-flags.html
- the recovery actions (nvmlDeviceGpuRecoveryAction_t: 0 none .. 7 system reboot) as NVML and
  nvidia-ml-py define them (NVML_GPU_RECOVERY_ACTION_*).

A code the catalog lacks is decoded as unknown, with its count and the driver's message, never
dropped. Xid 154 (recovery action changed) takes its severity and action from the action its
message names (``... to 0x2 (Node Reboot Required)``). A GPU is named by the index, UUID and
NVML bus id of the telemetry identity record with the same PCI bus id (the driver prints
``0000:18:00``, NVML ``00000000:18:00.0``); where none matches, by the bus id alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ..errors import InstallationError
from ..findings import Action, Basis, Finding, Kind, Severity
from ..records import HostRecords, ProbeResult, device_index
from .actions import SERVICE_VERBS

PROBE = "xid"
LOG_METRIC = "kernel_log"
EVENT_METRIC = "xid"
RECOVERY_METRIC = "recovery_action"
RECOVERY_CHANGED = 154
NOT_APPLICABLE = "n/a: "
_NEW_ACTION = re.compile(r"\bto (0x[0-9A-Fa-f]+|\d+)\b")
_BUS = re.compile(r"^(?:PCI:)?([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.[0-7])?$")
BusKey = tuple[int, int, int]


@dataclass(frozen=True)
class Advice:
    """What a code or recovery action means and what to do: ``severity`` fail or warn (None: nothing
    to do), ``action`` one of the Action verbs, ``plain`` the action in a few words (reseat, RMA,
    check cooling, ignore ...), ``detail`` the steps."""

    name: str
    meaning: str
    severity: Severity | None
    action: Action | None
    plain: str
    detail: str


@dataclass(frozen=True)
class XidCatalog:
    """Xid code -> Advice, and NVML recovery action -> Advice."""

    codes: Mapping[int, Advice]
    recovery_actions: Mapping[int, Advice]

    def recovery(self, code: int) -> Advice:
        """The advice for recovery action ``code``; an unknown one says so and asks to inspect."""
        known = self.recovery_actions.get(code)
        if known is not None:
            return known
        return Advice(f"UNKNOWN_{code}", f"a recovery action ({code}) this gpudiag does not know", Severity.FAIL,
                      Action.INSPECT, "look the action up",
                      f"look recovery action {code} up in NVIDIA's NVML documentation")


def load_catalog() -> XidCatalog:
    """The packaged catalog. Raises InstallationError when it is unusable."""
    try:
        data = json.loads(resources.files("gpudiag").joinpath("data/xid_catalog.json").read_text(encoding="utf-8"))
        return XidCatalog(codes=_advice_table(data["codes"]), recovery_actions=_advice_table(data["recovery_actions"]))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InstallationError(f"gpudiag/data/xid_catalog.json is unusable ({type(error).__name__}: {error}); "
                                "reinstall gpudiag") from error


def _advice_table(entries: Mapping[str, Any]) -> dict[int, Advice]:
    table = {}
    for code, entry in entries.items():
        severity, verb = entry["severity"], entry["action"]
        if severity not in (*Severity, None) or verb not in (*Action, None):
            raise ValueError(f"entry {code}: severity {severity!r} or action {verb!r} is not allowed")
        table[int(code)] = Advice(str(entry["name"]), str(entry["meaning"]),
                                  None if severity is None else Severity(severity),
                                  None if verb is None else Action(verb), str(entry["plain"]), str(entry["detail"]))
    return table


# ------------------------------------------------------------------------------ GPU identity


@dataclass(frozen=True)
class GpuName:
    """A GPU as triage names it: NVML ``index`` and ``gpu_uuid`` (None where no telemetry identity
    has its bus id), and its PCI bus id."""

    index: int | None
    gpu_uuid: str | None
    pci_bus_id: str

    def describe(self) -> str:
        """``GPU 3 (PCI 0000:5d:00, GPU-...)`` or ``the GPU at PCI 0000:5d:00`` when unknown."""
        if self.index is None:
            return f"the GPU at PCI {self.pci_bus_id} (no GPU with this bus id answered NVML)"
        uuid = f", {self.gpu_uuid}" if self.gpu_uuid else ""
        return f"GPU {self.index} (PCI {self.pci_bus_id}{uuid})"


def bus_key(text: object) -> BusKey | None:
    """(domain, bus, device) of a PCI bus id in any of its spellings (``PCI:0000:18:00``,
    ``00000000:18:00.0``, ``0000:18:00.0``), or None when ``text`` is none of them."""
    match = _BUS.match(str(text).strip())
    if match is None:
        return None
    domain, bus, device = (int(part, 16) for part in match.groups())
    return domain, bus, device


def gpus_by_bus(records: Iterable[ProbeResult]) -> dict[BusKey, GpuName]:
    """The GPUs the telemetry identity records name, by PCI bus id."""
    found: dict[BusKey, GpuName] = {}
    for record in records:
        if record.probe != "telemetry" or record.metric != "identity" or record.status != "ok":
            continue
        details = record.details
        key = bus_key(details.get("pci_bus_id"))
        if key is not None:
            index = details.get("nvml_index", device_index(record.device))
            found[key] = GpuName(index, record.gpu_uuid, str(details["pci_bus_id"]))
    return found


# --------------------------------------------------------------------------------- decoding


@dataclass(frozen=True)
class XidEvent:
    """One Xid code on one GPU: ``count`` times between ``first_seen`` and ``last_seen`` (the
    log's words), the driver's ``messages``, and the ``advice`` (for Xid 154, the advice of the
    recovery action it names). ``known`` is False for a code the catalog lacks."""

    code: int
    count: int
    gpu: GpuName
    first_seen: str | None
    last_seen: str | None
    messages: tuple[str, ...]
    last_line: str | None
    advice: Advice
    known: bool


@dataclass(frozen=True)
class PendingRecovery:
    """A GPU whose NVML recovery action is not NONE."""

    gpu: GpuName
    code: int
    advice: Advice


@dataclass(frozen=True)
class RecoveryGap:
    """A GPU (None: every GPU) whose recovery action could not be read, and why."""

    gpu: int | None
    reason: str

    @property
    def not_applicable(self) -> bool:
        """True when the driver or NVML bindings simply have no such reading (too old)."""
        return self.reason.startswith(NOT_APPLICABLE)

    def describe(self) -> str:
        where = "the GPUs" if self.gpu is None else f"GPU {self.gpu}"
        return f"the recovery action of {where}: {self.reason}"


@dataclass(frozen=True)
class XidReport:
    """What the xid probe's records say. ``log_read``: whether the kernel log was read (None: the
    probe did not run); ``log_reason``: why not; ``log_source``/``log_scope``: from where and what it
    covers; ``unparsed``: lines naming an Xid in a shape the probe could not read; ``events`` the
    Xids; ``pending`` the GPUs with a recovery action pending, ``recovery_checked`` how many GPUs
    were asked, ``recovery_gaps`` why the others (or all) could not be, ``recovered`` the NVML
    indices of the GPUs that answered NONE."""

    log_read: bool | None
    log_reason: str | None
    log_source: str | None
    log_scope: str | None
    lines_scanned: int
    unparsed: tuple[str, ...]
    events: tuple[XidEvent, ...]
    pending: tuple[PendingRecovery, ...]
    recovery_checked: int
    recovery_gaps: tuple[RecoveryGap, ...]
    recovered: frozenset[int] = frozenset()


def decode(records: Iterable[ProbeResult], catalog: XidCatalog | None = None) -> XidReport:
    """The XidReport of one host's records (every probe's: telemetry names the GPUs)."""
    catalog = catalog or load_catalog()
    records = list(records)
    gpus = gpus_by_bus(records)
    mine = [record for record in records if record.probe == PROBE]
    log = next((r for r in mine if r.metric == LOG_METRIC), None)
    details = log.details if log is not None else {}
    events = tuple(_event(record, gpus, catalog) for record in mine
                   if record.metric == EVENT_METRIC and record.status == "ok")
    recovery = [r for r in mine if r.metric == RECOVERY_METRIC]
    pending, recovered, gaps = _recovery(recovery, gpus, catalog)
    return XidReport(log_read=None if log is None else log.status == "ok",
                     log_reason=None if log is None else log.reason,
                     log_source=details.get("source"), log_scope=details.get("scope"),
                     lines_scanned=int(details.get("lines_scanned") or 0),
                     unparsed=tuple(str(line) for line in details.get("unparsed_xid_lines") or ()),
                     events=tuple(sorted(events, key=_event_order)), pending=pending,
                     recovery_checked=len(pending) + len(recovered), recovery_gaps=gaps,
                     recovered=frozenset(index for index in recovered if index is not None))


def _event(record: ProbeResult, gpus: Mapping[BusKey, GpuName], catalog: XidCatalog) -> XidEvent:
    details = record.details
    code = int(details["code"])
    bus = str(details.get("pci_bus_id") or record.device.removeprefix("pci:"))
    key = bus_key(bus)
    gpu = gpus.get(key) if key is not None else None
    advice = catalog.codes.get(code)
    known = advice is not None
    if advice is None:
        advice = Advice(f"unknown Xid {code}", f"Xid {code} is not in gpudiag's catalog; look it up in NVIDIA's Xid "
                        "catalog (docs.nvidia.com/deploy/xid-errors)", Severity.WARN, Action.INSPECT, "look it up",
                        f"look Xid {code} up in NVIDIA's Xid catalog and act on what it says")
    elif code == RECOVERY_CHANGED:
        advice = _recovery_named(str(details.get("last_message") or ""), advice, catalog)
    messages = tuple(str(message) for message in details.get("messages") or ())
    return XidEvent(code=code, count=int(record.value or 0),
                    gpu=gpu or GpuName(None, None, bus), first_seen=details.get("first_seen"),
                    last_seen=details.get("last_seen"), messages=messages, last_line=details.get("last_line"),
                    advice=advice, known=known)


def _recovery_named(message: str, base: Advice, catalog: XidCatalog) -> Advice:
    """Xid 154's advice: the recovery action its message names (``... to 0x2 (...)``)."""
    match = _NEW_ACTION.search(message)
    if match is None:
        return base
    action = catalog.recovery(int(match.group(1), 0))
    return Advice(f"{base.name}: {action.name}", f"{base.meaning}; it now needs: {action.meaning}",
                  action.severity, action.action, action.plain, action.detail)


def _event_order(event: XidEvent) -> tuple[Any, ...]:
    severity = {Severity.FAIL: 0, Severity.WARN: 1}.get(event.advice.severity or "", 2)
    verbs = tuple(Action)
    verb = verbs.index(event.advice.action) if event.advice.action in verbs else len(verbs)
    return severity, verb, event.gpu.index is None, event.gpu.index or 0, event.code


def _recovery(records: Iterable[ProbeResult], gpus: Mapping[BusKey, GpuName],
              catalog: XidCatalog) -> tuple[tuple[PendingRecovery, ...], list[int | None], tuple[RecoveryGap, ...]]:
    """The GPUs with a recovery action pending, the indices of those that answered NONE, and the
    gaps (GPUs whose action could not be read)."""
    pending: list[PendingRecovery] = []
    recovered: list[int | None] = []
    gaps: list[RecoveryGap] = []
    names = {gpu.index: gpu for gpu in gpus.values()}
    for record in records:
        index = device_index(record.device)
        if record.status != "ok":
            gaps.append(RecoveryGap(index, record.reason or "no reason given"))
            continue
        code = int(record.value or 0)
        if code == 0:
            recovered.append(index)
            continue
        details = record.details
        gpu = names.get(index) or GpuName(index, record.gpu_uuid, str(details.get("pci_bus_id")))
        pending.append(PendingRecovery(gpu, code, catalog.recovery(code)))
    return tuple(pending), recovered, tuple(gaps)


# ------------------------------------------------------------------------------ sweep findings



def xid_findings(hosts: Iterable[HostRecords], catalog: XidCatalog | None = None) -> list[Finding]:
    """The findings of the xid probe's records of a sweep's hosts (a host that did not run the
    probe gives none).

    - A GPU whose NVML recovery action is pending (not NONE): one finding with the action's
      severity and verb (a node reboot, a GPU reset, a drain) — the driver's own word, now, that
      the GPU cannot be used as it is. The Xids logged on it are its evidence.
    - Xids logged on a GPU with no recovery action pending: a ``warn``, never a drain. The log
      keeps a week of boots, so a drain on it would keep a node out for days after a reset or a
      reboot fixed it. Where NVML answered NONE for that GPU, it was recovered since: ``watch``.
      Where it could not say (a driver before 550, or no GPU answers at that bus id now):
      ``inspect``, with the catalog's action. The state an Xid leaves behind is judged by its own
      current reading: a GPU gone from the bus is ``missing_gpu``, pending or failed row remaps
      and uncorrectable errors ``ecc``, an NVLink down ``nvlink_down``.
    - Codes the catalog says only to watch, or gives no severity (application errors such as
      Xid 13, 31 and 43, which a busy training fleet logs every day), give no finding; triage
      still lists them.

    An unreadable kernel log is not a pass: the probe's ``skipped`` record is a gap like any
    other (gpudiag.analysis.coverage)."""
    catalog = catalog or load_catalog()
    findings = []
    for host in hosts:
        if host.status != "ok":
            continue
        records = host.results
        if not any(r.probe == PROBE for r in records):
            continue
        findings += _host_xid_findings(host.host, decode(records, catalog))
    return findings


def _host_xid_findings(host: str, report: XidReport) -> list[Finding]:
    findings = []
    pending_at = {item.gpu.index for item in report.pending}
    for item in report.pending:
        logged = [event for event in report.events if event.gpu.index == item.gpu.index]
        evidence = (f"NVML reports recovery action {item.code} ({item.advice.name}) pending on {item.gpu.describe()}: "
                    f"{item.advice.meaning}")
        if logged:
            evidence += f"; logged: {_events_text(logged)}"
        findings.append(_finding(host, item.gpu, item.advice, f"{PROBE}.{RECOVERY_METRIC}", evidence,
                                 sum(event.count for event in logged) or None))
    by_gpu: dict[tuple[int | None, str], list[XidEvent]] = {}
    for event in report.events:
        if event.gpu.index not in pending_at and event.advice.severity is not None \
                and event.advice.action != Action.WATCH:
            by_gpu.setdefault((event.gpu.index, event.gpu.pci_bus_id), []).append(event)
    for events in by_gpu.values():
        worst, gpu = events[0], events[0].gpu  # most severe first (decode's order)
        text = _events_text(events)
        where = report.log_scope or "the kernel log"
        if gpu.index is not None and gpu.index in report.recovered:
            verb, state = Action.WATCH, "NVML reports no recovery action pending now: the GPU was recovered since"
        else:
            verb, state = Action.INSPECT, "NVML could not say whether it needs recovery now"
        advice = Advice(worst.advice.name, worst.advice.meaning, Severity.WARN, verb, worst.advice.plain,
                        f"{state}; if the code comes back: {worst.advice.detail}")
        evidence = f"{text} in {where} on {gpu.describe()}: {worst.advice.meaning}; {state}"
        findings.append(_finding(host, gpu, advice, f"{PROBE}.{EVENT_METRIC}", evidence,
                                 sum(event.count for event in events)))
    return findings


def _events_text(events: Iterable[XidEvent]) -> str:
    """``Xid 79 (GPU_HAS_FALLEN_OFF_THE_BUS) 1 time, last seen ...; Xid 94 (...) 3 times``."""
    parts = []
    for event in events:
        times = f"{event.count} time{'s' if event.count != 1 else ''}"
        last = f", last seen {event.last_seen}" if event.last_seen else ""
        parts.append(f"Xid {event.code} ({event.advice.name}) {times}{last}")
    return "; ".join(parts)


def _finding(host: str, gpu: GpuName, advice: Advice, metric: str, evidence: str, count: int | None) -> Finding:
    severity = advice.severity or Severity.WARN
    verb = advice.action or Action.INSPECT
    if severity == Severity.WARN and verb in SERVICE_VERBS:
        verb = Action.WATCH  # a warning never takes a node out of service
    return Finding(kind=Kind.XID, severity=severity, host=host, gpu=gpu.index, gpu_uuid=gpu.gpu_uuid,
                   pci_bus_id=gpu.pci_bus_id, metric=metric, value=None if count is None else float(count),
                   unit=None if count is None else "count", basis=Basis.TELEMETRY, confirmed=False,
                   evidence=evidence, action=verb, action_detail=f"{advice.plain}: {advice.detail}")
