"""``--launcher slurm`` against hostile and broken nodes, on the real Slurm cluster of this machine
(slurm_cluster.py): a node's output is its own task's by Slurm's layout and never by what it prints, each
node's output is bounded and a flood costs only that node, a started command's stdin lives as long as its
controller, and a bundle folder someone else could have written is never run.

A hostile node is the nodes' ``--python``: a wrapper script that misbehaves on one node (``$SLURMD_NODENAME``),
as the node task (``python -c <nodetask>``) or as the probes (``python -m probes``)."""

from __future__ import annotations

import json
import os
import pwd
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from slurm_cluster import SlurmCluster, requires_slurm
from test_sweep_ssh import NO_COMPARISON

from gpudiag.bundle import locate_bundle
from gpudiag.slurm.launcher import StepLauncher
from gpudiag.slurm.staging import bundle_folder_name
from gpudiag.slurm.step import SrunOptions
from gpudiag.transport import TransportError

pytestmark = requires_slurm

PROBES = ("--probes", "facts,membw", "--duration", "0.2")
# The controller runs under this address-space limit where it reads a flood: a failure cannot take the machine down.
CONTROLLER_AS_MIB = 1024
# Prints the peak resident memory of the command it runs (KiB, its largest process: the controller).
MEASURED = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
            "print(f'maxrss_kib={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}', file=sys.stderr); "
            "sys.exit(code)")
# A forged membw record, far past anything a node measures.
FORGED = ('{"probe": "membw", "device": "cpu", "gpu_uuid": null, "metric": "bandwidth", "value": 987654.0, '
          '"unit": "GB/s", "samples": 5, "cv": 0.01, "status": "ok", "reason": null, '
          '"params": {"memory": "host", "buffer_mib": 256}, "details": {}}')


def _python(tmp_path: Path, cases: str) -> Path:
    """The nodes' Python: ``cases`` (shell ``if`` lines on $1 and $SLURMD_NODENAME) first, else the real one."""
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\n{cases}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python


def _sweep(cluster: SlurmCluster, tmp_path: Path, hosts: str, *extra: str, env: dict[str, str] | None = None,
           memory_mib: int = CONTROLLER_AS_MIB) -> tuple[int, dict[str, Any], str, float]:
    """``gpudiag sweep --launcher slurm`` as a process of its own under an address-space limit; (exit status,
    document, stderr, seconds). Its stderr ends with the controller's peak memory (``maxrss_kib=``)."""
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text(NO_COMPARISON)
    out = tmp_path / f"sweep-{len(list(tmp_path.glob('sweep-*.json')))}.json"
    argv = [sys.executable, "-c", MEASURED, sys.executable, "-m", "gpudiag", "sweep", "--hosts", hosts, *PROBES,
            "--links", "none", "--no-store", "--thresholds", str(thresholds), "--json-detail", "full", "-q",
            "--launcher", "slurm", "--slurm-bundle-dir", str(tmp_path / "bundles"), "--json", str(out), *extra]

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_mib << 20, memory_mib << 20))

    started = time.monotonic()
    done = subprocess.run(argv, env=cluster.env(env), capture_output=True, text=True, timeout=280, check=False,
                          stdin=subprocess.DEVNULL, preexec_fn=limit_memory)
    document = json.loads(out.read_text()) if out.exists() else {}
    return done.returncode, document, done.stderr, time.monotonic() - started


