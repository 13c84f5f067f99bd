"""``gpudiag preflight`` as a real Slurm prolog and health check, and its --drain/--undrain against the real
``scontrol`` (the cluster of slurm_cluster.py, its prolog the shipped examples/slurm/prolog.sh). The nodes are
a simulated fleet's named as the cluster's (n1..n5): on n2 a GPU is 30 % slow (``fail``), on n3 the probes hang
(``unchecked``, exit 3), on n5 a GPU is gone from the bus (its PCI bus and NVML count 7; Slurm gives n5 alone
8 GPUs, ``Gres=gpu:8``: some tests probe this machine, which has none); n1 and n4 are healthy. Each node's prolog
runs ``gpudiag preflight --simulate FLEET --hosts $SLURMD_NODENAME --drain``: a real prolog but for the GPU.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster, requires_slurm
from sshd_hosts import pid_is_running, running_after

from gpudiag.preflight.run import SCONTROL_FLOOR_S
from gpudiag.slurm.reason import mark_reason

pytestmark = requires_slurm

ROOT = Path(__file__).resolve().parents[2]
PROLOG = ROOT / "examples" / "slurm" / "prolog.sh"
HEALTHCHECK = ROOT / "examples" / "slurm" / "healthcheck.sh"
FLEET = {"nodes": 5, "name_format": "n{}", "faults": [
    {"kind": "slow_gpu", "host": "n2", "gpu": 3, "factor": 0.7},
    {"kind": "hang", "host": "n3"},
    {"kind": "gpu_missing", "host": "n5", "gpu": 6},
]}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SlurmCluster, Path]]:
    """A five-node cluster (n5 with 8 GPUs in Slurm) whose prolog is the shipped one, reading its settings
    from ``folder/prolog.conf``."""
    folder = tmp_path_factory.mktemp("preflight")
    folder.chmod(0o755)
    (folder / "fleet.json").write_text(json.dumps(FLEET))
    settings = (f'GPUDIAG="{sys.executable} -m gpudiag"\nGPUDIAG_HERE=""\nGPUDIAG_BUDGET=60\n'
                f'GPUDIAG_ARGS="--simulate {folder / "fleet.json"} --no-store"\n')
    (folder / "prolog.conf").write_text(settings + f"GPUDIAG_LOG={folder / 'prolog.log'}\n")
    (folder / "healthcheck.conf").write_text(settings + f"GPUDIAG_LOG={folder / 'healthcheck.log'}\n")
    # slurmd gives a prolog its own environment: this wrapper names the settings and runs the shipped script.
    wrapper = folder / "prolog"
    wrapper.write_text(f"#!/bin/sh\nGPUDIAG_PROLOG_CONFIG={folder / 'prolog.conf'} exec {PROLOG}\n")
    wrapper.chmod(0o755)
    cluster = SlurmCluster(5, prolog=str(wrapper), gpus={"n5": 8}).start()
    pids: set[int] = set()
    try:
        yield cluster, folder
    finally:
        pids = cluster.process_ids()
        cluster.stop()
    left = sorted(pid for pid in pids if pid_is_running(pid))
    assert not left, f"processes of the slurm test cluster still running after its stop: {left}"


@pytest.fixture
def cluster(setup: tuple[SlurmCluster, Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """The module's cluster, SLURM_CONF pointing at it; after the test every job cancelled and node resumed."""
    for name in [name for name in os.environ if name.startswith("SLURM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SLURM_CONF", str(setup[0].conf_path))
    yield setup[0]
    setup[0].reset()


@pytest.fixture
def folder(setup: tuple[SlurmCluster, Path]) -> Path:
    return setup[1]


def _job(cluster: SlurmCluster, folder: Path, nodes: str, count: int) -> tuple[str, Path]:
    """``sbatch`` a job on ``nodes`` that writes where each of its tasks ran; (job id, its output file)."""
    out = folder / f"job-{time.monotonic_ns()}.out"
    done = cluster.run(["sbatch", "--parsable", f"-N{count}", "-w", nodes, "-o", str(out),
                        "--wrap", "srun sh -c 'echo ran on $SLURMD_NODENAME'"])
    return done.stdout.strip().split(";")[0], out


def _wait_job(cluster: SlurmCluster, job: str, timeout_s: float = 60.0) -> dict[str, str]:
    """Wait until the job has ended or is pending held (requeued); its ``scontrol show job`` fields."""
    deadline = time.monotonic() + timeout_s
    fields: dict[str, str] = {}
    while time.monotonic() < deadline:
        shown = cluster.run(["scontrol", "show", "job", "-o", job], check=False).stdout
        fields = dict(word.split("=", 1) for word in shown.split() if "=" in word)
        state = fields.get("JobState")
        if state in ("COMPLETED", "FAILED", "CANCELLED") or (state == "PENDING" and _held(fields)):
            return fields
        time.sleep(0.2)
    raise AssertionError(f"job {job} neither ended nor was held in {timeout_s} s: {fields}")


# A job whose prolog failed is requeued, held: slurmctld first says so (launch_failed_requeued_held),
# and once its scheduler has looked at the held job again, JobHeldAdmin. Either is the hold; Restarts
# says it was requeued (a job held before it ever started would have none).
HELD_REASONS = ("launch_failed_requeued_held", "JobHeldAdmin")


def _held(fields: dict[str, str]) -> bool:
    return fields.get("Reason") in HELD_REASONS


def _requeued_held(fields: dict[str, str]) -> bool:
    return fields.get("JobState") == "PENDING" and _held(fields) and int(fields.get("Restarts", "0")) >= 1


def _log(folder: Path, name: str = "prolog.log") -> str:
    path = folder / name
    return path.read_text() if path.exists() else ""


def _preflight(cluster: SlurmCluster, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpudiag", "preflight", "--simulate", str(folder / "fleet.json"),
                           "--no-store", "-q", "--budget", "60", *args], env=cluster.env(), capture_output=True,
                          text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)


