"""One srun step: its command line, the node task's framing, and the output split back per node (fed real
srun output captured from Slurm 22.05, and the node task run here): each node's output is its own task's by
Slurm's layout, never by what a task prints, and bounded."""

from __future__ import annotations

import io
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from gpudiag.slurm.srunprocess import read_lines
from gpudiag.slurm.step import (
    SrunOptions,
    StepEnd,
    StepOutput,
    TaskIdentityError,
    failed_hosts,
    node_task_source,
    srun_argv,
    step_results,
    task_layout,
)
from gpudiag.transport import CommandResult, Unreachable
from gpudiag.transport.bounded import KIB, OutputLimits

DATA = Path(__file__).parents[3] / "data" / "slurm"
SMALL = OutputLimits(max_bytes=64 * KIB, max_line_bytes=8 * KIB, stderr_tail_bytes=1 * KIB)


def _output(text: bytes, tasks: int, limits: OutputLimits | None = None) -> StepOutput:
    output = StepOutput(tasks, limits)
    for line in text.splitlines(keepends=True):
        output.feed(line)
    output.end()
    return output


def _run_node_task(tmp_path: Path, script: str, timeout_s: float = 30.0, folder: Path | None = None,
                   limits: OutputLimits = SMALL, stdin: bytes = b"", memory_mib: int = 0) -> bytes:
    """The node task's stdout as srun --label would carry it for task 0 (every framed line is short); with
    ``memory_mib``, the node task and its command run under that address-space limit."""
    program = tmp_path / "program.py"
    program.write_text(script)

    def limit_memory() -> None:
        if memory_mib:
            resource.setrlimit(resource.RLIMIT_AS, (memory_mib << 20, memory_mib << 20))

    done = subprocess.run([sys.executable, "-c", node_task_source(), str(folder or tmp_path), f"{timeout_s:g}", "0.5",
                           str(limits.max_bytes), str(limits.max_line_bytes), "--", sys.executable, str(program)],
                          capture_output=True, timeout=60, check=False, input=stdin, preexec_fn=limit_memory,
                          env={"SLURMD_NODENAME": "n7", "PATH": "/usr/bin:/bin"})
    assert all(len(line) < 1000 for line in done.stdout.splitlines())
    return b"".join(b"0: " + line for line in done.stdout.splitlines(keepends=True))


def _result(labelled: bytes, limits: OutputLimits = SMALL) -> CommandResult:
    result = step_results(["n7"], _output(labelled, 1, limits), StepEnd(0, "", False, 0.5))["n7"]
    assert isinstance(result, CommandResult), result
    return result


# --- the command line ------------------------------------------------------------------------------------


def test_the_srun_step_has_one_task_per_node_laid_out_by_us_and_overlaps_only_inside_a_job() -> None:
    argv = srun_argv(["n3", "n1", "n2"], ["python3", "-m", "probes", "facts"], "/shared/bundle", 635.0,
                     SrunOptions(output=SMALL), in_allocation=True)
    assert argv[:argv.index("python3")] == [
        "srun", "--nodes=3", "--ntasks=3", "--ntasks-per-node=1", "--nodelist=n[1-3]", "--distribution=arbitrary",
        "--kill-on-bad-exit=0", "--propagate=NONE", "--time=12", "--label", "--input=none", "--job-name=gpudiag",
        "--overlap"]
    assert argv[argv.index("python3"):] == ["python3", "-c", node_task_source(), "/shared/bundle", "635", "5",
                                            str(64 * KIB), str(8 * KIB), "--", "python3", "-m", "probes", "facts"]
    outside = srun_argv(["n1"], ["python3"], "/b", 10.0, SrunOptions(immediate_s=30), in_allocation=False)
    assert "--immediate=30" in outside and "--overlap" not in outside


def test_a_started_command_gets_srun_stdin_forwarded_to_its_one_task() -> None:
    started = srun_argv(["n2"], ["python3"], "/b", 10.0, SrunOptions(), in_allocation=True, live_stdin=True)
    assert "--input=0" in started and "--input=none" not in started


def test_task_i_runs_on_the_ith_node_of_the_folded_list_whatever_order_the_nodes_came_in() -> None:
    assert task_layout(["n3", "n1", "n2"]) == ["n1", "n2", "n3"]
    # folded to cpu1,gpu[9-10,002], which scontrol show hostnames (Slurm 22.05) expands in this order too
    assert task_layout(["gpu10", "cpu1", "gpu9", "gpu002"]) == ["cpu1", "gpu9", "gpu10", "gpu002"]
    nodes = [f"node{index:03d}" for index in range(40, 0, -3)]
    assert sorted(task_layout(nodes)) == sorted(nodes) and len(task_layout(nodes)) == len(nodes)


