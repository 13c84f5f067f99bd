"""One ``srun`` step across nodes: its command line, and its output split back per node.

Each task runs ``nodetask.py`` (by the node's Python), which runs the command in the staged
bundle folder and frames its output into short tagged lines; ``srun --label`` prefixes each
with the task number. ``StepOutput`` undoes both, and ``step_results`` gives every node its own
``CommandResult`` (what the sweep reads over SSH) or, for a node where no task ran, a
``TransportError`` with srun's reason.

A node is not trusted. Which node a task's output belongs to is decided by Slurm, never by what
the task prints: the step lays its tasks out with ``--distribution=arbitrary`` over the folded
node list, so task *i* runs on the *i*-th node of that list as Slurm expands it (``task_layout``),
and the label srun itself puts on each line names the task. The ``@NODE`` line a task prints is
only checked against that layout: a task that says it runs elsewhere is that node's
``probe_error``, and its output is used for no node. Each task's output is kept within the
step's ``OutputLimits`` (stdout whole lines up to the caps, the tail of stderr, a short tail of
unframed lines): past a cap its output is cut and its result carries ``overflow``, and the
other tasks of the step are not touched.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..hosts import fold_hosts
from ..transport import CommandResult, TransportError, Unreachable
from ..transport.bounded import BoundedOutput, OutputLimits, TailBuffer
from .nodelist import expand_nodelist

# Seconds past a command's own limit before Slurm's step time limit ends it (the node task ends
# it first; this is the backstop when the controller and the node task are both gone).
STEP_SLACK_S = 60.0
# Bytes kept of a task's labelled lines that are not framed (its Python's own errors, slurmstepd's
# messages about it), and of srun's own stderr lines.
OTHER_TAIL_BYTES = 16 * 1024
SRUN_STDERR_TAIL_BYTES = 64 * 1024
# srun's stdout lines that carry no task label, kept for an error message (each cut to its first bytes).
UNLABELLED_LINES = 20
UNLABELLED_LINE_BYTES = 512
# Characters of a task's @ line kept to name what it claimed, and of a line it printed quoted in a reason.
CLAIM_CHARS = 128
REASON_LINE_CHARS = 200
_LABEL = re.compile(rb" *(\d+): ?(.*)", re.DOTALL)
_EXIT = re.compile(rb"X (\d{1,3})")
# What the node task says when it ended a command at a cap (``V LINE`` / ``V BYTES``), in our words.
_NODE_CAPS = {b"LINE": "a line longer than", b"BYTES": "more output than"}
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
    limit, seconds srun may wait for nodes outside an allocation (``--immediate``), the window
    (s) in which the sessions of one sweep phase are gathered into one step, and the caps on
    what each node's command may print (``output``)."""

    srun: str = "srun"
    bundle_dir: str | None = None
    kill_grace_s: float = 5.0
    immediate_s: int = 60
    gather_s: float = 0.3
    max_gather_s: float = 5.0
    job_name: str = "gpudiag"
    output: OutputLimits = field(default_factory=OutputLimits)


class TaskIdentityError(TransportError):
    """A task's output cannot be its node's: it said it runs on another node than the one Slurm
    placed it on, or it flooded its output without saying where it runs. Its output is used for
    no node, and the node it ran on could not be checked."""

    status: ClassVar[str] = "probe_error"


@functools.cache
def node_task_source() -> str:
    """The text of nodetask.py, run on each node with ``python -c``."""
    return Path(__file__).with_name("nodetask.py").read_text(encoding="utf-8")


def step_minutes(timeout_s: float, grace_s: float) -> int:
    """The step's Slurm time limit in whole minutes (``--time``): the command's limit, its
    grace and STEP_SLACK_S, rounded up."""
    return max(1, math.ceil((timeout_s + grace_s + STEP_SLACK_S) / 60.0))


