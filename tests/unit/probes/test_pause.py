"""``python -m probes --pause``: what a paused job left on each GPU (probes/pauseroom.py), the plan
drawn from it, and the children that measure each GPU (probes/pause.py).

NVML is the test double of tests/fakepynvml.py (a paused job's memory, compute modes and
processes); the children are real processes: ``python -m probes`` on this CPU, or a small script
standing in for it where a child must hang, crash or say what it was given.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from fakepynvml import FakeGpu, FakePynvml

from probes import pause, runner
from probes.context import Deadline, ProbeContext
from probes.nvml import open_nvml
from probes.pause import Child, ChildTiming, plan_pause, run_paused
from probes.pauseroom import CONTEXT_RESERVE_MIB, GpuRoom, child_cap_mib, read_rooms, refusal, smallest_need_mib
from probes.records import ERROR, OK, SKIPPED, Record

TOTAL_MIB = 81559
UUIDS = ("GPU-11111111-0000-0000-0000-000000000000", "GPU-22222222-0000-0000-0000-000000000000",
         "GPU-33333333-0000-0000-0000-000000000000")
FAST = ChildTiming(margin_s=0.0, kill_after_s=1.0, min_share_s=0.5)


def fake_gpu(index: int, used_mib: int = 0, mode: int = 0, processes: int = 0) -> FakeGpu:
    """GPU ``index`` with a paused job holding ``used_mib`` of it (and ``processes`` contexts)."""
    return FakeGpu(uuid=UUIDS[index], serial=f"165502200547{index}", bus_id=f"00000000:{0x53 + index:02X}:00.0",
                   sm_clock_mhz=[345], reasons=[0x1], temperature_c=[36], power_mw=[71970],
                   memory_temperature_c=44, replays=0, memory_used_mib=used_mib, compute_mode=mode,
                   processes=processes)


def room(free_mib: int | None = 40000, mode: str = "default", processes: int | None = 1, label: str = "cuda:0",
         unread: str | None = None) -> GpuRoom:
    return GpuRoom(0, UUIDS[0], label, free_mib, TOTAL_MIB, mode, processes, unread)


def rooms_of(fake: FakePynvml, cuda_visible: str | None = None) -> list[GpuRoom]:
    with open_nvml(fake) as nvml:
        return read_rooms(nvml, cuda_visible)


class Lines:
    """A writer that keeps each record as the JSON object it would print."""

    def __init__(self) -> None:
        self.records: list[dict] = []

    def write(self, record: Record) -> None:
        self.records.append(record.to_dict())

    def write_line(self, line: str) -> None:
        self.records.append(json.loads(line))


# ------------------------------------------------------------------------------ reading the room


def test_rooms_say_free_memory_mode_and_processes_in_cuda_order():
    fake = FakePynvml([fake_gpu(0, used_mib=70000, processes=1), fake_gpu(1, used_mib=81000, mode=3, processes=1)])
    rooms = rooms_of(fake, cuda_visible=f"{UUIDS[1][:12]},0")
    assert [(r.nvml_index, r.label, r.free_mib, r.total_mib, r.compute_mode, r.processes) for r in rooms] == [
        (1, "cuda:0", TOTAL_MIB - 81000, TOTAL_MIB, "exclusive_process", 1),
        (0, "cuda:1", TOTAL_MIB - 70000, TOTAL_MIB, "default", 1)]
    assert fake.open_sessions == 0


def test_a_lost_gpu_is_left_out_and_an_unreadable_one_says_why():
    lost = fake_gpu(1)
    lost.lost = True
    unreadable = fake_gpu(2)
    unreadable.unsupported = frozenset({"nvmlDeviceGetComputeMode"})
    rooms = rooms_of(FakePynvml([fake_gpu(0), lost, unreadable]))
    assert [r.nvml_index for r in rooms] == [0, 2]
    assert rooms[1].unread == "NVML_ERROR_NOT_SUPPORTED" and rooms[1].free_mib is None


# ------------------------------------------------------------------------------ refusals and the plan


def test_a_probe_runs_where_its_smallest_size_a_context_and_headroom_fit():
    assert refusal(room(free_mib=40000), "gemm", "bf16") is None
    assert child_cap_mib(room(free_mib=40000), None) == 40000 - CONTEXT_RESERVE_MIB - (40000 - 640) * 5 // 100
    assert child_cap_mib(room(free_mib=40000), 2048) == 2048  # never above the user's own cap


def test_too_little_memory_is_refused_with_the_figures():
    reason = refusal(room(free_mib=600), "membw", "bf16")
    need = smallest_need_mib("membw", "bf16")
    assert reason == (f"pause: 600 MiB free of {TOTAL_MIB} MiB (the paused job holds the rest); membw needs "
                      f"{need + CONTEXT_RESERVE_MIB + 256} MiB ({need} MiB for its smallest size, "
                      f"{CONTEXT_RESERVE_MIB} MiB for a CUDA context, 256 MiB headroom): not measured, "
                      "the job's memory left untouched")


@pytest.mark.parametrize(("mode", "processes", "says"), [
    ("exclusive_process", 1, "compute mode exclusive_process with 1 compute process on this GPU"),
    ("exclusive_thread", None, "an unknown number of processes"),
    ("prohibited", 0, "compute mode prohibited"),
])
def test_a_compute_mode_that_forbids_our_context_refuses_every_probe(mode, processes, says):
    for probe in pause.PER_GPU_PROBES:
        reason = refusal(room(mode=mode, processes=processes), probe, "bf16")
        assert reason is not None and says in reason and "not measured" in reason


def test_exclusive_mode_with_no_process_on_the_gpu_is_free_to_use():
    assert refusal(room(mode="exclusive_process", processes=0), "gemm", "bf16") is None


def test_an_unread_gpu_is_never_probed():
    reason = refusal(room(free_mib=None, unread="NVML_ERROR_UNKNOWN"), "smclock", "bf16")
    assert reason is not None and "NVML_ERROR_UNKNOWN" in reason


def test_plan_skips_what_does_not_fit_and_runs_the_rest_in_one_child_per_gpu():
    # 1100 MiB free: gemm's 2048 square, pcie's and smclock's buffers fit; membw's 2 x 128 MiB does not.
    tight, roomy, busy = (room(free_mib=1100), room(free_mib=30000, label="cuda:1"),
                          room(mode="exclusive_process", processes=1, label="cuda:2"))
    steps = plan_pause([tight, roomy, busy], ["gemm", "membw", "pcie", "smclock"], "bf16", None)
    skipped = [(s.probe, s.device) for s in steps if isinstance(s, Record)]
    assert skipped == [("membw", "cuda:0"), *((name, "cuda:2") for name in pause.PER_GPU_PROBES)]
    assert all(s.status == SKIPPED and s.details["pause"]["free_mib"] == s_room.free_mib
               for s, s_room in zip([s for s in steps if isinstance(s, Record)], [tight] + [busy] * 4, strict=True))
    children = [s for s in steps if isinstance(s, Child)]
    assert [(c.names, c.rooms, c.cap_mib) for c in children] == [
        (("gemm", "pcie", "smclock"), (tight,), child_cap_mib(tight, None)),
        (pause.PER_GPU_PROBES, (roomy,), child_cap_mib(roomy, None))]


def test_p2p_runs_over_the_gpus_with_room_and_skips_the_others():
    rooms = [room(free_mib=30000), room(free_mib=500, label="cuda:1"), room(free_mib=9000, label="cuda:2")]
    steps = plan_pause(rooms, ["p2p"], "bf16", None)
    assert [(s.probe, s.device, s.status) for s in steps if isinstance(s, Record)] == [("p2p", "cuda:1", SKIPPED)]
    assert "its pairs are not measured" in steps[0].reason
    (child,) = [s for s in steps if isinstance(s, Child)]
    assert child.rooms == (rooms[0], rooms[2]) and child.cap_mib == child_cap_mib(rooms[2], None)


def test_a_child_record_is_renamed_to_this_runs_gpu_and_carries_the_pause_figures():
    child = Child(("p2p",), (room(label="cuda:3"), room(label="cuda:5")), 1000)
    data = child.relabel({"probe": "p2p", "device": "cuda:1", "params": {"src": "cuda:1", "dst": "cuda:0"},
                          "details": {"peer_access": True}})
    assert data["device"] == "cuda:5" and data["params"] == {"src": "cuda:5", "dst": "cuda:3"}
    assert data["details"] == {"peer_access": True, "pause": {"max_gpu_mem_mib": 1000, "gpus_visible": 2}}


# ------------------------------------------------------------------------------ run_paused, real children


def _context(deadline_s: float = 120.0, **options) -> ProbeContext:
    return ProbeContext(duration_s=0.05, dtype="fp32", deadline=Deadline.after(deadline_s), **options)


def _script(tmp_path: Path, body: str) -> list[str]:
    """A child command: ``python SCRIPT`` with ``body`` (it gets the probes' argv)."""
    path = tmp_path / "child.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


ECHO = """
    import json, os, sys
    names = [a for a in sys.argv[1:] if a in ("gemm", "membw", "pcie", "smclock", "p2p")]
    for name in names:
        print(json.dumps({"probe": name, "device": "cuda:0", "gpu_uuid": None, "metric": "m", "value": 1.0,
                          "status": "ok", "details": {"argv": sys.argv[1:],
                          "visible": os.environ["CUDA_VISIBLE_DEVICES"]}}))
"""


def test_each_gpu_child_sees_only_its_gpu_under_its_cap_and_comes_back_renamed(tmp_path):
    fake = FakePynvml([fake_gpu(0, used_mib=76000, processes=1), fake_gpu(1, used_mib=81200, processes=1),
                       fake_gpu(2, used_mib=60000, processes=1)])
    lines = Lines()
    run_paused(runner.selected(["gemm", "pcie"]), _context(), lines, runner.run_probes, nvml_module=fake,
               child_command=_script(tmp_path, ECHO), timing=FAST)
    by_device = {(r["probe"], r["device"]): r for r in lines.records}
    assert sorted(by_device) == [("gemm", "cuda:0"), ("gemm", "cuda:1"), ("gemm", "cuda:2"),
                                 ("pcie", "cuda:0"), ("pcie", "cuda:1"), ("pcie", "cuda:2")]
    assert {by_device[(p, "cuda:1")]["status"] for p in ("gemm", "pcie")} == {SKIPPED}  # 359 MiB free
    for index, used in ((0, 76000), (2, 60000)):
        record = by_device[("gemm", f"cuda:{index}")]
        figures = record["details"]["pause"]
        cap = child_cap_mib(room(free_mib=TOTAL_MIB - used), None)
        assert figures == {"max_gpu_mem_mib": cap, "gpus_visible": 1, "nvml_index": index,
                           "free_mib": TOTAL_MIB - used, "total_mib": TOTAL_MIB, "compute_mode": "default",
                           "compute_processes": 1}
        argv = record["details"]["argv"]
        assert argv[argv.index("--max-gpu-mem") + 1] == str(cap) and "--sequential" in argv
        assert record["details"]["visible"] == UUIDS[index]
    assert fake.open_sessions == 0


def test_the_gpus_children_run_at_once_then_p2p_and_one_at_a_time_with_sequential(tmp_path):
    rooms = [room(), room(label="cuda:1")]
    steps = plan_pause(rooms, ["gemm", "p2p"], "bf16", None)
    first, second, p2p = [s for s in steps if isinstance(s, Child)]
    assert pause.child_batches([first, second, p2p], sequential=False) == [[first, second], [p2p]]
    assert pause.child_batches([first, second, p2p], sequential=True) == [[first], [second], [p2p]]
    slow = _script(tmp_path, "import time\ntime.sleep(1.0)\n" + textwrap.dedent(ECHO))
    fake = FakePynvml([fake_gpu(0, used_mib=1000), fake_gpu(1, used_mib=1000)])
    for sequential, at_least_s, under_s in ((False, 1.0, 1.9), (True, 2.0, 10.0)):
        lines = Lines()
        started = time.monotonic()
        run_paused(runner.selected(["gemm"]), _context(sequential=sequential), lines, runner.run_probes,
                   nvml_module=fake, child_command=slow, timing=FAST)
        assert at_least_s <= time.monotonic() - started < under_s
        assert sorted(r["device"] for r in lines.records) == ["cuda:0", "cuda:1"]


def test_a_real_probes_child_runs_on_this_cpu_and_its_records_come_back(tmp_path):
    fake = FakePynvml([fake_gpu(0, used_mib=70000, processes=1)])
    out = io.StringIO()
    run_paused(runner.selected(["gemm"]), _context(), runner.RecordWriter(out), runner.run_probes,
               nvml_module=fake, child_command=[sys.executable, "-m", "probes"])
    (record,) = [json.loads(line) for line in out.getvalue().splitlines()]
    assert record["probe"] == "gemm" and record["status"] == OK  # torch has no GPU here: the CPU GEMM
    assert record["details"]["pause"]["max_gpu_mem_mib"] == child_cap_mib(room(free_mib=TOTAL_MIB - 70000), None)


def test_a_child_past_its_share_is_killed_and_its_probes_are_errors(tmp_path):
    fake = FakePynvml([fake_gpu(0, used_mib=1000)])
    lines = Lines()
    hang = _script(tmp_path, "import time\ntime.sleep(60)\n")
    run_paused(runner.selected(["gemm", "smclock"]), _context(deadline_s=2.0), lines, runner.run_probes,
               nvml_module=fake, child_command=hang, timing=FAST)
    assert [(r["probe"], r["device"], r["status"]) for r in lines.records] == [
        ("gemm", "cuda:0", ERROR), ("smclock", "cuda:0", ERROR)]
    assert "killed" in lines.records[0]["reason"] and "share of the deadline" in lines.records[0]["reason"]


def test_a_child_that_crashes_gives_error_records_and_its_lines_are_kept(tmp_path):
    fake = FakePynvml([fake_gpu(0, used_mib=1000)])
    lines = Lines()
    crash = _script(tmp_path, """
        import json
        print(json.dumps({"probe": "gemm", "device": "cuda:0", "status": "ok", "value": 1.0}), flush=True)
        raise SystemExit(3)
    """)
    run_paused(runner.selected(["gemm", "membw"]), _context(), lines, runner.run_probes, nvml_module=fake,
               child_command=crash, timing=FAST)
    assert [(r["probe"], r["status"]) for r in lines.records] == [("gemm", "ok"), ("membw", ERROR)]
    assert "exit status 3" in lines.records[1]["reason"]


def test_no_time_left_for_a_child_is_a_skipped_record_naming_the_deadline(tmp_path):
    lines = Lines()
    run_paused(runner.selected(["gemm"]), _context(deadline_s=10.0), lines, runner.run_probes,
               nvml_module=FakePynvml([fake_gpu(0)]), child_command=_script(tmp_path, ECHO))
    (record,) = lines.records
    assert record["status"] == SKIPPED and "deadline" in record["reason"]


def test_nvml_unavailable_where_the_bus_has_gpus_skips_every_gpu_probe(tmp_path):
    device = tmp_path / "bus" / "pci" / "devices" / "0000:53:00.0"
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x10de\n")
    (device / "class").write_text("0x030200\n")
    pynvml = pytest.importorskip("pynvml")
    lines = Lines()
    run_paused(runner.selected(["gemm", "p2p"]), _context(), lines, runner.run_probes,
               nvml_module=FakePynvml([], init_error=pynvml.NVMLError_DriverNotLoaded),
               child_command=_script(tmp_path, ECHO), sysfs_root=str(tmp_path))
    assert [(r["probe"], r["device"], r["status"]) for r in lines.records] == [
        ("gemm", "host", SKIPPED), ("p2p", "host", SKIPPED)]
    assert "read through NVML before any CUDA context" in lines.records[0]["reason"]


def test_the_bundle_takes_pause_on_its_command_line():
    done = subprocess.run([sys.executable, "-m", "probes", "--pause", "gemm", "--duration", "0.05", "--dtype", "fp32",
                           "--deadline", "60"], capture_output=True, text=True, timeout=120, check=False,
                          cwd=Path(runner.__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    (record,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert record["probe"] == "gemm" and record["status"] in (OK, SKIPPED)