# --- output split back per node ------------------------------------------------------------------------


def test_captured_srun_output_splits_back_into_each_nodes_own_output() -> None:
    output = _output((DATA / "srun-step-two-nodes.stdout").read_bytes(), 2)
    for line in (DATA / "srun-step-two-nodes.stderr").read_bytes().splitlines():
        output.feed_stderr(line)
    end = StepEnd(3, output.srun_lines(), killed=False, duration_s=1.5)
    results = step_results(["n1", "n2"], output, end)
    for node, status in (("n1", 0), ("n2", 3)):
        result = results[node]
        assert isinstance(result, CommandResult)
        first, second, last, nothing = result.stdout.split("\n")
        assert json.loads(first) == {"node": node, "pad": "x" * 1500}  # srun cut nothing: the framing kept it whole
        assert (second, last, nothing) == ("second line", "no newline at the end", "")
        assert result.exit_status == status and not result.timed_out and result.overflow is None
        assert result.stderr == f"warning on {node}\n"


def test_a_node_no_task_ran_on_is_unreachable_with_what_srun_said() -> None:
    stderr = (DATA / "srun-step-drained-node.stderr").read_text()
    results = step_results(["n1", "n3"], StepOutput(2), StepEnd(1, stderr, killed=False, duration_s=3.0))
    assert all(isinstance(result, Unreachable) for result in results.values())
    assert "Unable to allocate resources: Requested nodes are busy" in str(results["n3"])
    stderr = "srun: error: Task launch for StepId=12.0 failed on node n3: Communication connection failure\n"
    output = _output((DATA / "srun-step-two-nodes.stdout").read_bytes(), 3)
    results = step_results(["n1", "n2", "n3"], output, StepEnd(1, stderr, killed=False, duration_s=2.0))
    assert isinstance(results["n1"], CommandResult) and isinstance(results["n2"], CommandResult)
    assert str(results["n3"]) == ("n3: srun did not run the probes there: srun: error: Task launch for StepId=12.0 "
                                  "failed on node n3: Communication connection failure")


def test_a_node_whose_python_could_not_run_the_node_task_is_unreachable_with_its_own_words() -> None:
    output = _output(b"0: @n1\n0: X 0\n", 2)
    output.feed_stderr(b"1: /bin/sh: 1: python3: not found")
    output.feed_stderr(b"srun: error: n2: task 1: Exited with exit code 127")
    results = step_results(["n1", "n2"], output, StepEnd(127, output.srun_lines(), False, 1.0))
    assert isinstance(results["n1"], CommandResult)
    assert isinstance(results["n2"], Unreachable) and "python3: not found" in str(results["n2"])


def test_a_step_revoked_for_one_failed_node_names_it_to_run_again_without_it() -> None:
    stderr = "salloc: error: Node failure on n3\nsrun: error: Job allocation 4 has been revoked\n"
    assert failed_hosts(["n1", "n3", "n13"], StepOutput(3), StepEnd(1, stderr, False, 1.0)) == ["n3"]
    ran = _output((DATA / "srun-step-two-nodes.stdout").read_bytes(), 3)
    assert failed_hosts(["n1", "n2", "n3"], ran, StepEnd(1, stderr, False, 1.0)) == []


# --- attributed by Slurm, never by what a task prints --------------------------------------------------------


def test_a_task_claiming_another_nodes_name_gets_no_node_its_output_and_costs_only_its_own_node() -> None:
    honest = b'0: @n1\n0: O={"probe": "facts", "node": "n1"}\n0: X 0\n'
    liar = b'1: @n1\n1: O={"probe": "gemm", "value": 1500000.0}\n1: X 0\n'
    output = _output(honest + liar + b"2: @n3\n2: O=fine\n2: X 0\n", 3)
    results = step_results(["n1", "n2", "n3"], output, StepEnd(0, "", False, 1.0))
    n1, n2, n3 = results["n1"], results["n2"], results["n3"]
    assert isinstance(n1, CommandResult) and n1.stdout == '{"probe": "facts", "node": "n1"}\n'
    assert isinstance(n2, TaskIdentityError) and n2.status == "probe_error"
    assert "task 1" in str(n2) and "said it runs on 'n1'" in str(n2)
    assert isinstance(n3, CommandResult) and n3.stdout == "fine\n"


def test_label_text_inside_a_tasks_line_stays_that_tasks() -> None:
    # srun labels every piece of a long line, so text that looks like another task's label is payload
    output = _output(b"0: @n1\n1: @n2\n1: O+" + b"x" * 1020 + b"\n1: O=0: O=injected\n1: E=0: X 9\n"
                     b"1: 0: O=more\n0: O=own\n0: X 0\n1: X 0\n", 2)
    results = step_results(["n1", "n2"], output, StepEnd(0, "", False, 1.0))
    n1, n2 = results["n1"], results["n2"]
    assert isinstance(n1, CommandResult) and n1.stdout == "own\n" and n1.exit_status == 0
    assert isinstance(n2, CommandResult) and n2.stdout == "x" * 1020 + "0: O=injected\n"
    assert "0: O=more" in n2.stderr and "0: X 9" in n2.stderr