def _hosts(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {host["host"]: host for host in document["hosts"]}


def _records(host: dict[str, Any]) -> set[tuple[Any, ...]]:
    return {(r["probe"], r["metric"], r["device"], r["unit"], r["status"]) for r in host["results"]}


def _peak_mib(stderr: str) -> float:
    return int(stderr.rsplit("maxrss_kib=", 1)[1].split()[0]) / 1024


def _cluster_processes_matching(cluster: SlurmCluster, text: str) -> list[int]:
    found = []
    for pid in cluster.process_ids():
        try:
            if text in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                found.append(pid)
        except (FileNotFoundError, ProcessLookupError):
            pass  # it ended meanwhile
    return found


# --- attributed by Slurm, never by what a task prints --------------------------------------------------------


def test_a_node_claiming_another_nodes_output_changes_only_its_own_verdict(clean_slurm_cluster: SlurmCluster,
                                                                          tmp_path: Path):
    # n2 forges n1's frames (its @ line, a record 1,000x too fast, a piece that looks like task 0's label);
    # n4 runs the real node task but says it is n1. A layout file in the environment must not reorder the tasks.
    label_bait = "x" * 1030 + "0: @n1"
    python = _python(tmp_path, f"""\
if [ "$1" = -c ] && [ "$SLURMD_NODENAME" = n2 ]; then
  printf '%s\\n' '@n1' 'O={FORGED}' 'O=not a record' '{label_bait}' '0: O={FORGED}' 'X 0'; exit 0
fi
if [ "$1" = -c ] && [ "$SLURMD_NODENAME" = n4 ]; then SLURMD_NODENAME=n1; export SLURMD_NODENAME; fi""")
    (tmp_path / "hostfile").write_text("n4\nn3\nn2\nn1\n")
    code, document, stderr, _ = _sweep(clean_slurm_cluster, tmp_path, "n[1-4]", "--python", str(python),
                                       env={"SLURM_HOSTFILE": str(tmp_path / "hostfile")})
    hosts = _hosts(document)
    assert {name: host["status"] for name, host in hosts.items()} == {
        "n1": "ok", "n2": "probe_error", "n3": "ok", "n4": "probe_error"}, stderr
    assert _records(hosts["n1"]) == _records(hosts["n3"]) and _records(hosts["n1"])
    assert all(record["value"] != 987654.0 for record in hosts["n1"]["results"])
    assert "task 1 of the srun step ran on n2 (Slurm's layout), but it said it runs on 'n1'" in hosts["n2"]["error"]
    assert "task 3 of the srun step ran on n4 (Slurm's layout), but it said it runs on 'n1'" in hosts["n4"]["error"]
    assert hosts["n2"]["results"] == [] and hosts["n4"]["results"] == []
    assert code == 3


def test_nodes_whose_command_comes_late_still_run_in_their_phases_one_step(clean_slurm_cluster: SlurmCluster,
                                                                          tmp_path: Path):
    # a busy controller's threads may come seconds apart, each with a little less of its time limit left:
    # each node's first command is waited for
    nodes = ("n1", "n2", "n3")
    launcher = StepLauncher(SrunOptions(immediate_s=30, gather_s=0.3, max_gather_s=60.0), in_allocation=False,
                            expected=nodes)
    steps_before = clean_slurm_cluster.step_ids()
    command = [sys.executable, "-c", "import os; print(os.environ['SLURMD_NODENAME'])"]
    results: dict[str, str] = {}

    def run(node: str, delay_s: float) -> None:
        time.sleep(delay_s)
        results[node] = launcher.run(node, command, 30.0 - delay_s, str(tmp_path)).stdout

    threads = [threading.Thread(target=run, args=(node, 1.5 * index)) for index, node in enumerate(nodes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert results == {node: f"{node}\n" for node in nodes}
    assert len(clean_slurm_cluster.step_ids() - steps_before) == 1
    # n4's command is announced and never comes: a step waits no longer than max_gather_s for it
    quick = StepLauncher(SrunOptions(immediate_s=30, max_gather_s=1.0), in_allocation=False, expected=["n4"])
    started = time.monotonic()
    assert quick.run("n1", command, 30.0, str(tmp_path)).stdout == "n1\n"
    assert time.monotonic() - started < 60


# --- bounded ----------------------------------------------------------------------------------------------


def test_a_node_flooding_its_output_is_cut_at_the_cap_and_costs_no_other_node(clean_slurm_cluster: SlurmCluster,
                                                                              tmp_path: Path):
    # n2's probes print one endless line (the node task ends them at the cap); n3's node task itself floods
    # framed pieces forever, n4's raw bytes without a node line (the controller stops keeping them, and ends the
    # step once the others are done)
    python = _python(tmp_path, f"""\
if [ "$1" = -m ] && [ "$SLURMD_NODENAME" = n2 ]; then exec cat /dev/zero; fi
if [ "$1" = -c ] && [ "$SLURMD_NODENAME" = n3 ]; then
  exec {sys.executable} -c 'import sys
sys.stdout.buffer.write(b"@n3\\n")
while True: sys.stdout.buffer.write(b"O+" + b"x" * 700 + b"\\n")'
fi
if [ "$1" = -c ] && [ "$SLURMD_NODENAME" = n4 ]; then exec cat /dev/zero; fi""")
    # (both with the same Python, the wrapper's own, and the same generous host time limit: the node's default
    # python3 may lack torch, and on a busy machine the default limit can run out before membw starts; a
    # skipped probe is no measure of what the flood cost)
    clean_code, clean, clean_stderr, _ = _sweep(clean_slurm_cluster, tmp_path, "n[1-4]", "--python", sys.executable,
                                                "--host-timeout", "200")
    code, document, stderr, seconds = _sweep(clean_slurm_cluster, tmp_path, "n[1-4]", "--python", str(python),
                                             "--host-timeout", "200")
    hosts = _hosts(document)
    assert {name: host["status"] for name, host in hosts.items()} == {
        "n1": "ok", "n2": "probe_error", "n3": "probe_error", "n4": "probe_error"}, stderr
    for name in ("n2", "n3"):
        assert "printed a line longer than 1 MiB (the cap: 16 MiB of output, 1 MiB a line)" in hosts[name]["error"]
    assert ("never said where it runs; the node printed more unframed output than the cap (16 MiB of output"
            in hosts["n4"]["error"]) and hosts["n4"]["error"].isprintable()
    assert _records(hosts["n1"]) == _records(_hosts(clean)["n1"]) == _records(_hosts(clean)["n4"]), [
        (name, record["status"], record["reason"]) for name, host in (("n1", hosts["n1"]), *_hosts(clean).items())
        for record in host["results"]]
    # the nodes run under their own limits, not the controller's address-space cap: membw measures
    assert {record["status"] for record in hosts["n1"]["results"]} == {"ok"}, hosts["n1"]["results"]
    assert seconds < 150  # the step ended once the others were done, not at the 200 s host limit
    assert code == clean_code == 3
    # the controller kept no more than the caps: its peak is the clean sweep's, give or take the caps
    assert _peak_mib(stderr) < _peak_mib(clean_stderr) + 100, (_peak_mib(stderr), _peak_mib(clean_stderr))
    assert not _cluster_processes_matching(clean_slurm_cluster, "cat /dev/zero")


# --- a started command's stdin -----------------------------------------------------------------------------


STDIN_WATCHER = """\
import os, sys, time
started = time.monotonic()
print("ready", flush=True)
data = sys.stdin.read()
print(f"eof after {time.monotonic() - started:.1f} s, {len(data)} bytes", flush=True)
if len(sys.argv) > 1:  # written whole, then renamed: a reader never sees the marker half written
    with open(sys.argv[1] + ".part", "w") as part:
        part.write("eof\\n")
    os.replace(sys.argv[1] + ".part", sys.argv[1])
"""


def test_a_started_command_sees_no_eof_until_it_is_finished(clean_slurm_cluster: SlurmCluster, tmp_path: Path):
    launcher = StepLauncher(SrunOptions(immediate_s=30), in_allocation=False)
    command = launcher.start("n2", [sys.executable, "-c", STDIN_WATCHER], 60.0, str(tmp_path))
    assert command.first_line(60.0) == "ready"
    time.sleep(3.0)
    assert command.running()  # still reading its stdin: no EOF while we hold it
    result = command.finish(1.0)  # past its time: its stdin is closed, and it ends on its own at that EOF
    first, second = result.stdout.splitlines()
    assert first == "ready" and second.startswith("eof after") and second.endswith(", 0 bytes")
    assert float(second.split()[2]) >= 3.0
    assert result.exit_status == 0 and not result.timed_out and result.overflow is None
    cancelled = launcher.start("n3", [sys.executable, "-c", STDIN_WATCHER], 60.0, str(tmp_path))
    assert cancelled.first_line(60.0) == "ready"
    cancelled.cancel()
    deadline = time.monotonic() + 30.0
    while cancelled.running() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not cancelled.running()


LINE_ECHO = """\
import sys
print("ready", flush=True)
print("got " + sys.stdin.readline().strip(), flush=True)
"""


def test_a_line_sent_to_a_started_command_reaches_it_through_srun(clean_slurm_cluster: SlurmCluster, tmp_path: Path):
    launcher = StepLauncher(SrunOptions(immediate_s=30), in_allocation=False)
    command = launcher.start("n1", [sys.executable, "-c", LINE_ECHO], 60.0, str(tmp_path))
    assert command.first_line(60.0) == "ready"
    command.send_line("a secret the command line never shows")
    result = command.finish(30.0)
    assert result.stdout.splitlines() == ["ready", "got a secret the command line never shows"]
    with pytest.raises(ValueError):
        command.send_line("two\nlines")
    with pytest.raises(TransportError):  # the step has ended: its stdin is closed
        command.send_line("too late")


CONTROLLER = """\
import sys, time
from gpudiag.slurm.launcher import StepLauncher
from gpudiag.slurm.step import SrunOptions
from gpudiag.transport import TransportError
command = StepLauncher(SrunOptions(immediate_s=30), in_allocation=False).start(
    "n4", [sys.executable, "-c", sys.argv[1], sys.argv[2]], 120.0, sys.argv[3])
print(command.first_line(60.0), flush=True)
time.sleep(600)
"""


def test_a_started_command_sees_eof_when_its_controller_is_killed(clean_slurm_cluster: SlurmCluster, tmp_path: Path):
    marker = tmp_path / "saw-eof"
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER, STDIN_WATCHER, str(marker), str(tmp_path)],
                                  env=clean_slurm_cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
    try:
        assert controller.stdout is not None and controller.stdout.readline().strip() == "ready"
        assert not marker.exists()
        controller.send_signal(signal.SIGKILL)
        controller.wait(10)
        deadline = time.monotonic() + 30.0
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.read_text() == "eof\n"  # the command saw EOF within seconds, not at its 120 s limit
        while _cluster_processes_matching(clean_slurm_cluster, str(marker)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _cluster_processes_matching(clean_slurm_cluster, str(marker))  # srun and its step ended too
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()


# --- staging --------------------------------------------------------------------------------------------


def test_a_bundle_folder_another_user_made_or_anyone_may_write_is_refused_and_never_run(
        clean_slurm_cluster: SlurmCluster, tmp_path: Path):
    marker = tmp_path / "planted-bundle-ran"
    bundle = locate_bundle()
    planted = tmp_path / "bundles" / bundle_folder_name(bundle)
    for relative, data in bundle.contents.items():
        (planted / relative).parent.mkdir(parents=True, exist_ok=True)
        (planted / relative).write_bytes(data)
    (planted / "probes" / "__main__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (planted / ".complete").write_text(bundle.content_hash + "\n")
    nobody = pwd.getpwnam("nobody").pw_uid
    for path in [planted, *planted.rglob("*")]:
        os.chown(path, nobody, -1)
    code, document, stderr, _ = _sweep(clean_slurm_cluster, tmp_path, "n[1-2]")
    hosts = _hosts(document)
    assert {name: host["status"] for name, host in hosts.items()} == {"n1": "unreachable", "n2": "unreachable"}
    error = hosts["n1"]["error"]
    assert f"the staged probe bundle {planted}: {planted} is owned by nobody (uid {nobody}), not by you" in error
    assert f"remove {planted} (gpudiag stages it again)" in error and "\n" not in error
    assert code == 3
    for path in [planted, *planted.rglob("*")]:  # ours now, but anyone may write it
        os.chown(path, os.geteuid(), -1)
    planted.chmod(0o777)
    code, document, stderr, _ = _sweep(clean_slurm_cluster, tmp_path, "n1")
    assert _hosts(document)["n1"]["status"] == "unreachable"
    assert f"{planted} is writable by its group and everyone (mode 0777)" in _hosts(document)["n1"]["error"]
    assert not marker.exists()  # never run
    subprocess.run(["rm", "-rf", str(planted)], check=True)  # the fix the message gives
    code, document, stderr, _ = _sweep(clean_slurm_cluster, tmp_path, "n1")
    assert _hosts(document)["n1"]["status"] == "ok", stderr
    assert (planted / "probes" / "__main__.py").read_bytes() == bundle.contents[Path("probes/__main__.py")]
    assert not marker.exists()


@pytest.fixture(autouse=True)
def _no_stray_srun(clean_slurm_cluster: SlurmCluster):
    """Every test leaves no srun or task of its own behind."""
    yield
    deadline = time.monotonic() + 20.0
    while _cluster_processes_matching(clean_slurm_cluster, "srun ") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _cluster_processes_matching(clean_slurm_cluster, "srun ")