def task_layout(nodes: Sequence[str]) -> list[str]:
    """The node each task of a step over ``nodes`` runs on, by task id: the folded node list
    ``srun_argv`` passes, expanded in its order, which ``--distribution=arbitrary`` makes
    Slurm's task order (task 0 on the first node, ...). Raises InputError for a node name that
    is no valid node-list entry."""
    return expand_nodelist(fold_hosts(nodes))


def srun_argv(nodes: Sequence[str], command: Sequence[str], folder: str, timeout_s: float, options: SrunOptions,
              in_allocation: bool, live_stdin: bool = False) -> list[str]:
    """The srun command that runs ``command`` (its first word the node's Python) once on each
    of ``nodes`` from ``folder``: one task per node, laid out as ``task_layout`` says;
    ``--overlap`` inside an allocation (the job's own steps may hold the CPUs), ``--immediate``
    outside one (never wait in the queue); ``--kill-on-bad-exit=0`` so a node whose probes fail
    does not end the others'; ``--propagate=NONE`` so the node runs under its own resource limits,
    as over SSH, not the controller shell's (a login node's ``ulimit -v`` or ``-l`` would fail a
    node's allocations or its RDMA's locked memory). The command's stdin is srun's, forwarded to task 0, with
    ``live_stdin`` (a started command: it reaches EOF when the controller closes it or dies),
    else ``/dev/null``."""
    count = len(nodes)
    argv = [options.srun, f"--nodes={count}", f"--ntasks={count}", "--ntasks-per-node=1",
            f"--nodelist={fold_hosts(nodes)}", "--distribution=arbitrary", "--kill-on-bad-exit=0",
            "--propagate=NONE",
            f"--time={step_minutes(timeout_s, options.kill_grace_s)}", "--label",
            "--input=0" if live_stdin else "--input=none", f"--job-name={options.job_name}"]
    argv.append("--overlap" if in_allocation else f"--immediate={options.immediate_s}")
    limits = options.output
    return [*argv, command[0], "-c", node_task_source(), folder, f"{timeout_s:g}", f"{options.kill_grace_s:g}",
            str(limits.max_bytes), str(limits.max_line_bytes), "--", *command]


class TaskOutput:
    """What one task printed, unframed and bounded by the step's OutputLimits.

    ``claimed``: the node its ``@`` line named (checked against Slurm's layout, never trusted);
    ``stdout`` whole lines up to the caps; ``stderr`` and ``other`` (labelled lines that were not
    framed: its Python's own errors, slurmstepd's messages about it) their last bytes;
    ``exit_status`` None while its ``X`` line has not come (the task was killed or its node
    failed); ``node_cap`` the cap the node task ended the command at, if it did."""

    def __init__(self, limits: OutputLimits) -> None:
        self.limits = limits
        self.seen = False
        self.claimed: str | None = None
        self.stdout = BoundedOutput(limits)
        self.stderr = TailBuffer(limits.stderr_tail_bytes)
        self.other = TailBuffer(OTHER_TAIL_BYTES)
        self.other_bytes = 0
        self.timed_out = False
        self.exit_status: int | None = None
        self.node_cap: bytes | None = None
        self.cut = False  # srun gave a line of it too long to keep whole

    @property
    def overflowed(self) -> bool:
        """True once its output passed a cap (in the controller or, by its own word, on the node)."""
        return (self.stdout.overflow is not None or self.node_cap is not None or self.cut
                or self.other_bytes > self.limits.max_bytes)

    @property
    def overflow(self) -> str | None:
        """The cap its output passed, in words; None while it stayed within them."""
        if self.stdout.overflow is not None:
            return self.stdout.overflow
        if self.node_cap is not None:
            return (f"the node printed {_NODE_CAPS[self.node_cap]} the cap ({self.limits.describe()}); "
                    f"its output was cut there and the command ended")
        if self.overflowed:
            return (f"the node printed more unframed output than the cap ({self.limits.describe()}), or a line "
                    f"srun could not carry; its output was cut there")
        return None

    @property
    def settled(self) -> bool:
        """True once nothing more of it is wanted: its exit status came, or it passed a cap."""
        return self.exit_status is not None or self.overflowed

    def feed(self, payload: bytes) -> None:
        """Take one framed line of its stdout (the label removed)."""
        self.seen = True
        tag, body = payload[:2], payload[2:]
        if tag in (b"O+", b"O=", b"O-"):
            if self.node_cap is None:
                self.stdout.feed(body + b"\n" if tag == b"O=" else body)
        elif tag in (b"E+", b"E=", b"E-"):
            self.stderr.feed(body + b"\n" if tag == b"E=" else body)
        elif payload[:1] == b"@" and self.claimed is None:
            self.claimed = payload[1:CLAIM_CHARS + 1].decode(errors="replace").strip()
        elif payload == b"T":
            self.timed_out = True
        elif (exited := _EXIT.fullmatch(payload)) is not None and self.exit_status is None:
            self.exit_status = int(exited.group(1))
        elif payload[:2] == b"V " and payload[2:] in _NODE_CAPS and self.node_cap is None:
            self.node_cap = payload[2:]
        else:
            self.feed_other(payload)

    def feed_other(self, line: bytes) -> None:
        """Take one labelled line that is not framed (counted against the byte cap)."""
        self.seen = True
        self.other_bytes += len(line) + 1
        if self.other_bytes <= self.limits.max_bytes:
            self.other.feed(line + b"\n")