def test_a_task_that_never_says_its_node_is_not_taken_as_any_other() -> None:
    output = _output(b'1: O={"probe": "gemm"}\n1: X 0\n0: @n1\n0: X 0\n', 2)
    results = step_results(["n1", "n2"], output, StepEnd(0, "", False, 1.0))
    assert isinstance(results["n1"], CommandResult) and results["n1"].stdout == ""
    assert isinstance(results["n2"], Unreachable)


def test_a_task_flooding_raw_bytes_without_saying_its_node_is_its_nodes_probe_error_named_plainly() -> None:
    output = StepOutput(2, SMALL)
    output.feed(b"0: @n1")
    for _ in range(200):  # srun's labelled pieces of an endless line of NULs and escapes: 120 KB
        output.feed(b"1: " + b"\0\x1b[2J" * 120)
    output.feed(b"0: X 0")
    assert output.settled()
    results = step_results(["n1", "n2"], output, StepEnd(None, "", False, 1.0))
    n2 = results["n2"]
    assert isinstance(results["n1"], CommandResult)
    assert isinstance(n2, TaskIdentityError) and n2.status == "probe_error"
    assert "never said where it runs; the node printed more unframed output than the cap" in str(n2)
    few = StepOutput(1, SMALL)
    few.feed_stderr(b"0: \x1b]0;owned\x07python3: " + b"\0" * 5000)
    unreachable = step_results(["n1"], few, StepEnd(1, "", False, 1.0))["n1"]
    assert isinstance(unreachable, Unreachable) and "?]0;owned?python3: ???" in str(unreachable)
    assert len(str(unreachable)) < 300 and str(unreachable).isprintable()


# --- bounded ----------------------------------------------------------------------------------------------


def test_a_task_past_the_output_cap_is_cut_and_the_others_are_untouched() -> None:
    flood = b"".join(b"1: O+" + b"y" * 700 + b"\n" for _ in range(20))  # 14 KB in one line: past 8 KiB
    output = _output(b"0: @n1\n1: @n2\n" + flood + b"0: O=fine\n0: X 0\n", 2, SMALL)
    assert output.settled()  # the flooding task passed its cap and the other ended: nothing more is wanted
    results = step_results(["n1", "n2"], output, StepEnd(None, "", False, 1.0))
    n1, n2 = results["n1"], results["n2"]
    assert isinstance(n1, CommandResult) and n1.stdout == "fine\n" and n1.overflow is None
    assert isinstance(n2, CommandResult) and n2.stdout == "" and n2.exit_status is None
    assert n2.overflow is not None and "a line longer than 8 KiB" in n2.overflow


def test_many_short_lines_past_the_byte_cap_are_cut_at_the_cap() -> None:
    lines = b"".join(b"0: O=" + b"z" * 99 + b"\n" for _ in range(1000))  # 100 KB of 100-byte lines
    result = step_results(["n1"], _output(b"0: @n1\n" + lines + b"0: X 0\n", 1, SMALL), StepEnd(0, "", False, 1.0))
    n1 = result["n1"]
    assert isinstance(n1, CommandResult) and n1.overflow is not None and "more than 64 KiB" in n1.overflow
    assert len(n1.stdout) <= 64 * KIB and n1.stdout.count("\n") == 655


def test_unframed_lines_and_stderr_keep_only_their_tail() -> None:
    output = StepOutput(1, SMALL)
    output.feed(b"0: @n1")
    for index in range(2000):
        output.feed(b"0: E=" + b"e" * 100 + str(index).encode())
        output.feed_stderr(b"0: " + b"u" * 20)
    output.feed(b"0: X 1")
    n1 = step_results(["n1"], output, StepEnd(1, "", False, 1.0))["n1"]
    assert isinstance(n1, CommandResult) and n1.exit_status == 1
    assert len(n1.stderr) < 20 * KIB and "e1999" in n1.stderr and "earlier bytes of error output dropped" in n1.stderr
    output = StepOutput(1, SMALL)
    for _ in range(4000):  # unframed garbage counts against the byte cap
        output.feed(b"0: " + b"g" * 30)
    assert output.tasks[0].overflow is not None and output.settled()


