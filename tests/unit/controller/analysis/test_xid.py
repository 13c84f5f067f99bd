"""Xid decoding on real kernel-log lines (tests/data/kernel-log/, sources in its README): the node
side finds and counts the Xid lines (probes/kernellog.py, probes/xid.py), the controller decodes
them with the catalog and names the GPU by the telemetry identity's PCI bus id
(gpudiag/analysis/xid.py). Unknown codes are said as unknown, never dropped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpudiag.analysis.xid import bus_key, decode, gpus_by_bus, load_catalog
from gpudiag.findings import Action, Severity
from gpudiag.records import ProbeResult
from probes.kernellog import KernelLog, find_xids, parse_xid_line
from probes.xid import log_records

LOGS = Path(__file__).resolve().parents[3] / "data" / "kernel-log"
CATALOG = load_catalog()
FAIL, WARN = Severity.FAIL, Severity.WARN


def _lines(name: str) -> list[str]:
    return (LOGS / name).read_text(encoding="utf-8").splitlines()


def _records(name: str, source: str = "dmesg") -> list[dict[str, Any]]:
    """The xid probe's records for a captured log, as the controller reads them (dicts)."""
    log = KernelLog(source, source, "test capture", tuple(_lines(name)))
    return [record.to_dict() for record in log_records(log)]


def _typed(records: list[dict[str, Any]]) -> list[ProbeResult]:
    """Record dicts (a document's, as JSON gives them back) as the analysis reads them."""
    return [ProbeResult.from_dict(record) for record in records]


def _decode(records: list[dict[str, Any]], catalog=CATALOG):
    return decode(_typed(records), catalog)


def _identity(index: int, bus: str, uuid: str) -> dict[str, Any]:
    """A telemetry identity record as probes/telemetry.py prints it (NVML's bus id spelling)."""
    return {"probe": "telemetry", "device": f"gpu:{index}", "gpu_uuid": uuid, "metric": "identity", "value": 1,
            "unit": None, "status": "ok", "reason": None, "params": {},
            "details": {"name": "NVIDIA H100 80GB HBM3", "gpu_uuid": uuid, "pci_bus_id": bus, "nvml_index": index}}


# ------------------------------------------------------------------------------ parsing lines


def test_every_xid_of_the_gsp_timeout_capture_and_nothing_else():
    scan = find_xids(_lines("dmesg-ctime-xid119-gsp-timeout-h100.log"))
    assert [(x.code, x.pci_bus_id) for x in scan.xids] == [(119, "0000:9b:00")] * 5
    assert scan.unparsed == ()  # "GPU at PCI:...", "Rate limiting ..." and the stack are no Xid
    first = scan.xids[0]
    assert first.when == "Sun Feb 23 16:24:18 2025"
    assert first.message.startswith("pid=2024380, name=nvidia-smi, Timeout after 6s of waiting for RPC response")
    assert scan.xids[-1].when == "Sun Feb 23 16:30:13 2025"


@pytest.mark.parametrize(("name", "expected"), [
    ("dmesg-ctime-xid13-xid109.log", [(13, "0000:cb:00")] * 3 + [(109, "0000:cb:00")]),
    ("dmesg-T-xid48-xid63-dbe.log", [(48, "0000:8a:00"), (63, "0000:8a:00")]),
    ("dmesg-T-xid43-31-94-three-gpus.log",
     [(43, "0000:00:05"), (43, "0000:00:05"), (31, "0000:00:07"), (94, "0000:00:08")]),
    ("dmesg-xid120-gsp-exception.log", [(120, "0000:06:00")]),
    ("journal-xid79-fallen-off-the-bus.log", [(79, "0000:2b:00")]),
    ("journal-old-driver-xid-without-pci.log", [(3, "0000:01:00")]),
    ("nvidia-source-xid94-95-formats.log", [(94, "0000:01:00"), (94, "0000:01:00"), (95, "0000:01:00")]),
])
def test_codes_and_bus_ids_in_every_captured_format(name, expected):
    scan = find_xids(_lines(name))
    assert [(x.code, x.pci_bus_id) for x in scan.xids] == expected
    assert scan.unparsed == ()


def test_times_the_log_tools_print_before_the_driver_text():
    syslog = parse_xid_line("Dec  2 10:43:35 worker4 kernel: [240314.528856] NVRM: Xid (PCI:0000:07:00): 48, pid=1")
    uptime = find_xids(_lines("dmesg-xid120-gsp-exception.log")).xids[0]
    journal = find_xids(_lines("journal-xid79-fallen-off-the-bus.log")).xids[0]
    iso = parse_xid_line("2024-08-30T11:43:09+0000 gpu-17 kernel: NVRM: Xid (PCI:0000:cb:00): 13, pid=1, x")
    bare = find_xids(_lines("nvidia-source-xid94-95-formats.log")).xids[0]
    assert syslog is not None and syslog.when == "Dec  2 10:43:35"
    assert uptime.when == "605633.376794"
    assert journal.when == "May 18 19:02:39"
    assert iso is not None and iso.when == "2024-08-30T11:43:09+0000"
    assert bare.when is None