# --- the prolog through real jobs ------------------------------------------------------------------------------


def test_a_healthy_allocation_starts_and_the_job_runs(cluster: SlurmCluster, folder: Path):
    job, out = _job(cluster, folder, "n[1,4]", 2)
    fields = _wait_job(cluster, job)
    assert fields["JobState"] == "COMPLETED", (fields, _log(folder))
    assert sorted(out.read_text().split("\n")[:-1]) == ["ran on n1", "ran on n4"]
    assert cluster.node_states()["n1"] == cluster.node_states()["n4"] == ("idle", "")
    assert f"job {job} node n1: healthy (gpudiag exit 0)" in _log(folder)


def test_a_fail_finding_drains_the_node_with_its_reason_and_the_job_does_not_run_there(
        cluster: SlurmCluster, folder: Path):
    job, out = _job(cluster, folder, "n[1-2]", 2)
    fields = _wait_job(cluster, job)
    # Slurm requeues a job whose prolog failed on any node, held; the node was drained by gpudiag first, so
    # Slurm's own "Prolog error" does not replace its reason. The batch script may already have started on n1
    # (its prolog passed; n2's still ran): the requeue cancels it there. It never runs on n2.
    assert _requeued_held(fields), fields
    assert "ran on n2" not in (out.read_text() if out.exists() else "")
    state, reason = cluster.node_states()["n2"]
    assert state == "drained" and reason.startswith("gpudiag: gemm: slow_gpu GPU 3 gemm.tflops -"), (state, reason)
    assert cluster.node_states()["n1"][0] in ("idle", "idle*")  # the healthy node is not drained
    log = _log(folder)
    assert f"job {job} node n2: FAILED its pre-flight check (gpudiag exit 1): drained by gpudiag (gpudiag: gemm: " \
           "slow_gpu GPU 3" in log
    assert "gpudiag preflight: FAIL n2, exit 1, " in log and "drained: scontrol update NodeName=n2" in log


def test_a_gpu_gone_from_the_bus_drains_the_node_by_the_gpus_slurm_gives_it(cluster: SlurmCluster, folder: Path):
    # The prolog checks n5 alone with no store: nothing on the node counts the lost GPU, and no peer or
    # stored sweep does; Slurm's own Gres=gpu:8 does (the prolog runs in the job: $SLURM_JOB_ID).
    job, out = _job(cluster, folder, "n5", 1)
    fields = _wait_job(cluster, job)
    assert _requeued_held(fields), (fields, _log(folder))
    assert "ran on n5" not in (out.read_text() if out.exists() else "")
    state, reason = cluster.node_states()["n5"]
    assert state == "drained" and "missing_gpu: 7 GPUs usable" in reason, (state, reason)
    assert "gpudiag preflight: FAIL n5, exit 1, " in _log(folder)


def test_an_inconclusive_check_drains_nothing_and_the_job_runs(cluster: SlurmCluster, folder: Path):
    job, out = _job(cluster, folder, "n3", 1)
    fields = _wait_job(cluster, job)
    assert fields["JobState"] == "COMPLETED", (fields, _log(folder))
    assert out.read_text() == "ran on n3\n"
    assert cluster.node_states()["n3"] == ("idle", "")
    log = _log(folder)
    assert f"job {job} node n3: inconclusive (gpudiag exit 3): the job starts; nothing drained" in log
    assert "node probes not finished within the --budget 60 s" in log