def test_srun_lines_are_read_whole_and_an_endless_one_is_cut_to_its_labelled_start() -> None:
    stream = io.BytesIO(b"0: @n1\n0: O+" + b"q" * 300_000 + b"\n1: @n2\n0: X 0\n1: X 0")
    output = StepOutput(2)
    lines: list[tuple[bytes, bool]] = []

    def feed(line: bytes, cut: bool) -> None:
        lines.append((line[:12], cut))
        output.feed(line, cut)

    read_lines(stream, feed, max_line_bytes=64 * KIB)
    assert lines == [(b"0: @n1", False), (b"0: O+" + b"q" * 7, True), (b"1: @n2", False), (b"0: X 0", False),
                     (b"1: X 0", False)]
    assert output.tasks[0].overflow is not None and output.tasks[1].overflow is None


def test_stray_unlabelled_lines_keep_only_the_last_few() -> None:
    output = StepOutput(1)
    for index in range(1000):
        output.feed(b"garbage %d " % index + b"w" * 5000)
    assert len(output.unlabelled) == 20 and output.unlabelled[-1].startswith("garbage 999")
    assert all(len(line) <= 512 for line in output.unlabelled)


# --- the node task ------------------------------------------------------------------------------------------


def test_the_node_task_frames_long_lines_binary_and_stderr_and_reports_its_status(tmp_path: Path) -> None:
    labelled = _run_node_task(tmp_path, "import sys\nsys.stdout.buffer.write(b'{' + b'y' * 5000 + b'}\\n\\xff\\n')\n"
                                        "sys.stderr.write('a' * 900)\nsys.exit(5)\n")
    task = _output(labelled, 1).tasks[0]
    assert task.stdout.text().encode() == b"{" + b"y" * 5000 + b"}\n\xef\xbf\xbd\n"
    assert task.stderr.text() == "a" * 900
    assert task.exit_status == 5 and not task.timed_out and task.claimed == "n7"


def test_the_node_task_ends_a_command_past_its_time(tmp_path: Path) -> None:
    # 8 s: the child must start and print first, and a loaded machine took more than 1 s to start Python
    labelled = _run_node_task(tmp_path, "import time\nprint('started', flush=True)\ntime.sleep(60)\n", timeout_s=8.0)
    task = _output(labelled, 1).tasks[0]
    assert task.timed_out and task.exit_status == 128 + 15 and task.stdout.text() == "started\n"
    assert _result(labelled).timed_out


def test_a_bundle_folder_missing_on_the_node_says_so(tmp_path: Path) -> None:
    labelled = _run_node_task(tmp_path, "print('never')\n", folder=tmp_path / "not-shared")
    result = step_results(["n7"], _output(labelled, 1), StepEnd(127, "", False, 0.1))["n7"]
    assert isinstance(result, CommandResult) and result.exit_status == 127 and result.stdout == ""
    assert "the probe bundle folder" in result.stderr and "is not on node n7" in result.stderr


def test_the_node_task_ends_an_endless_line_at_the_cap_in_bounded_memory(tmp_path: Path) -> None:
    started = time.monotonic()
    labelled = _run_node_task(tmp_path, "import sys\nwhile True:\n    sys.stdout.buffer.write(b'x' * 65536)\n",
                              timeout_s=50.0, memory_mib=400)
    assert time.monotonic() - started < 40  # ended at the cap, not at its deadline
    result = _result(labelled)
    assert result.overflow is not None and "a line longer than 8 KiB" in result.overflow
    assert result.stdout == "" and result.exit_status == 128 + 15 and not result.timed_out
    assert len(labelled) < 16 * KIB  # the node sent no more than the cap and a piece


def test_the_node_task_ends_a_command_printing_past_the_byte_cap(tmp_path: Path) -> None:
    labelled = _run_node_task(tmp_path, "while True:\n    print('r' * 99)\n", timeout_s=50.0)
    result = _result(labelled)
    assert result.overflow is not None and "more than 64 KiB" in result.overflow
    assert result.stdout.count("\n") == 655 and result.exit_status == 128 + 15


def test_output_within_the_caps_passes_whole(tmp_path: Path) -> None:
    script = "print('a' * (8 * 1024))\nfor _ in range(600):\n    print('b' * 99)\n"  # one line at the cap, 68 KB
    limits = OutputLimits(max_bytes=70 * KIB, max_line_bytes=8 * KIB)
    result = _result(_run_node_task(tmp_path, script, limits=limits), limits)
    assert result.overflow is None and result.exit_status == 0
    assert result.stdout.splitlines() == ["a" * 8192, *["b" * 99] * 600]


def test_the_command_reads_the_node_tasks_own_stdin(tmp_path: Path) -> None:
    labelled = _run_node_task(tmp_path, "import sys\nprint(repr(sys.stdin.read()))\n", stdin=b"hello\n")
    assert _result(labelled).stdout == "'hello\\n'\n"