class StepOutput:
    """The labelled, framed output of a step of ``task_count`` tasks, read line by line as it
    arrives (from srun's stdout and stderr reader threads at once)."""

    def __init__(self, task_count: int, limits: OutputLimits | None = None) -> None:
        self.limits = limits or OutputLimits()
        self.tasks = [TaskOutput(self.limits) for _ in range(task_count)]
        self.srun_stderr = TailBuffer(SRUN_STDERR_TAIL_BYTES)
        self.unlabelled: deque[str] = deque(maxlen=UNLABELLED_LINES)
        self._lock = threading.Lock()
        self._settled = 0
        self._overflowed = 0

    def feed(self, line: bytes, cut: bool = False) -> None:
        """Take one line of srun's stdout (with or without its newline); ``cut``: the reader
        kept only its start (a line srun never writes: its own are at most 1,024 bytes)."""
        line = line.rstrip(b"\n")
        with self._lock:
            task, payload = self._task_of(line)
            if task is None:
                if line.strip():
                    self.unlabelled.append(line[:UNLABELLED_LINE_BYTES].decode(errors="replace"))
                return
            self._update(task, payload, cut, task.feed)

    def feed_stderr(self, line: bytes, cut: bool = False) -> None:
        """Take one line of srun's stderr: a task's (labelled) is that task's unframed output,
        the rest is srun's own."""
        line = line.rstrip(b"\n")
        with self._lock:
            task, payload = self._task_of(line)
            if task is None:
                self.srun_stderr.feed(line + b"\n")
                return
            self._update(task, payload, cut, task.feed_other)

    def end(self) -> None:
        """srun's stdout ended: no task prints more."""
        for task in self.tasks:
            task.stdout.end()

    def settled(self) -> bool:
        """True when some task passed a cap and every task is settled: nothing more of the
        step is wanted, and srun may be ended (the task past its cap with it)."""
        with self._lock:
            return self._overflowed > 0 and self._settled == len(self.tasks)

    def srun_lines(self) -> str:
        """srun's own stderr (its last bytes)."""
        with self._lock:
            return self.srun_stderr.text()

    def _task_of(self, line: bytes) -> tuple[TaskOutput | None, bytes]:
        """The task a line's label names and the line without it; (None, line) for no task's."""
        match = _LABEL.fullmatch(line)
        if match is None or len(match.group(1)) > 7 or int(match.group(1)) >= len(self.tasks):
            return None, line
        return self.tasks[int(match.group(1))], match.group(2)

    def _update(self, task: TaskOutput, payload: bytes, cut: bool, feed: Callable[[bytes], None]) -> None:
        settled, overflowed = task.settled, task.overflowed
        task.cut = task.cut or cut
        feed(payload)
        self._settled += task.settled and not settled
        self._overflowed += task.overflowed and not overflowed