@contextlib.contextmanager
def _prolog_settings(folder: Path, extra: str) -> Iterator[None]:
    """The prolog's settings with the shell lines ``extra`` after them, for one test."""
    path = folder / "prolog.conf"
    before = path.read_text()
    path.write_text(before + extra)
    try:
        yield
    finally:
        path.write_text(before)


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_a_python_that_exits_1_with_a_traceback_neither_drains_the_node_nor_holds_the_job(
        cluster: SlurmCluster, folder: Path):
    """A venv missing a module: Python exits 1, as gpudiag does for a fail, but prints no verdict of
    gpudiag's. The prolog must not hold the job (Slurm would drain the node as "Prolog error")."""
    broken = _script(folder / "broken-gpudiag", f"#!{sys.executable}\nimport gpudiag_module_that_is_not_installed\n")
    with _prolog_settings(folder, f'GPUDIAG="{broken}"\n'):
        job, out = _job(cluster, folder, "n1", 1)
        fields = _wait_job(cluster, job)
    assert fields["JobState"] == "COMPLETED", (fields, _log(folder))
    assert out.read_text() == "ran on n1\n"
    assert cluster.node_states()["n1"] == ("idle", "")
    log = _log(folder)
    assert "ModuleNotFoundError: No module named 'gpudiag_module_that_is_not_installed'" in log
    assert (f"job {job} node n1: inconclusive (gpudiag exit 1 without its FAIL summary line: Python or gpudiag "
            f"itself failed, see its output above): the job starts; nothing drained") in log


def test_a_fail_whose_drain_hangs_is_ended_within_the_budget_and_holds_no_job(cluster: SlurmCluster, folder: Path):
    """A hung scontrol (a wrapper that sleeps, given to gpudiag with --scontrol) is ended at the
    budget: gpudiag says FAIL but the node carries no gpudiag reason, so the prolog lets the job
    start rather than have Slurm hold it on a node it never drained."""
    pids = folder / "hung-pids"
    hung = _script(folder / "hung-scontrol", f"#!/bin/sh\necho $$ >> {pids}\nsleep 300 &\necho $! >> {pids}\nwait\n")
    started = time.monotonic()
    with _prolog_settings(folder, f'GPUDIAG_BUDGET=34\nGPUDIAG_ARGS="$GPUDIAG_ARGS --scontrol {hung}"\n'):
        job, out = _job(cluster, folder, "n2", 1)
        fields = _wait_job(cluster, job, timeout_s=120.0)
    assert fields["JobState"] == "COMPLETED", (fields, _log(folder))
    assert time.monotonic() - started < 34 + SCONTROL_FLOOR_S + 30  # the budget, not scontrol's minute on top
    assert out.read_text() == "ran on n2\n" and cluster.node_states()["n2"] == ("idle", "")
    log = _log(folder)
    assert "drain failed: scontrol" not in log  # the command is the wrapper's
    assert f"drain failed: {hung} update NodeName=n2 State=DRAIN" in log and "was ended" in log
    assert f"job {job} node n2: inconclusive: gpudiag found a FAIL but the node carries no gpudiag drain" in log
    assert "Slurm did not say how many GPUs each node is configured with" in log  # it hung at the start too
    started_pids = [int(pid) for pid in pids.read_text().split()]  # the node query as it began, then the drain
    assert len(started_pids) == 4 and running_after(started_pids) == []


def test_node_error_text_drains_with_a_safe_reason_and_a_one_line_summary(cluster: SlurmCluster, folder: Path):
    """NVML's text for a lost GPU carries $( ), backticks, a backslash and a newline: the node is
    drained (a missing GPU asks for a reboot) with a reason of safe characters, and the summary the
    prolog reads is one line."""
    marker = folder / "ran"
    hostile = f"GPU has fallen off the bus\n$(touch {marker}) `touch {marker}` \\ \"q\";|&"
    fleet = folder / "hostile-fleet.json"
    fleet.write_text(json.dumps({"nodes": 4, "name_format": "n{}", "faults": [
        {"kind": "probe_error", "host": "n1", "probe": "telemetry", "gpu": 2, "reason": hostile}]}))
    with _prolog_settings(folder, f'GPUDIAG_ARGS="--simulate {fleet} --no-store"\n'):
        job, out = _job(cluster, folder, "n1", 1)
        fields = _wait_job(cluster, job)
    assert _requeued_held(fields), fields
    state, reason = cluster.node_states()["n1"]
    assert state == "drained" and reason.startswith("gpudiag: facts,telemetry: missing_gpu GPU 2: NVML reports "
                                                    "gpu:2 lost: GPU has fallen off the bus touch "), reason
    assert re.fullmatch(r"[A-Za-z0-9 .,:=_+/%@-]+", reason), reason
    shown = cluster.run(["sh", "-c", 'eval "echo $(sinfo -h -N -n n1 -o %E)"']).stdout
    assert shown.strip() == reason and not marker.exists()
    summaries = [line for line in _log(folder).splitlines() if line.startswith("gpudiag preflight: FAIL n1, exit 1, ")]
    assert summaries and all(re.fullmatch(r"[A-Za-z0-9 .,:=_+/%@\[\]-]+", line) for line in summaries), summaries
    assert f"job {job} node n1: FAILED its pre-flight check (gpudiag exit 1): drained by gpudiag" in _log(folder)


