"""One ``srun`` step across nodes: its command line, and its output split back per node.

Each task runs ``nodetask.py`` (by the node's Python), which runs the command in the staged
bundle folder and frames its output into short tagged lines; ``srun --label`` prefixes each
with the task number. ``StepOutput`` undoes both, and ``step_results`` gives every node its own
``CommandResult`` (what the sweep reads over SSH) or, for a node where no task ran, a
``TransportError`` with srun's reason.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..hosts import fold_hosts
from ..transport import CommandResult, TransportError, Unreachable

# Seconds past a command's own limit before Slurm's step time limit ends it (the node task ends
# it first; this is the backstop when the controller and the node task are both gone).
STEP_SLACK_S = 60.0
_LABEL = re.compile(rb" *(\d+): ?(.*)")
# srun's own lines that say a node failed, or a task on it never started.
_NODE_FAILURE = re.compile(r"node failure|failed on node|launch fail|unable to contact|not responding|"
                           r"communication connection failure|protocol authentication", re.IGNORECASE)
# Lines of srun's that say nothing about a node (shown only when nothing else explains a failure).
_SRUN_NOISE = re.compile(r"^srun: (Job step aborted|forcing job termination|got SIGCONT|"
                         r"error: \S+: task \d+: (Exited with exit code|Killed|Terminated))")


@dataclass(frozen=True)
class SrunOptions:
    """How steps are launched: the srun program, the folder the nodes share where the bundle is
    staged (None: ``~/.cache/gpudiag``), seconds between TERM and KILL of a command past its
    limit, seconds srun may wait for nodes outside an allocation (``--immediate``), and the
    window (s) in which the sessions of one sweep phase are gathered into one step."""

    srun: str = "srun"
    bundle_dir: str | None = None
    kill_grace_s: float = 5.0
    immediate_s: int = 60
    gather_s: float = 0.3
    max_gather_s: float = 5.0
    job_name: str = "gpudiag"


@functools.cache
def node_task_source() -> str:
    """The text of nodetask.py, run on each node with ``python -c``."""
    return Path(__file__).with_name("nodetask.py").read_text(encoding="utf-8")


def step_minutes(timeout_s: float, grace_s: float) -> int:
    """The step's Slurm time limit in whole minutes (``--time``): the command's limit, its
    grace and STEP_SLACK_S, rounded up."""
    return max(1, math.ceil((timeout_s + grace_s + STEP_SLACK_S) / 60.0))


def srun_argv(nodes: Sequence[str], command: Sequence[str], folder: str, timeout_s: float, options: SrunOptions,
              in_allocation: bool) -> list[str]:
    """The srun command that runs ``command`` (its first word the node's Python) once on each
    of ``nodes`` from ``folder``: one task per node; ``--overlap`` inside an allocation (the
    job's own steps may hold the CPUs), ``--immediate`` outside one (never wait in the queue);
    ``--kill-on-bad-exit=0`` so a node whose probes fail does not end the others'."""
    count = len(nodes)
    argv = [options.srun, f"--nodes={count}", f"--ntasks={count}", "--ntasks-per-node=1",
            f"--nodelist={fold_hosts(nodes)}", "--kill-on-bad-exit=0",
            f"--time={step_minutes(timeout_s, options.kill_grace_s)}", "--label", "--input=none",
            f"--job-name={options.job_name}"]
    argv.append("--overlap" if in_allocation else f"--immediate={options.immediate_s}")
    return [*argv, command[0], "-c", node_task_source(), folder, f"{timeout_s:g}", f"{options.kill_grace_s:g}",
            "--", *command]


@dataclass
class TaskOutput:
    """What one task printed, unframed. ``node`` from its ``@`` line; ``exit_status`` None when
    its ``X`` line never came (the task was killed or its node failed); ``other``: labelled
    lines that were not framed (slurmstepd's messages about the task)."""

    node: str | None = None
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    timed_out: bool = False
    exit_status: int | None = None
    other: list[str] = field(default_factory=list)


class StepOutput:
    """The labelled, framed stdout of a step, read line by line as it arrives."""

    def __init__(self) -> None:
        self.tasks: dict[int, TaskOutput] = {}
        self.unlabelled: list[str] = []

    def feed(self, line: bytes) -> tuple[TaskOutput, bytes] | None:
        """Take one line of srun's stdout (with or without its newline); returns the task and
        the stdout bytes it added, or None when it added none."""
        line = line.rstrip(b"\n")
        match = _LABEL.fullmatch(line)
        if match is None:
            if line.strip():
                self.unlabelled.append(line.decode(errors="replace"))
            return None
        task = self.tasks.setdefault(int(match.group(1)), TaskOutput())
        return _apply(task, match.group(2))

    def by_node(self) -> dict[str, TaskOutput]:
        """Each task that said its node, by node name."""
        return {task.node: task for task in self.tasks.values() if task.node}


def _apply(task: TaskOutput, payload: bytes) -> tuple[TaskOutput, bytes] | None:
    tag, body = payload[:2], payload[2:]
    if tag in (b"O+", b"O=", b"O-"):
        added = body + (b"\n" if tag == b"O=" else b"")
        task.stdout += added
        return task, added
    if tag in (b"E+", b"E=", b"E-"):
        task.stderr += body + (b"\n" if tag == b"E=" else b"")
    elif payload[:1] == b"@" and task.node is None:
        task.node = payload[1:].decode(errors="replace").strip()
    elif payload == b"T":
        task.timed_out = True
    elif payload[:2] == b"X " and payload[2:].strip().isdigit():
        task.exit_status = int(payload[2:])
    else:
        task.other.append(payload.decode(errors="replace"))
    return None


@dataclass(frozen=True)
class StepEnd:
    """How the srun process ended: its exit status, its stderr, whether the controller had to
    end it (past its time), and its wall time (s)."""

    exit_status: int | None
    stderr: str
    killed: bool
    duration_s: float


def step_results(nodes: Sequence[str], output: StepOutput, end: StepEnd) -> dict[str, CommandResult | TransportError]:
    """Each node's result: its task's output as a CommandResult, or Unreachable with srun's
    reason when no task ran there (the node failed, srun could not get it, srun itself failed)."""
    tasks = output.by_node()
    results: dict[str, CommandResult | TransportError] = {}
    for node in nodes:
        task = tasks.get(node)
        if task is None:
            results[node] = Unreachable(f"{node}: srun did not run the probes there: {_reason(node, output, end)}")
            continue
        stderr = task.stderr.decode(errors="replace")
        extra = task.other + (_lines_naming(node, end.stderr) if task.exit_status is None else [])
        if extra:
            stderr += "".join(f"{line}\n" for line in extra)
        timed_out = task.timed_out or (end.killed and task.exit_status is None)
        results[node] = CommandResult(exit_status=task.exit_status, stdout=task.stdout.decode(errors="replace"),
                                      stderr=stderr, timed_out=timed_out, duration_s=end.duration_s)
    return results


def failed_nodes(nodes: Sequence[str], output: StepOutput, end: StepEnd) -> list[str]:
    """The nodes srun's stderr says failed, when no task of the step ran at all (Slurm revokes a
    whole allocation for one failed node): the step is worth running again without them."""
    if output.tasks:
        return []
    return [node for node in nodes if any(_NODE_FAILURE.search(line) for line in _lines_naming(node, end.stderr))]


def _reason(node: str, output: StepOutput, end: StepEnd) -> str:
    named = [line for line in _lines_naming(node, end.stderr) if not _SRUN_NOISE.match(line)]
    if named:
        return "; ".join(named[-3:])
    if end.killed:
        return f"no task reported from it before srun was ended after {end.duration_s:.0f} s"
    lines = [line for line in end.stderr.splitlines() if line.strip() and not _SRUN_NOISE.match(line)]
    lines += output.unlabelled
    if lines:
        return "; ".join(lines[-3:])
    return f"srun exited with status {end.exit_status} without starting a task there"


def _lines_naming(node: str, text: str) -> list[str]:
    """The lines of ``text`` that name ``node`` as a word."""
    pattern = re.compile(rf"(?<![\w.-]){re.escape(node)}(?![\w-])")
    return [line.strip() for line in text.splitlines() if pattern.search(line)]