def test_the_mig_gpu_instance_is_kept():
    with_instance, without, _ = find_xids(_lines("nvidia-source-xid94-95-formats.log")).xids
    assert with_instance.gpu_instance == "05" and without.gpu_instance is None
    assert with_instance.message == "pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No"


def test_a_line_naming_an_xid_in_an_unknown_shape_is_kept_not_dropped():
    odd = "2024-01-15T10:32:15+0000 hostname kernel: NVRM: Xid (79): GPU has fallen off the bus on nvidia1"
    scan = find_xids(["normal line", odd])
    assert scan.xids == () and scan.unparsed == (odd,)
    records = [r.to_dict() for r in log_records(KernelLog("dmesg", "dmesg", "test", ("normal line", odd)))]
    assert records[0]["metric"] == "kernel_log" and records[0]["value"] == 1  # counted as an Xid line
    report = _decode(records, CATALOG)
    assert report.unparsed == (odd,) and report.events == ()


# ----------------------------------------------------------------------- counting and decoding


def test_the_gsp_timeouts_are_one_record_counted_five_times():
    records = _records("dmesg-ctime-xid119-gsp-timeout-h100.log")
    summary, event = records
    assert summary["value"] == 5 and summary["details"]["lines_scanned"] == 43
    assert event["device"] == "pci:0000:9b:00" and event["value"] == 5 and event["unit"] == "count"
    details = event["details"]
    assert (details["first_seen"], details["last_seen"]) == ("Sun Feb 23 16:24:18 2025", "Sun Feb 23 16:30:13 2025")
    assert len(details["messages"]) == 3  # the first distinct ones, not all five
    assert "GSP_RM_CONTROL) (0x20803032 0x58c)" in details["last_message"]


def test_gsp_timeout_decoded_on_the_gpu_with_that_bus_id():
    records = [_identity(3, "00000000:4E:00.0", "GPU-aaaa"), _identity(4, "00000000:9B:00.0", "GPU-509665ad"),
               *_records("dmesg-ctime-xid119-gsp-timeout-h100.log")]
    report = _decode(records, CATALOG)
    (event,) = report.events
    assert (event.code, event.count, event.known) == (119, 5, True)
    assert (event.gpu.index, event.gpu.gpu_uuid) == (4, "GPU-509665ad")
    assert event.advice.severity == FAIL and event.advice.action == "reset_gpu"
    assert "GSP" in event.advice.name


def test_four_gpus_by_bus_id_each_mapped_to_its_index():
    buses = {"97": 4, "ba": 5, "dc": 6, "ed": 7}
    identities = [_identity(index, f"00000000:{bus.upper()}:00.0", f"GPU-{index}") for bus, index in buses.items()]
    report = _decode([*identities, *_records("journal-xid45-after-nvlink-4-gpus.log", "journalctl")], CATALOG)
    counts = {event.gpu.index: event.count for event in report.events}
    assert counts == {6: 2, 7: 2, 5: 2, 4: 1}
    assert all(event.code == 45 and event.advice.action == "watch" for event in report.events)
    assert "previous Xid 149" in next(e for e in report.events if e.gpu.index == 6).messages[0]


def test_a_bus_id_no_gpu_answered_for_is_named_by_the_bus_alone():
    report = _decode(_records("journal-xid79-fallen-off-the-bus.log"), CATALOG)
    (event,) = report.events
    assert event.gpu.index is None and event.gpu.pci_bus_id == "0000:2b:00"
    assert "0000:2b:00" in event.gpu.describe()
    assert event.advice.action == "reboot" and "reseat" in event.advice.plain and "RMA" in event.advice.plain


def test_several_gpus_and_codes_most_severe_first():
    identities = [_identity(0, "00000000:00:05.0", "GPU-efbd"), _identity(1, "00000000:00:07.0", "GPU-3b6e"),
                  _identity(2, "00000000:00:08.0", "GPU-c248")]
    report = _decode([*identities, *_records("dmesg-T-xid43-31-94-three-gpus.log")], CATALOG)
    # the contained ECC error (a reset to plan) first; then the application faults, by GPU
    assert [(e.code, e.gpu.index, e.count) for e in report.events] == [(94, 2, 1), (43, 0, 2), (31, 1, 1)]
    contained = report.events[0]
    assert contained.advice.severity == WARN and contained.advice.action == "reset_gpu"