def test_a_json_document_that_cannot_be_written_after_the_drain_still_holds_the_job(cluster: SlurmCluster,
                                                                                    folder: Path):
    """The drain happened, then the document could not be written (its folder went, as on a full
    disk): gpudiag exits 1 and its summary names the drain, so the prolog holds the job."""
    documents = folder / "documents"
    documents.mkdir()
    scontrol = _script(folder / "scontrol-then-rm",
                       f'#!/bin/sh\nif [ "$1" = update ]; then rm -rf {documents}; fi\nexec scontrol "$@"\n')
    with _prolog_settings(folder, f'GPUDIAG_ARGS="$GPUDIAG_ARGS --scontrol {scontrol} --json {documents}/n2.json"\n'):
        job, _ = _job(cluster, folder, "n2", 1)
        fields = _wait_job(cluster, job)
    assert _requeued_held(fields), fields
    assert cluster.node_states()["n2"][1].startswith("gpudiag: gemm: slow_gpu GPU 3")
    log = _log(folder)
    summary = next(line for line in log.splitlines() if line.startswith("gpudiag preflight: FAIL n2, exit 1, ")
                   and "Not written" in line)
    assert ". Drained n2. Not written: --json " in summary
    assert f"job {job} node n2: FAILED its pre-flight check (gpudiag exit 1): drained by gpudiag" in log
    assert not documents.exists()


# --- --undrain: NHC's rule against the real scontrol ------------------------------------------------------------


