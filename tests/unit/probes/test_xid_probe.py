"""The xid node probe (probes/xid.py, probes/kernellog.py) against fake ``journalctl`` and ``dmesg``
programs on PATH: small shell scripts that print a captured kernel log (tests/data/kernel-log/) or
refuse as the real tools do without permission. The recovery action is read through a test double
of the third-party pynvml module, handed in through ``nvml_module``; nothing of ours is patched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from probes import xid
from probes.context import ProbeContext
from probes.kernellog import JOURNAL_ARGV, KernelLog, KernelLogUnreadable, read_kernel_log
from probes.records import OK, SKIPPED

pynvml = pytest.importorskip("pynvml")

REPOSITORY = Path(__file__).resolve().parents[3]
LOGS = REPOSITORY / "tests" / "data" / "kernel-log"
GSP_LOG = LOGS / "dmesg-ctime-xid119-gsp-timeout-h100.log"
JOURNAL_LOG = LOGS / "journal-xid45-after-nvlink-4-gpus.log"
# What journalctl (exit status 0) and dmesg (exit status 1) say to a user who may not read the log.
JOURNAL_REFUSAL = "No journal files were opened due to insufficient permissions."
DMESG_REFUSAL = "dmesg: read kernel buffer failed: Operation not permitted"


class FakeTools:
    """A folder of fake log programs, the only thing on PATH; each records its arguments."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir()

    def add(self, name: str, body: str) -> None:
        script = self.folder / name
        script.write_text(f'#!/bin/sh\necho "$@" >> "{self.folder}/{name}.argv"\n{body}\n')
        script.chmod(0o755)

    def printing(self, name: str, log: Path) -> None:
        self.add(name, f'/bin/cat "{log}"\nexit 0')

    def argv(self, name: str) -> list[str]:
        path = self.folder / f"{name}.argv"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture()
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeTools:
    fake = FakeTools(tmp_path / "bin")
    monkeypatch.setenv("PATH", str(fake.folder))
    return fake


def _no_nvml() -> SimpleNamespace:
    """A pynvml whose nvmlInit fails as on a node without the driver."""
    def init() -> None:
        raise pynvml.NVMLError_LibraryNotFound()
    return SimpleNamespace(NVMLError=pynvml.NVMLError, nvmlInit=init, nvmlShutdown=lambda: None,
                           **{name: getattr(pynvml, name) for name in dir(pynvml) if name.startswith("NVML_ERROR_")})


def _run(**kwargs: Any) -> list[Any]:
    return list(xid.run(ProbeContext(), nvml_module=kwargs.pop("nvml_module", _no_nvml()), **kwargs))


# ----------------------------------------------------------------------------- the kernel log


def test_the_journal_is_read_first_with_every_kept_boot(tools):
    tools.printing("journalctl", JOURNAL_LOG)
    tools.add("dmesg", "exit 99")  # must not be needed
    records = _run()
    summary = records[0]
    assert (summary.metric, summary.status, summary.value) == ("kernel_log", OK, 7)
    assert summary.details["source"] == "journalctl" and summary.details["lines_scanned"] == 7
    (argv,) = tools.argv("journalctl")
    assert argv.split() == list(JOURNAL_ARGV[1:])
    assert "_TRANSPORT=kernel" in argv and "--since" in argv and "--quiet" not in argv  # -q hides refusals
    assert tools.argv("dmesg") == []
    events = [r for r in records if r.metric == "xid"]
    assert {(r.device, r.value) for r in events} == {("pci:0000:dc:00", 2), ("pci:0000:ed:00", 2),
                                                     ("pci:0000:ba:00", 2), ("pci:0000:97:00", 1)}
    assert all(r.details["code"] == 45 for r in events)


def test_a_journal_the_user_may_not_read_falls_back_to_dmesg(tools):
    tools.add("journalctl", f'echo "{JOURNAL_REFUSAL}" >&2\nexit 0')
    tools.printing("dmesg", GSP_LOG)
    records = _run()
    assert records[0].details["source"] == "dmesg" and records[0].details["command"] == "dmesg --time-format iso"
    (event,) = [r for r in records if r.metric == "xid"]
    assert (event.device, event.value, event.details["code"]) == ("pci:0000:9b:00", 5, 119)
    assert "this boot only" in records[0].details["scope"]


def test_no_permission_anywhere_is_a_skip_with_every_reason_never_a_pass(tools):
    tools.add("journalctl", f'echo "{JOURNAL_REFUSAL}" >&2\nexit 0')
    tools.add("dmesg", f'echo "{DMESG_REFUSAL}" >&2\nexit 1')
    summary, *rest = _run()
    assert (summary.metric, summary.status, summary.value) == ("kernel_log", SKIPPED, None)
    assert JOURNAL_REFUSAL in summary.reason and DMESG_REFUSAL in summary.reason
    assert "dmesg_restrict" in summary.reason and "CAP_SYSLOG" in summary.reason
    assert not [r for r in rest if r.metric == "xid"]
    assert len(tools.argv("dmesg")) == 1  # plain dmesg would be refused the same way: not tried


def test_a_dmesg_without_iso_times_is_run_plain(tools):
    tools.add("dmesg", f'if [ "$1" = "--time-format" ]; then echo "dmesg: unrecognized option \'--time-format\'" >&2; '
                       f'echo "BusyBox v1.36.1 multi-call binary." >&2; exit 1; fi\n/bin/cat "{GSP_LOG}"')
    records = _run()  # no journalctl on PATH at all
    assert records[0].status == OK and records[0].details["command"] == "dmesg"
    assert tools.argv("dmesg") == ["--time-format iso", ""]


