import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from probes import runner
from probes.context import Deadline, ProbeContext
from probes.records import measured

REPO = Path(__file__).resolve().parents[3]


def _records(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_probes_run_in_their_fixed_order_whatever_order_they_are_named_in():
    assert [spec.name for spec in runner.selected(["membw", "facts", "gemm"])] == ["facts", "gemm", "membw"]
    assert [spec.name for spec in runner.selected([])] == list(runner.DEFAULT_PROBE_NAMES)
    assert "xid" in runner.PROBE_NAMES and "xid" not in runner.DEFAULT_PROBE_NAMES  # the kernel log only when named


def test_an_unknown_probe_name_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        runner.parse_arguments(["gemm", "nvlinks"])
    assert exit_.value.code == 2
    assert "unknown probe 'nvlinks'" in capsys.readouterr().err


def test_probes_after_the_overall_deadline_are_skipped_not_passed():
    stream = io.StringIO()
    ctx = ProbeContext(deadline=Deadline.after(-1))
    runner.run_probes(runner.selected(["gemm", "membw"]), ctx, runner.RecordWriter(stream))
    records = _records(stream)
    assert [(r["probe"], r["status"]) for r in records] == [("gemm", "skipped"), ("membw", "skipped")]
    assert all("deadline" in r["reason"] for r in records)


def test_a_crashing_probe_becomes_an_error_record_and_the_next_probe_still_runs():
    def crashes(ctx):
        yield measured("first", "cpu", "x", "u", [1.0])
        raise ZeroDivisionError("division by zero")

    def works(ctx):
        yield measured("second", "cpu", "y", "u", [2.0])

    specs = [runner.ProbeSpec("first", crashes, "x", 1, 0), runner.ProbeSpec("second", works, "y", 1, 0)]
    stream = io.StringIO()
    runner.run_probes(specs, ProbeContext(), runner.RecordWriter(stream))
    records = _records(stream)
    assert [(r["probe"], r["status"]) for r in records] == [("first", "ok"), ("first", "error"), ("second", "ok")]
    assert "ZeroDivisionError" in records[1]["reason"]


def test_the_watchdog_ends_a_stuck_probe_with_an_error_record_and_status_124():
    script = textwrap.dedent("""
        import sys, time
        from probes import runner
        from probes.context import Deadline
        writer = runner.RecordWriter(sys.stdout)
        writer.current_probe = next(spec for spec in runner.PROBES if spec.name == "gemm")
        runner.DEADLINE_GRACE_S = 0.1
        runner.start_watchdog(Deadline.after(0.2), writer)
        time.sleep(30)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=20)
    assert done.returncode == 124
    (record,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert record["probe"] == "gemm" and record["status"] == "error"
    assert "deadline passed while this probe was running" in record["reason"]


def test_a_missing_device_is_one_skipped_record_with_the_reason():
    from probes.devices import DeviceUnavailable

    def needs_two_gpus(ctx):
        raise DeviceUnavailable("needs at least 2 GPUs; this machine has 1 visible to torch")
        yield  # a generator, like every probe

    stream = io.StringIO()
    runner.run_probes([runner.ProbeSpec("p2p", needs_two_gpus, "bandwidth", 1, 0)], ProbeContext(),
                      runner.RecordWriter(stream))
    (record,) = _records(stream)
    assert record["status"] == "skipped" and record["reason"].startswith("needs at least 2 GPUs")
