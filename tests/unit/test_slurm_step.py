"""One srun step: its command line, the node task's framing, and the output split back per node (fed real
srun output captured from Slurm 22.05, and the node task run here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpudiag.slurm.step import SrunOptions, StepEnd, StepOutput, failed_nodes, node_task_source, srun_argv, step_results
from gpudiag.transport import CommandResult, Unreachable

DATA = Path(__file__).parents[1] / "data" / "slurm"


def _output(text: bytes) -> StepOutput:
    output = StepOutput()
    for line in text.splitlines(keepends=True):
        output.feed(line)
    return output


def _run_node_task(tmp_path: Path, script: str, timeout_s: float = 30.0, folder: Path | None = None) -> bytes:
    """The node task's stdout as srun --label would carry it for task 0 (every framed line is short)."""
    program = tmp_path / "program.py"
    program.write_text(script)
    done = subprocess.run([sys.executable, "-c", node_task_source(), str(folder or tmp_path), f"{timeout_s:g}", "0.5",
                           "--", sys.executable, str(program)], capture_output=True, timeout=60, check=False,
                          env={"SLURMD_NODENAME": "n7", "PATH": "/usr/bin:/bin"})
    assert all(len(line) < 1000 for line in done.stdout.splitlines())
    return b"".join(b"0: " + line for line in done.stdout.splitlines(keepends=True))


def test_the_srun_step_has_one_task_per_node_and_overlaps_only_inside_a_job() -> None:
    argv = srun_argv(["n3", "n1", "n2"], ["python3", "-m", "probes", "facts"], "/shared/bundle", 635.0,
                     SrunOptions(), in_allocation=True)
    assert argv[:argv.index("python3")] == [
        "srun", "--nodes=3", "--ntasks=3", "--ntasks-per-node=1", "--nodelist=n[1-3]", "--kill-on-bad-exit=0",
        "--time=12", "--label", "--input=none", "--job-name=gpudiag", "--overlap"]
    assert argv[argv.index("python3"):] == ["python3", "-c", node_task_source(), "/shared/bundle", "635", "5", "--",
                                            "python3", "-m", "probes", "facts"]
    outside = srun_argv(["n1"], ["python3"], "/b", 10.0, SrunOptions(immediate_s=30), in_allocation=False)
    assert "--immediate=30" in outside and "--overlap" not in outside


def test_captured_srun_output_splits_back_into_each_nodes_own_output() -> None:
    output = _output((DATA / "srun-step-two-nodes.stdout").read_bytes())
    end = StepEnd(3, (DATA / "srun-step-two-nodes.stderr").read_text(), killed=False, duration_s=1.5)
    results = step_results(["n1", "n2"], output, end)
    for node, status in (("n1", 0), ("n2", 3)):
        result = results[node]
        assert isinstance(result, CommandResult)
        first, second, last = result.stdout.split("\n")
        assert json.loads(first) == {"node": node, "pad": "x" * 1500}  # srun cut nothing: the framing kept it whole
        assert (second, last) == ("second line", "no newline at the end")
        assert result.exit_status == status and not result.timed_out
        assert result.stderr == f"warning on {node}\n"


def test_a_node_no_task_ran_on_is_unreachable_with_what_srun_said() -> None:
    stderr = (DATA / "srun-step-drained-node.stderr").read_text()
    results = step_results(["n1", "n3"], StepOutput(), StepEnd(1, stderr, killed=False, duration_s=3.0))
    assert all(isinstance(result, Unreachable) for result in results.values())
    assert "Unable to allocate resources: Requested nodes are busy" in str(results["n3"])
    stderr = "srun: error: Task launch for StepId=12.0 failed on node n3: Communication connection failure\n"
    output = _output((DATA / "srun-step-two-nodes.stdout").read_bytes())
    results = step_results(["n1", "n2", "n3"], output, StepEnd(1, stderr, killed=False, duration_s=2.0))
    assert isinstance(results["n1"], CommandResult) and isinstance(results["n2"], CommandResult)
    assert str(results["n3"]) == ("n3: srun did not run the probes there: srun: error: Task launch for StepId=12.0 "
                                  "failed on node n3: Communication connection failure")


def test_a_step_revoked_for_one_failed_node_names_it_to_run_again_without_it() -> None:
    stderr = "salloc: error: Node failure on n3\nsrun: error: Job allocation 4 has been revoked\n"
    assert failed_nodes(["n1", "n3", "n13"], StepOutput(), StepEnd(1, stderr, False, 1.0)) == ["n3"]
    ran = _output((DATA / "srun-step-two-nodes.stdout").read_bytes())
    assert failed_nodes(["n1", "n2", "n3"], ran, StepEnd(1, stderr, False, 1.0)) == []


def test_the_node_task_frames_long_lines_binary_and_stderr_and_reports_its_status(tmp_path: Path) -> None:
    labelled = _run_node_task(tmp_path, "import sys\nsys.stdout.buffer.write(b'{' + b'y' * 5000 + b'}\\n\\xff\\n')\n"
                                        "sys.stderr.write('a' * 2000)\nsys.exit(5)\n")
    task = _output(labelled).by_node()["n7"]
    assert bytes(task.stdout) == b"{" + b"y" * 5000 + b"}\n\xff\n"
    assert bytes(task.stderr) == b"a" * 2000
    assert task.exit_status == 5 and not task.timed_out


def test_the_node_task_ends_a_command_past_its_time(tmp_path: Path) -> None:
    labelled = _run_node_task(tmp_path, "import time\nprint('started', flush=True)\ntime.sleep(60)\n", timeout_s=1.0)
    task = _output(labelled).by_node()["n7"]
    assert task.timed_out and task.exit_status == 128 + 15 and bytes(task.stdout) == b"started\n"
    result = step_results(["n7"], _output(labelled), StepEnd(0, "", False, 1.2))["n7"]
    assert isinstance(result, CommandResult) and result.timed_out


def test_a_bundle_folder_missing_on_the_node_says_so(tmp_path: Path) -> None:
    labelled = _run_node_task(tmp_path, "print('never')\n", folder=tmp_path / "not-shared")
    result = step_results(["n7"], _output(labelled), StepEnd(127, "", False, 0.1))["n7"]
    assert isinstance(result, CommandResult) and result.exit_status == 127 and result.stdout == ""
    assert "the probe bundle folder" in result.stderr and "is not on node n7" in result.stderr