def test_double_bit_ecc_then_page_retirement():
    report = _decode(_records("dmesg-T-xid48-xid63-dbe.log"), CATALOG)
    assert [(e.code, e.advice.severity, e.advice.action) for e in report.events] == [
        (48, FAIL, "reset_gpu"), (63, WARN, "reset_gpu")]
    assert "RMA" in report.events[0].advice.plain


def test_an_unknown_code_is_said_as_unknown_with_its_count_and_message():
    report = _decode(_records("journal-old-driver-xid-without-pci.log"), CATALOG)
    (event,) = report.events
    assert event.code == 3 and not event.known and event.count == 1
    assert event.advice.name == "unknown Xid 3" and "not in gpudiag's catalog" in event.advice.meaning
    assert event.advice.severity == WARN and event.advice.action == "inspect"
    assert event.messages == ("C 00000005 SC 00000007 M 00001ffc Data ffffffff",)


@pytest.mark.parametrize(("message", "action", "name"), [
    ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", "reboot", "NODE_REBOOT"),
    ("GPU recovery action changed from 0x0 (None) to 0x1 (PF FLR)", "reset_gpu", "GPU_RESET"),
    ("GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", "drain", "DRAIN_AND_RESET"),
])
def test_xid_154_takes_the_action_its_message_names(message, action, name):
    line = f"NVRM: Xid (PCI:0000:01:00): 154, {message}"
    report = _decode([r.to_dict() for r in log_records(KernelLog("dmesg", "dmesg", "t", (line,)))], CATALOG)
    (event,) = report.events
    assert event.advice.action == action and event.advice.severity == FAIL and name in event.advice.name


def test_the_catalog_covers_the_codes_on_call_meets_with_verbs_a_hook_can_branch_on():
    expected = {48: (FAIL, "reset_gpu"), 63: (WARN, "reset_gpu"), 64: (FAIL, "drain"), 74: (FAIL, "reset_gpu"),
                79: (FAIL, "reboot"), 94: (WARN, "reset_gpu"), 95: (FAIL, "reset_gpu"), 119: (FAIL, "reset_gpu"),
                120: (FAIL, "reset_gpu"), 13: (WARN, "watch")}
    for code, (severity, action) in expected.items():
        advice = CATALOG.codes[code]
        assert (advice.severity, advice.action) == (severity, action), code
        assert advice.meaning and advice.plain and advice.detail
    assert "RMA" in CATALOG.codes[64].plain
    assert all(isinstance(advice.action, Action) for advice in CATALOG.codes.values())
    assert CATALOG.recovery(2).action == "reboot" and CATALOG.recovery(0).severity is None
    assert CATALOG.recovery(99).name == "UNKNOWN_99" and CATALOG.recovery(99).action == "inspect"


@pytest.mark.parametrize(("text", "key"), [
    ("PCI:0000:18:00", (0, 0x18, 0)), ("00000000:18:00.0", (0, 0x18, 0)), ("0000:9B:00.0", (0, 0x9B, 0)),
    ("0018:01:00", (0x18, 1, 0)), ("not a bus", None), (None, None),
])
def test_bus_ids_in_every_spelling(text, key):
    assert bus_key(text) == key


def test_gpus_by_bus_reads_only_ok_identity_records():
    lost = {**_identity(1, "00000000:2A:00.0", "GPU-b"), "status": "error", "reason": "NVML_ERROR_GPU_IS_LOST"}
    found = gpus_by_bus(_typed([_identity(0, "00000000:18:00.0", "GPU-a"), lost]))
    assert list(found) == [(0, 0x18, 0)] and found[(0, 0x18, 0)].index == 0


def test_recovery_actions_pending_and_unreadable():
    def action(index: int, value: int | None, status: str = "ok", reason: str | None = None) -> dict[str, Any]:
        return {"probe": "xid", "device": f"gpu:{index}", "gpu_uuid": f"GPU-{index}", "metric": "recovery_action",
                "value": value, "unit": None, "status": status, "reason": reason, "params": {},
                "details": {"pci_bus_id": f"00000000:{index + 0x18:02X}:00.0"} if value is not None else {}}

    records = [action(0, 0), action(1, 1), action(2, None, "skipped", "n/a: NVML_ERROR_NOT_SUPPORTED (old)"),
               action(3, None, "error", "NVML_ERROR_GPU_IS_LOST: GPU is lost")]
    report = _decode(records, CATALOG)
    assert report.recovery_checked == 2
    (pending,) = report.pending
    assert (pending.gpu.index, pending.code, pending.advice.action) == (1, 1, "reset_gpu")
    assert [(gap.gpu, gap.not_applicable) for gap in report.recovery_gaps] == [(2, True), (3, False)]
    assert report.log_read is None  # the probe's kernel_log record is not among them