@dataclass(frozen=True)
class StepEnd:
    """How the srun process ended: its exit status, its own stderr lines (not its tasks'),
    whether the controller had to end it (past its time), and its wall time (s)."""

    exit_status: int | None
    stderr: str
    killed: bool
    duration_s: float


def step_results(layout: Sequence[str], output: StepOutput, end: StepEnd) -> dict[str, CommandResult | TransportError]:
    """Each node's result, ``layout[i]`` from task *i* (``task_layout``): its task's output as
    a CommandResult; TaskIdentityError when the task said it runs on another node; Unreachable
    with srun's reason when no node task reported there (the node failed, srun could not get it,
    srun itself failed, the node's Python could not run the node task)."""
    results: dict[str, CommandResult | TransportError] = {}
    for task_id, node in enumerate(layout):
        task = output.tasks[task_id] if task_id < len(output.tasks) else TaskOutput(output.limits)
        if task.claimed is None and task.overflowed:
            results[node] = TaskIdentityError(f"{node}: task {task_id} of the srun step ran on {node} (Slurm's "
                                              f"layout) and never said where it runs; {task.overflow}")
        elif task.claimed is None:
            results[node] = Unreachable(f"{node}: srun did not run the probes there: "
                                        f"{_reason(node, task, output, end)}")
        elif task.claimed != node:
            results[node] = TaskIdentityError(
                f"{node}: task {task_id} of the srun step ran on {node} (Slurm's layout), but it said it runs on "
                f"{task.claimed!r}; its output was not used for any node")
        else:
            results[node] = _command_result(node, task, end)
    return results


def _command_result(node: str, task: TaskOutput, end: StepEnd) -> CommandResult:
    stderr = task.stderr.text() + task.other.text()
    if task.exit_status is None:
        stderr += "".join(f"{line}\n" for line in _lines_naming(node, end.stderr))
    timed_out = task.timed_out or (end.killed and task.exit_status is None)
    return CommandResult(exit_status=task.exit_status, stdout=task.stdout.text(), stderr=stderr,
                         timed_out=timed_out, duration_s=end.duration_s, overflow=task.overflow)


def failed_hosts(nodes: Sequence[str], output: StepOutput, end: StepEnd) -> list[str]:
    """The nodes srun's stderr says failed, when no task of the step ran at all (Slurm revokes a
    whole allocation for one failed node): the step is worth running again without them."""
    if any(task.seen for task in output.tasks):
        return []
    return [node for node in nodes if any(_NODE_FAILURE.search(line) for line in _lines_naming(node, end.stderr))]


def _reason(node: str, task: TaskOutput, output: StepOutput, end: StepEnd) -> str:
    named = [line for line in _lines_naming(node, end.stderr) if not _SRUN_NOISE.match(line)]
    own = [_printable(line) for line in task.other.text().splitlines() if line.strip()]
    if named or own:
        return "; ".join((named + own)[-3:])
    if end.killed:
        return f"no task reported from it before srun was ended after {end.duration_s:.0f} s"
    lines = [line for line in end.stderr.splitlines() if line.strip() and not _SRUN_NOISE.match(line)]
    lines += [_printable(line) for line in output.unlabelled]
    if lines:
        return "; ".join(lines[-3:])
    return f"srun exited with status {end.exit_status} without starting a task there"


def _printable(line: str) -> str:
    """A line a node printed, for a message: at most REASON_LINE_CHARS, control characters as ``?``."""
    return "".join(char if char.isprintable() else "?" for char in line.strip()[:REASON_LINE_CHARS])


def _lines_naming(node: str, text: str) -> list[str]:
    """The lines of ``text`` that name ``node`` as a word."""
    pattern = re.compile(rf"(?<![\w.-]){re.escape(node)}(?![\w-])")
    return [line.strip() for line in text.splitlines() if pattern.search(line)]
