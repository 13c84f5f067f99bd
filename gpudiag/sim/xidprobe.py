"""The simulated ``xid`` probe: the records probes/xid.py prints for a node in that state — the
kernel-log summary, one record per GPU bus id and Xid code, and each GPU's NVML recovery action.

The log is simulated as journalctl's (probes/kernellog.py reads the journal first). Times are
fixed words, not the clock: the same fleet file gives the same records.
"""

from __future__ import annotations

from typing import Any

from .printed import ProbeOutput, not_ok, record
from .state import Draw, NodeState, XidLog

PROBE = "xid"
SECONDS = 0.8
JOURNAL_COMMAND = "journalctl _TRANSPORT=kernel --since -7d -o short-iso --no-pager"
JOURNAL_SCOPE = "kernel messages of the last 7d, every boot the journal keeps"
# The driver's text after the code where a fleet file gives none (shapes of real lines: see
# tests/data/kernel-log/).
DEFAULT_MESSAGES = {
    48: "pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the "
        "framebuffer at partition 4, subpartition 1.",
    63: "pid='<unknown>', name=<unknown>, Row Remapper: New row marked for remapping, reset gpu to activate.",
    74: "pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 6(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, "
        "0x0)",
    79: "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    94: "pid='<unknown>', name=<unknown>, Contained: SM (0x1). RST: No, D-RST: No",
    119: "pid=2024380, name=python3, Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function "
         "76 (GSP_RM_CONTROL) (0x20802a02 0x8).",
}
RECOVERY_NAMES = {0: "NONE", 1: "GPU_RESET", 2: "NODE_REBOOT", 3: "DRAIN_P2P", 4: "DRAIN_AND_RESET",
                  5: "RECOVER_IMEX_DOMAIN", 6: "BUS_RESET", 7: "SYSTEM_REBOOT"}
GPU_LOST_REASON = "NVML_ERROR_GPU_IS_LOST: GPU is lost"


def xid(call: Any, node: NodeState, draw: Draw) -> ProbeOutput:
    """The xid probe's records for ``node`` (``call``: the bundle's options; none apply)."""
    records = _log_records(node, draw)
    records += _recovery_records(node)
    return ProbeOutput(tuple(records), SECONDS)


def _log_records(node: NodeState, draw: Draw) -> list[dict[str, Any]]:
    if node.kernel_log_unreadable is not None:
        reason = ("the kernel log could not be read: journalctl: No journal files were opened due to insufficient "
                  f"permissions.; dmesg --time-format iso: {node.kernel_log_unreadable}")
        return [not_ok("skipped", PROBE, "host", "kernel_log", reason)]
    lines_scanned = draw("xid:log").randint(1800, 4200)
    total = sum(log.count for log in node.xids)
    summary = record(PROBE, "host", "kernel_log", total, "count", samples=lines_scanned, details={
        "source": "journalctl", "command": JOURNAL_COMMAND, "scope": JOURNAL_SCOPE, "lines_scanned": lines_scanned,
        "unparsed_xid_lines": []})
    return [summary, *(_event(log, number) for number, log in enumerate(node.xids))]


def _event(log: XidLog, number: int) -> dict[str, Any]:
    bus = driver_bus_id(log.pci_bus_id)
    message = log.message or DEFAULT_MESSAGES.get(log.code, "pid='<unknown>', name=<unknown>, simulated")
    first = f"2025-06-0{1 + number % 9}T03:12:45+0000"
    last = f"2025-06-0{1 + number % 9}T03:{12 + min(log.count - 1, 47):02d}:45+0000"
    line = f"{last} node kernel: NVRM: Xid (PCI:{bus}): {log.code}, {message}"
    return record(PROBE, f"pci:{bus}", "xid", log.count, "count", samples=log.count, details={
        "code": log.code, "pci_bus_id": bus, "first_seen": first, "last_seen": last, "messages": [message],
        "last_message": message, "last_line": line, "source": "journalctl"})


def driver_bus_id(nvml_bus_id: str) -> str:
    """NVML's ``00000000:18:00.0`` as the driver prints it in an Xid line: ``0000:18:00``."""
    domain, bus, device_function = nvml_bus_id.lower().split(":")
    return f"{int(domain, 16):04x}:{bus}:{device_function.split('.')[0]}"


def _recovery_records(node: NodeState) -> list[dict[str, Any]]:
    records = []
    for gpu in node.gpus:
        device = f"gpu:{gpu.nvml_index}"
        if gpu.lost:
            records.append(not_ok("error", PROBE, device, "recovery_action", GPU_LOST_REASON))
            continue
        records.append(record(PROBE, device, "recovery_action", gpu.recovery_action, None, gpu_uuid=gpu.gpu_uuid,
                              samples=1, details={"name": RECOVERY_NAMES[gpu.recovery_action],
                                                  "pci_bus_id": gpu.pci_bus_id, "source": "nvml"}))
    return records