def test_no_log_tool_at_all_says_so():
    with pytest.raises(KernelLogUnreadable) as unreadable:
        read_kernel_log(5.0, run=_missing)
    assert str(unreadable.value) == "journalctl: not installed (not on PATH); dmesg: not installed (not on PATH)"


def _missing(argv: Any, timeout_s: float) -> Any:
    raise FileNotFoundError(argv[0])


def test_a_hung_log_tool_is_given_up_on(tools):
    tools.add("journalctl", "/bin/sleep 5")
    tools.add("dmesg", f'echo "{DMESG_REFUSAL}" >&2\nexit 1')
    with pytest.raises(KernelLogUnreadable, match=r"journalctl: no answer within 1 s"):
        read_kernel_log(1.0)


def test_the_bundle_runs_the_probe_only_when_named(tmp_path: Path):
    fake = FakeTools(tmp_path / "bin")
    fake.printing("journalctl", JOURNAL_LOG)
    done = subprocess.run([sys.executable, "-m", "probes", "xid", "--deadline", "60"], cwd=REPOSITORY,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PATH": str(fake.folder)})
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert {r["probe"] for r in records} == {"xid"}
    assert records[0]["metric"] == "kernel_log" and records[0]["value"] == 7
    assert sum(r["metric"] == "xid" for r in records) == 4
    recovery = [r for r in records if r["metric"] == "recovery_action"]
    assert len(recovery) == 1 and recovery[0]["status"] == SKIPPED  # no NVIDIA driver here: said, not passed


# ------------------------------------------------------------------------ the recovery action


class FakeNvml:
    """A pynvml test double for the recovery action: GPUs by index with a bus id and the value the
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION field answers (None: the field is not supported)."""

    def __init__(self, actions: list[int | None], with_field: bool = True) -> None:
        for name in dir(pynvml):
            if name.startswith(("NVML_", "NVMLError")) and (with_field or name != xid.RECOVERY_FIELD):
                setattr(self, name, getattr(pynvml, name))
        self.actions = actions

    def nvmlInit(self) -> None:
        return None

    def nvmlShutdown(self) -> None:
        return None

    def nvmlDeviceGetCount(self) -> int:
        return len(self.actions)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-0000000{handle}-aaaa-bbbb-cccc-dddddddddddd"

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(busId=f"00000000:{0x18 + handle:02X}:00.0".encode())

    def nvmlDeviceGetFieldValues(self, handle: int, fields: list[int]) -> list[SimpleNamespace]:
        assert fields == [pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION]
        action = self.actions[handle]
        if action is None:
            return [SimpleNamespace(nvmlReturn=pynvml.NVML_ERROR_NOT_SUPPORTED, valueType=0, value=None)]
        return [SimpleNamespace(nvmlReturn=pynvml.NVML_SUCCESS, valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
                                value=SimpleNamespace(uiVal=action))]


def test_each_gpus_pending_recovery_action():
    records = list(xid.recovery_records(FakeNvml([0, 2, None])))
    assert [(r.device, r.status, r.value) for r in records] == [("gpu:0", OK, 0), ("gpu:1", OK, 2),
                                                                 ("gpu:2", SKIPPED, None)]
    assert records[1].details == {"name": "NODE_REBOOT", "pci_bus_id": "00000000:19:00.0", "source": "nvml"}
    assert records[1].gpu_uuid.startswith("GPU-00000001")
    assert records[2].reason.startswith("n/a: NVML_ERROR_NOT_SUPPORTED")


def test_bindings_without_the_field_and_nvml_that_cannot_start_are_skips():
    (old,) = xid.recovery_records(FakeNvml([0], with_field=False))
    assert old.device == "host" and old.status == SKIPPED and old.reason.startswith("n/a: ")
    (absent,) = xid.recovery_records(_no_nvml())
    assert absent.status == SKIPPED and "NVML" in absent.reason and not absent.reason.startswith("n/a")


def test_the_simulated_node_prints_the_records_the_probe_prints(tmp_path: Path):
    """The simulator's xid records (gpudiag/sim/xidprobe.py) have the real probe's shape: the same
    metrics, device spellings and detail keys, so the triage reads both alike."""
    from gpudiag.hosts import HostSpec
    from gpudiag.records import parse_probe_output
    from gpudiag.sim import SimulatedConnector, load_fleet

    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": 1, "faults": [
        {"kind": "xid", "host": "node001", "gpu": 0, "code": 79, "count": 2, "recovery_action": 2}]}))
    ran = SimulatedConnector(load_fleet(fleet)).connect(HostSpec("node001")).run(
        [sys.executable, "-m", "probes", "xid"], 60.0)
    simulated = parse_probe_output(ran.stdout, "node001")
    line = "2025-06-01T03:12:45+0000 node001 kernel: NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus."
    real = [*xid.log_records(KernelLog("journalctl", "journalctl", "t", (line,))),
            *xid.recovery_records(FakeNvml([2]))]
    assert [(r.metric, r.device) for r in simulated][:3] == [(r.metric, r.device) for r in real]
    for sim_record, real_record in zip(simulated, real, strict=False):
        assert set(sim_record.details) == set(real_record.details), sim_record.metric
        assert (sim_record.unit, type(sim_record.value)) == (real_record.unit, type(real_record.value))