def test_a_node_whose_python_prints_nothing_is_inconclusive_and_stays_drained(cluster: SlurmCluster, folder: Path):
    """gpudiag preflight --here --python /bin/true: no record at all is no pass, and no resume."""
    reason = cluster.drain_as_gpudiag("n2", "gpudiag: gemm: slow_gpu GPU 3 gemm.tflops -30%")
    done = subprocess.run([sys.executable, "-m", "gpudiag", "preflight", "--here", "--hosts", "n2", "--python",
                           "/bin/true", "--no-store", "-q", "--budget", "30", "--drain", "--undrain"],
                          env=cluster.env(), capture_output=True, text=True, timeout=120, check=False,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 3, done.stdout + done.stderr
    assert cluster.node_states()["n2"] == ("drained", reason)
    lines = done.stdout.splitlines()
    assert any(line.startswith("left drained: n2: drained by gpudiag for gemm; it does not pass this run "
                               "(probe_error: ") and "printed no record at all" in line for line in lines), lines
    assert lines[-1].startswith("gpudiag preflight: inconclusive, exit 3, ") and "healthy" not in lines[-1]


def test_undrain_waits_for_a_run_that_makes_the_check_that_drained_the_node(cluster: SlurmCluster, folder: Path):
    """n4 (healthy now) drained for its GEMM stays drained after a 30 s check (no load planned) and
    returns after a 60 s one; drained for its NIC it stays drained after a one-node check (no link
    test)."""
    cluster.drain_as_gpudiag("n4", "gpudiag: gemm: slow_gpu GPU 5 gemm.tflops -20%")
    nic = cluster.drain_as_gpudiag("n1", "gpudiag: links: slow_nic link.tcp -40%: slow with every partner")
    short = _preflight(cluster, folder, "--hosts", "n[1,4]", "--undrain", "--no-links", "--budget", "30")
    assert short.returncode == 0, short.stdout + short.stderr
    assert "left drained: n4: drained by gpudiag for gemm; this run made and passed no gemm check on it, so it " \
           "could not see that fault: left drained" in short.stdout.splitlines()
    assert cluster.node_states()["n4"][0] == "drained"
    full = _preflight(cluster, folder, "--hosts", "n[1,4]", "--undrain", "--no-links")
    assert full.returncode == 0, full.stdout + full.stderr
    states = cluster.node_states()
    assert states["n4"][0] in ("idle", "idle*") and states["n4"][1] == ""
    assert states["n1"] == ("drained", nic)
    assert any(line.startswith("left drained: n1: drained by gpudiag for links; this run made and passed no links")
               for line in full.stdout.splitlines())
    assert full.stdout.splitlines()[-1].endswith(". Returned to service n4. Left drained n1")


# --- whose drain, and when: two checks of one node (issue 30) ---------------------------------------------------


@pytest.mark.parametrize("drained_before", [False, True], ids=["in-service", "drained-before"])
def test_a_drain_set_while_a_passing_check_ran_is_never_resumed_by_it(cluster: SlurmCluster, folder: Path,
                                                                       drained_before: bool):
    """Check B (n1 passes; --undrain) begins; check A (n1 fails, run as a controller or the node's own
    prolog elsewhere would: a simulated fleet takes no lock) drains n1 while B runs; B then reads n1
    drained by gpudiag for its GEMM, which B passed. B's measurements predate A's drain: n1 stays
    drained with A's reason. With ``drained-before`` n1 was already drained by gpudiag when B began,
    and A drains it again.

    The hook point is B's own scontrol (--scontrol): before it passes on B's first update (B's drain
    of n2, after B's sweep and before its resume query), it runs check A to its end. So A's drain
    lands between B's start and B's resume whatever the machine's load; nothing waits on a clock."""
    a_fleet = folder / "n1-fails.json"
    a_fleet.write_text(json.dumps({"nodes": 4, "name_format": "n{}",
                                   "faults": [{"kind": "slow_gpu", "host": "n1", "gpu": 5, "factor": 0.6}]}))
    check_a = (f"{sys.executable} -m gpudiag preflight --simulate {a_fleet} --hosts n1 --no-store -q --budget 60 "
               f"--drain")
    if drained_before:
        first = subprocess.run(check_a.split(), env=cluster.env(), capture_output=True, text=True, timeout=120,
                               check=False, stdin=subprocess.DEVNULL)
        assert first.returncode == 1 and cluster.node_states()["n1"][0] == "drained", first.stdout + first.stderr
    ran_a = folder / f"a-ran-{drained_before}"
    a_log = folder / f"a-{drained_before}.log"
    hook = _script(folder / f"scontrol-a-drains-{drained_before}",
                   f'#!/bin/sh\nif [ "$1" = update ] && [ ! -e {ran_a} ]; then\n  touch {ran_a}\n'
                   f"  {check_a} >{a_log} 2>&1\nfi\nexec scontrol \"$@\"\n")
    b = _preflight(cluster, folder, "--hosts", "n[1-2]", "--drain", "--undrain", "--scontrol", str(hook),
                   "--budget", "120")
    assert b.returncode == 1, b.stdout + b.stderr  # n2 fails B and is drained by B
    a_said = a_log.read_text()
    assert a_said.splitlines()[-1].startswith("gpudiag preflight: FAIL n1, exit 1, ") and ". Drained n1" in a_said
    state, reason = cluster.node_states()["n1"]
    assert state == "drained" and reason.startswith("gpudiag: gemm: slow_gpu GPU 5 gemm.tflops -"), (state, reason)
    assert reason in a_said  # A's own reason, as A drained it
    lines = b.stdout.splitlines()
    assert not any(line.startswith("returned to service:") for line in lines), lines
    kept = next(line for line in lines if line.startswith("left drained: n1: "))
    assert ", after this check began (" in kept and "its measurements predate it and cannot clear it" in kept, kept
    assert any(line.startswith("left drained: n2: drained by gpudiag for gemm; it does not pass this run")
               for line in lines), lines
    assert lines[-1].endswith(". Drained n2. Left drained n[1-2]"), lines[-1]


@pytest.mark.parametrize("typed", [
    "gpudiag: gemm: slow_gpu GPU 5 gemm.tflops -20%",  # typed by a person, in gpudiag's words
    # pasted from an older drain of gpudiag's (sinfo -R), its marker and all
    mark_reason("gpudiag: gemm: slow_gpu GPU 5 gemm.tflops -20%", datetime.now(timezone.utc) - timedelta(days=2)),
], ids=["typed", "pasted"])
def test_a_reason_a_person_set_is_never_resumed_even_when_it_reads_as_gpudiag_s(cluster: SlurmCluster,
                                                                                folder: Path, typed: str):
    """n4 passes its GEMM; a person drained it with a reason that starts "gpudiag:" (as root, the user
    gpudiag runs as here). Only gpudiag's own drain is resumed: a reason without its marker, or whose
    marker is days from Slurm's stamp, stays."""
    cluster.set_state("n4", "DRAIN", typed)
    done = _preflight(cluster, folder, "--hosts", "n4", "--undrain")
    assert done.returncode == 0, done.stdout + done.stderr
    assert cluster.node_states()["n4"] == ("drained", typed)
    kept = next(line for line in done.stdout.splitlines() if line.startswith("left drained: n4: "))
    assert ("carries no drain marker of gpudiag's" in kept) if typed.endswith("%") else (
        "a copy of gpudiag's reason, set by hand" in kept), kept
    assert "returned to service" not in done.stdout


def test_a_second_check_of_a_node_is_refused_as_inconclusive_and_loads_nothing(cluster: SlurmCluster, folder: Path):
    """A job's prolog checks n1 (--here: gpudiag on the node itself) and is still loading it when
    slurmd's health check starts on n1. The health check's gpudiag finds n1's lock held: it never
    starts the node's Python (nothing loaded), drains and resumes nothing, and exits 3
    (inconclusive, so the health check changes nothing). The lock is the process's own: once the
    prolog's gpudiag is killed outright, the next health check checks n1."""
    locks = folder / "node-locks"
    started, release = folder / "prolog-probes-started", folder / "prolog-probes-release"
    hold = _script(folder / "python-holds", f'#!/bin/sh\nif [ "$1" = -m ]; then\n  touch {started}\n'
                   f"  while [ ! -e {release} ]; do sleep 0.1; done\n  exit 0\nfi\nexec {sys.executable} \"$@\"\n")
    ran = folder / "health-check-probes-ran"
    record = _script(folder / "python-records", f'#!/bin/sh\nif [ "$1" = -m ]; then echo "$@" >> {ran}; exit 0; fi\n'
                     f'exec {sys.executable} "$@"\n')
    gpudiag = f'GPUDIAG="{sys.executable} -m gpudiag"\nexport GPUDIAG_LOCK_DIR={locks}\n'
    (folder / "lock-prolog.conf").write_text(
        gpudiag + f'GPUDIAG_BUDGET=600\nGPUDIAG_ARGS="--python {hold} --no-store"\n'
                  f"GPUDIAG_LOG={folder / 'lock-prolog.log'}\n")
    (folder / "lock-healthcheck.conf").write_text(
        gpudiag + f'GPUDIAG_ARGS="--python {record} --no-store"\nGPUDIAG_LOG={folder / "lock-healthcheck.log"}\n')
    prolog = subprocess.Popen([str(PROLOG)], env={"SLURMD_NODENAME": "n1", "SLURM_JOB_ID": "7001",
                                                  "SLURM_CONF": str(cluster.conf_path),
                                                  "GPUDIAG_PROLOG_CONFIG": str(folder / "lock-prolog.conf")},
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    health_check = [str(HEALTHCHECK)]
    health_env = {"SLURMD_NODENAME": "n1", "SLURM_CONF": str(cluster.conf_path),
                  "GPUDIAG_HEALTHCHECK_CONFIG": str(folder / "lock-healthcheck.conf")}
    try:
        deadline = time.monotonic() + 90
        while not started.exists() and prolog.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert started.exists(), _log(folder, "lock-prolog.log")  # the prolog's check holds n1 and loads it
        done = subprocess.run(health_check, env=health_env, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        log = _log(folder, "lock-healthcheck.log")
        assert "node n1: inconclusive (gpudiag exit 3): nothing changed" in log, log
        summary = next(line for line in log.splitlines() if line.startswith("gpudiag preflight: "))
        assert summary.startswith("gpudiag preflight: inconclusive, exit 3, ") and (
            "n1 unchecked: not probed, nothing loaded: another gpudiag check holds n1 pid=") in summary, summary
        assert not ran.exists()  # the health check never started the node's Python: it loaded nothing
        assert cluster.node_states()["n1"] == ("idle", "")
        # the prolog's gpudiag dies outright (SIGKILL: no cleanup of its own); its lock goes with it
        holder = int((locks / "n1.lock").read_text().split()[0].removeprefix("pid="))
        os.kill(holder, signal.SIGKILL)
        assert prolog.wait(timeout=60) == 0  # the prolog: inconclusive, the job starts
        done = subprocess.run(health_check, env=health_env, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0 and ran.exists(), _log(folder, "lock-healthcheck.log")
    finally:
        release.touch()  # the orphaned fake probes end
        if prolog.poll() is None:
            prolog.kill()
            prolog.wait()


# --- --drain / --undrain against the real scontrol --------------------------------------------------------------


def test_drain_through_the_cli_drains_only_the_failing_node(cluster: SlurmCluster, folder: Path):
    done = _preflight(cluster, folder, "--hosts", "n[1-4]", "--drain")
    assert done.returncode == 1, done.stdout + done.stderr
    states = cluster.node_states()
    assert states["n2"][0] == "drained" and states["n2"][1].startswith("gpudiag: gemm: slow_gpu GPU 3")
    assert {name: states[name] for name in ("n1", "n3", "n4")} == dict.fromkeys(("n1", "n3", "n4"), ("idle", ""))
    assert done.stdout.splitlines()[-1].startswith("gpudiag preflight: FAIL n2, exit 1, ")


def test_without_drain_the_command_is_only_said(cluster: SlurmCluster, folder: Path):
    done = _preflight(cluster, folder, "--hosts", "n2")
    assert done.returncode == 1
    assert any(line.startswith("would run: scontrol update NodeName=n2 State=DRAIN 'Reason=gpudiag: gemm: slow_gpu")
               for line in done.stdout.splitlines())
    assert cluster.node_states()["n2"] == ("idle", "")


def test_undrain_returns_what_gpudiag_drained_and_a_node_drained_by_hand_stays_drained(
        cluster: SlurmCluster, folder: Path):
    cluster.set_state("n1", "DRAIN", "bad cable")
    cluster.drain_as_gpudiag("n4", "gpudiag: gemm: slow_gpu GPU 5 gemm.tflops -20%")
    cluster.drain_as_gpudiag("n2", "gpudiag: gemm: slow_gpu GPU 3 gemm.tflops -30%")
    done = _preflight(cluster, folder, "--hosts", "n[1-2,4]", "--undrain")
    assert done.returncode == 1  # n2 still fails
    states = cluster.node_states()
    assert states["n4"][0] in ("idle", "idle*") and states["n4"][1] == ""
    assert states["n1"] == ("drained", "bad cable")
    assert states["n2"][0] == "drained"  # it fails again: not among those that pass
    lines = done.stdout.splitlines()
    assert "returned to service: scontrol update NodeName=n4 State=RESUME" in lines
    assert any(line.startswith('left drained: n1: drained by someone else (reason: "bad cable")') for line in lines)


def test_the_health_check_drains_on_fail_and_undrains_what_passes(cluster: SlurmCluster, folder: Path):
    cluster.drain_as_gpudiag("n4", "gpudiag: gemm: slow_gpu GPU 5 gemm.tflops -20%")
    ecc = cluster.drain_as_gpudiag("n3", "gpudiag: telemetry: ecc GPU 0")
    for node in ("n2", "n3", "n4"):
        env = cluster.env({"SLURMD_NODENAME": node, "GPUDIAG_HEALTHCHECK_CONFIG": str(folder / "healthcheck.conf")})
        done = subprocess.run([str(HEALTHCHECK)], env=env, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
    states = cluster.node_states()
    assert states["n2"][0] == "drained" and states["n2"][1].startswith("gpudiag: gemm: slow_gpu GPU 3")
    assert states["n3"] == ("drained", ecc)  # inconclusive: nothing changes
    assert states["n4"][0] in ("idle", "idle*") and states["n4"][1] == ""
    log = _log(folder, "healthcheck.log")
    assert "node n2: FAILED (gpudiag exit 1): gpudiag preflight: FAIL n2, exit 1, " in log and ". Drained n2" in log
    assert "node n3: inconclusive (gpudiag exit 3): nothing changed" in log
    assert "node n4: healthy (gpudiag exit 0)" in log


def test_the_health_check_reads_the_node_state_not_a_reason_that_imitates_it(cluster: SlurmCluster, folder: Path):
    """No load beside a job: n1, drained while a job still holds it, with a reason that says
    "State=IDLE", is skipped; n4, idle and drained by gpudiag for its GEMM with a reason that says
    "State=ALLOCATED", is checked and returned to service."""
    log_path = folder / "healthcheck.log"
    seen = len(log_path.read_text()) if log_path.exists() else 0
    other = subprocess.Popen(["srun", "-N1", "-w", "n1", "--quiet", "sleep", "60"], env=cluster.env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not _task_runs(cluster, "sleep 60") and time.monotonic() < deadline:
            time.sleep(0.1)
        cluster.set_state("n1", "DRAIN", "maintenance State=IDLE")
        cluster.drain_as_gpudiag("n4", "gpudiag: gemm: slow_gpu GPU 5 gemm.tflops -20%: State=ALLOCATED")
        for node in ("n1", "n4"):
            env = cluster.env({"SLURMD_NODENAME": node,
                               "GPUDIAG_HEALTHCHECK_CONFIG": str(folder / "healthcheck.conf")})
            done = subprocess.run([str(HEALTHCHECK)], env=env, capture_output=True, text=True, timeout=120,
                                  check=False)
            assert done.returncode == 0, done.stderr
        states = cluster.node_states()
    finally:
        other.kill()
        other.wait()
    log = log_path.read_text()[seen:]
    assert "node n1: skipped: a job holds the node (draining)" in log, log
    assert "node n1: healthy" not in log and "NodeName=n1" not in log
    assert "node n4: healthy (gpudiag exit 0)" in log
    assert "returned to service: scontrol update NodeName=n4 State=RESUME" in log
    assert states["n4"][0] in ("idle", "idle*") and states["n4"][1] == ""


def test_the_prolog_leaves_a_node_alone_while_another_job_runs_there(cluster: SlurmCluster, folder: Path):
    other = subprocess.Popen(["srun", "-N1", "-w", "n1", "--quiet", "sleep", "60"], env=cluster.env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not _task_runs(cluster, "sleep 60") and time.monotonic() < deadline:
            time.sleep(0.1)
        # the prolog of a second job on n1 (a shared node), run as slurmd runs it
        env = {"SLURMD_NODENAME": "n1", "SLURM_JOB_ID": "99999", "SLURM_CONF": str(cluster.conf_path),
               "GPUDIAG_PROLOG_CONFIG": str(folder / "prolog.conf")}
        done = subprocess.run([str(PROLOG)], env=env, capture_output=True, text=True, timeout=60, check=False)
    finally:
        other.kill()
        other.wait()
    assert done.returncode == 0, done.stderr
    log = _log(folder)
    assert "job 99999 node n1: skipped: job(s) " in log and "already run on the node (GPUDIAG_SHARED=skip)" in log
    assert "job 99999 node n1: healthy" not in log  # no check ran beside the other job


def test_a_gpudiag_that_never_ends_is_ended_by_the_prolog_as_inconclusive(cluster: SlurmCluster, folder: Path):
    """A gpudiag that outlives its budget (a bug, a hung filesystem) must not run into Slurm's
    PrologEpilogTimeout, which would drain the node: the prolog ends it GPUDIAG_SLACK s past the
    budget and lets the job start."""
    hung = folder / "hung-gpudiag"
    hung.write_text("#!/bin/sh\nexec sleep 300\n")
    hung.chmod(0o755)
    settings = folder / "hung.conf"
    settings.write_text(f'GPUDIAG={hung}\nGPUDIAG_BUDGET=1\nGPUDIAG_SLACK=1\nGPUDIAG_LOG={folder / "hung.log"}\n')
    env = {"SLURMD_NODENAME": "n4", "SLURM_JOB_ID": "4242", "SLURM_CONF": str(cluster.conf_path),
           "GPUDIAG_PROLOG_CONFIG": str(settings)}
    started = time.monotonic()
    done = subprocess.run([str(PROLOG)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 10
    assert "job 4242 node n4: inconclusive (gpudiag exit 124): the job starts; nothing drained" in _log(folder,
                                                                                                         "hung.log")
    assert cluster.node_states()["n4"] == ("idle", "")
    assert not _task_runs(cluster, "sleep 300")


def test_a_jobs_first_step_checks_its_nodes_and_the_links_between_them_through_srun(cluster: SlurmCluster,
                                                                                       folder: Path):
    """What a prolog cannot do (it sees one node): inside the allocation, preflight --launcher slurm
    takes the job's nodes, probes them through srun and screens the link between them. Real probes
    on this CPU: nothing to compare with, so inconclusive (exit 3), and nothing drained."""
    out = folder / "in-job.json"
    done = subprocess.run(["salloc", "--quiet", "-N2", "-w", "n[1,4]", sys.executable, "-m", "gpudiag", "preflight",
                           "--launcher", "slurm", "--budget", "90", "--no-store", "--python", sys.executable,
                           "--json", str(out), "--slurm-bundle-dir", str(folder / "bundles"), "-q"],
                          env=cluster.env(), capture_output=True, text=True, timeout=200, check=False,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 3, done.stdout + done.stderr
    assert any(line.startswith("  link screen: ") for line in done.stdout.splitlines())
    document = json.loads(out.read_text())
    assert {host["host"]: host["status"] for host in document["hosts"]} == {"n1": "ok", "n4": "ok"}
    assert [(link["a"], link["b"], link["backend"]) for link in document["links"] if link["value"]] == [
        ("n1", "n4", "tcp")]
    assert done.stdout.splitlines()[-1].startswith("gpudiag preflight: inconclusive, exit 3, ")
    assert cluster.node_states()["n1"] == ("idle", "") and cluster.node_states()["n4"] == ("idle", "")


def _task_runs(cluster: SlurmCluster, command: str) -> bool:
    """True once a process of the cluster runs ``command`` (its program named by any path)."""
    for pid in cluster.process_ids():
        try:
            words = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if " ".join([Path(words[0]).name, *words[1:]]).strip() == command:
            return True
    return False
