"""The xid probe: the NVIDIA driver's Xid history from the kernel log, and each GPU's pending
recovery action from NVML.

Records (probe ``xid``):

- ``host`` / ``kernel_log``: value = how many Xid lines the log holds, ``details``: the ``source``
  (``journalctl`` or ``dmesg``), the ``command``, its ``scope`` in words, ``lines_scanned`` and
  ``unparsed_xid_lines`` (lines naming an Xid in a shape the parser does not know: kept, never
  dropped). A log that cannot be read is this record ``skipped`` with every source's reason:
  never a pass, never "no Xid".
- ``pci:<bus id>`` / ``xid``, one per GPU bus id and Xid code: value = how many times, unit
  ``count``, ``details``: ``code``, ``pci_bus_id`` (as the driver printed it: ``0000:18:00``),
  ``first_seen``/``last_seen`` (the log's own time words), the first ``messages`` (up to
  MESSAGES_KEPT distinct) and the ``last_message``, ``gpu_instances`` (MIG) where printed. The
  controller maps bus ids to GPU indices with the telemetry probe's identity records and
  decodes the codes (gpudiag/analysis/xid.py); this side does not judge them.
- ``gpu:<NVML index>`` / ``recovery_action``: the action the driver says the GPU needs before it
  can be used again (NVML field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, driver 550 and later): 0 none,
  1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset, ... with its NVML ``name`` in
  ``details``. A driver or pynvml without the field gives ``skipped`` with a reason starting
  ``n/a: ``; NVML that cannot start gives one ``skipped`` host record.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from .context import ProbeContext
from .kernellog import (
    CommandRunner,
    KernelLog,
    KernelLogUnreadable,
    XidLine,
    find_xids,
    read_kernel_log,
    run_command,
)
from .nvml import Nvml, NvmlUnavailable, open_nvml
from .records import Record, failed, skipped

PROBE = "xid"
METRIC = "kernel_log"
EVENT_METRIC = "xid"
RECOVERY_METRIC = "recovery_action"
COMMAND_TIMEOUT_S = 30.0
MESSAGES_KEPT = 3
UNPARSED_KEPT = 5
RECOVERY_FIELD = "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"
# nvmlDeviceGpuRecoveryAction_t, as pynvml names its NVML_GPU_RECOVERY_ACTION_* constants.
RECOVERY_NAMES = {0: "NONE", 1: "GPU_RESET", 2: "NODE_REBOOT", 3: "DRAIN_P2P", 4: "DRAIN_AND_RESET",
                  5: "RECOVER_IMEX_DOMAIN", 6: "BUS_RESET", 7: "SYSTEM_REBOOT"}
# Field errors that mean "this driver has no such field", not "something is wrong".
_FIELD_ABSENT = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT")


def run(ctx: ProbeContext, *, runner: CommandRunner = run_command,
        nvml_module: ModuleType | None = None) -> Iterator[Record]:
    """Yield the kernel-log record, one record per GPU bus id and Xid code, then each GPU's
    recovery action (see the module docstring). ``runner`` runs the log commands and
    ``nvml_module`` replaces pynvml (test doubles). Raises nothing for an unreadable log or a
    missing NVML: those are ``skipped`` records."""
    timeout_s = max(1.0, min(COMMAND_TIMEOUT_S, ctx.deadline.left_s()))
    try:
        log = read_kernel_log(timeout_s, runner)
    except KernelLogUnreadable as unreadable:
        yield skipped(PROBE, "host", METRIC, f"the kernel log could not be read: {unreadable}")
    else:
        yield from log_records(log)
    yield from recovery_records(nvml_module)


# ------------------------------------------------------------------------------- the kernel log


@dataclass
class _Tally:
    """The Xid lines of one GPU bus id and code, as they are counted."""

    first: XidLine
    last: XidLine
    count: int = 0
    messages: list[str] = field(default_factory=list)
    instances: set[str] = field(default_factory=set)

    def add(self, xid: XidLine) -> None:
        self.count += 1
        self.last = xid
        if xid.message not in self.messages and len(self.messages) < MESSAGES_KEPT:
            self.messages.append(xid.message)
        if xid.gpu_instance is not None:
            self.instances.add(xid.gpu_instance)


def log_records(log: KernelLog) -> list[Record]:
    """The ``kernel_log`` record of ``log``, then one ``xid`` record per GPU bus id and Xid code
    (in the order each first appears)."""
    scan = find_xids(log.lines)
    details: dict[str, Any] = {"source": log.source, "command": log.command, "scope": log.scope,
                               "lines_scanned": len(log.lines),
                               "unparsed_xid_lines": list(scan.unparsed[:UNPARSED_KEPT])}
    if len(scan.unparsed) > UNPARSED_KEPT:
        details["unparsed_xid_lines_total"] = len(scan.unparsed)
    summary = Record(probe=PROBE, device="host", metric=METRIC, value=len(scan.xids) + len(scan.unparsed),
                     unit="count", samples=len(log.lines), details=details)
    return [summary, *event_records(scan.xids, log.source)]


def event_records(xids: Iterable[XidLine], source: str) -> list[Record]:
    """One ``xid`` record per GPU bus id and Xid code of ``xids``, in first-seen order."""
    tallies: dict[tuple[str, int], _Tally] = {}
    for xid in xids:
        tally = tallies.setdefault((xid.pci_bus_id, xid.code), _Tally(first=xid, last=xid))
        tally.add(xid)
    return [_event_record(bus, code, tally, source) for (bus, code), tally in tallies.items()]


def _event_record(bus: str, code: int, tally: _Tally, source: str) -> Record:
    details: dict[str, Any] = {"code": code, "pci_bus_id": bus, "first_seen": tally.first.when,
                               "last_seen": tally.last.when, "messages": list(tally.messages),
                               "last_message": tally.last.message, "last_line": tally.last.line, "source": source}
    if tally.instances:
        details["gpu_instances"] = sorted(tally.instances)
    return Record(probe=PROBE, device=f"pci:{bus}", metric=EVENT_METRIC, value=tally.count, unit="count",
                  samples=tally.count, details=details)


# ------------------------------------------------------------------------- the recovery action


def recovery_records(nvml_module: ModuleType | None = None) -> Iterator[Record]:
    """Each GPU's pending recovery action through NVML (see the module docstring)."""
    with ExitStack() as stack:
        try:
            nvml = stack.enter_context(open_nvml(nvml_module))
        except NvmlUnavailable as error:
            yield skipped(PROBE, "host", RECOVERY_METRIC, f"the GPUs' recovery action needs NVML: {error}")
            return
        field_id = getattr(nvml.module, RECOVERY_FIELD, None)
        if field_id is None:
            yield skipped(PROBE, "host", RECOVERY_METRIC, f"n/a: these NVML bindings have no {RECOVERY_FIELD} "
                          "(nvidia-ml-py for driver 550 or later has it)")
            return
        try:
            count = nvml.device_count()
        except nvml.NVMLError as error:
            yield failed(PROBE, "host", RECOVERY_METRIC, f"NVML could not count the GPUs: {nvml.error_name(error)}")
            return
        for index in range(count):
            yield _recovery_record(nvml, index, int(field_id))


def _recovery_record(nvml: Nvml, index: int, field_id: int) -> Record:
    device = f"gpu:{index}"
    gpu_uuid: str | None = None
    try:
        handle = nvml.handle(None, index)
        gpu_uuid = nvml.uuid(handle)
        bus = nvml.pci_bus_id(handle)
        value = int(nvml.field_value(handle, field_id))
    except nvml.NVMLError as error:
        name = nvml.error_name(error)
        if name in _FIELD_ABSENT:
            return skipped(PROBE, device, RECOVERY_METRIC, f"n/a: {name} (the driver reports no recovery action; "
                           "drivers 550 and later do)", gpu_uuid=gpu_uuid)
        return failed(PROBE, device, RECOVERY_METRIC, f"{name}: {error}", gpu_uuid=gpu_uuid)
    return Record(probe=PROBE, device=device, metric=RECOVERY_METRIC, value=value, unit=None, gpu_uuid=gpu_uuid,
                  samples=1, details={"name": RECOVERY_NAMES.get(value, f"UNKNOWN_{value}"), "pci_bus_id": bus,
                                      "source": "nvml"})
