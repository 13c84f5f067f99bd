"""Running the probe bundle on one node and reading its records back.

The same function serves ``gpudiag probe`` (this machine) and, through other transports,
the fleet sweep: build the bundle's command line from ``ProbeOptions``, run it under a
deadline, parse the JSON lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..errors import ProbeOutputError
from ..records import DEFAULT_PROBE_NAMES, ProbeResult, StrayOutput, read_probe_output, stray_only_error
from ..schema.text import one_line
from ..transport import CommandResult
from .nodecheck import check_host_records

# Time the node's Python needs to start and import torch, on top of the probes' own deadline.
STARTUP_ALLOWANCE_S = 30.0
# The bundle's own watchdog ends it this long after its deadline.
BUNDLE_GRACE_S = 5.0
EXIT_DEADLINE = 124
# How much of a program's last line of error output a host's error quotes.
LAST_LINE_CHARS = 300


@dataclass(frozen=True)
class ProbeOptions:
    """What to measure and how; the options of ``gpudiag probe``.

    ``names``: probes to run (empty: DEFAULT_PROBE_NAMES, every probe but xid). ``duration_s``:
    seconds of timed load per probe and GPU. ``max_gpu_mem_mib``: cap on GPU memory one probe may
    take on one GPU (MiB). ``deadline_s``: the bundle's overall deadline on the node (seconds).
    ``python``: the node's interpreter that runs the bundle. ``pause``: a job paused for
    mitigation holds the GPUs (the bundle's ``--pause``: each GPU's probes sized to the memory
    the job left, in a child process that sees that GPU alone; probes/pause.py).
    """

    names: tuple[str, ...] = ()
    duration_s: float = 1.0
    max_gpu_mem_mib: int | None = None
    dtype: str = "bf16"
    sequential: bool = False
    deadline_s: float = 600.0
    python: str = "python3"
    pause: bool = False

    def bundle_argv(self) -> list[str]:
        """The command that runs the bundle from its root folder."""
        argv = [self.python, "-m", "probes", *self.names, "--duration", f"{self.duration_s:g}",
                "--dtype", self.dtype, "--deadline", f"{self.deadline_s:g}"]
        if self.max_gpu_mem_mib is not None:
            argv += ["--max-gpu-mem", str(self.max_gpu_mem_mib)]
        if self.sequential:
            argv.append("--sequential")
        if self.pause:
            argv.append("--pause")
        return argv

    @property
    def timeout_s(self) -> float:
        """How long the controller waits for the whole command before killing it."""
        return self.deadline_s + BUNDLE_GRACE_S + STARTUP_ALLOWANCE_S


@dataclass(frozen=True)
class HostProbe:
    """The records one node printed, and how its run of the bundle ended (seconds).

    ``stray`` holds the stdout lines that were no record (a library's print or warning), None when
    there were none: reported beside the records, never a reason to drop them.
    """

    results: tuple[ProbeResult, ...]
    exit_status: int | None
    timed_out: bool
    stderr: str
    duration_s: float
    stray: StrayOutput | None = None

    @property
    def complete(self) -> bool:
        """True when the bundle finished on its own and every record is ok or skipped."""
        return (self.exit_status == 0 and not self.timed_out
                and all(result.status != "error" for result in self.results))


class CommandRunner(Protocol):
    """What probe_host needs of a session: run a command under a time limit (seconds)."""

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult: ...


def probe_host(session: CommandRunner, options: ProbeOptions, source: str) -> HostProbe:
    """Run the bundle through ``session`` and parse what it printed.

    A node that says nothing has not passed: each probe asked for that printed no record at all
    gets an ``error`` record of its own (``unanswered``). Every record is checked against its
    schema as it is read (gpudiag.records), then the node's records against its own facts
    (gpudiag.run.nodecheck: one record per measurement, no GPU it lacks, values within physical
    ceilings, no GPU left out by a per-GPU probe). Stray lines among the records are kept in
    ``HostProbe.stray``. Raises ProbeOutputError when the output passed a cap of the session's
    OutputLimits, when the bundle printed no record at all (unless it ran out of time; its
    stderr's last line, or its stray output, is the reason), or when a JSON object it printed is
    not a valid record.
    """
    outcome = session.run(options.bundle_argv(), options.timeout_s)
    if outcome.overflow is not None:
        raise ProbeOutputError(f"{source}: {outcome.overflow}")
    output = read_probe_output(outcome.stdout, source)
    ran_out = outcome.timed_out or outcome.exit_status == EXIT_DEADLINE
    if not output.results and not ran_out:
        if output.stray is not None:
            raise stray_only_error(output.stray)
        raise ProbeOutputError(f"{source}: the probe bundle exited with status {outcome.exit_status} "
                               f"and printed no record at all: {last_line(outcome.stderr)}")
    checked = check_host_records(output.results, source)
    results = (*checked, *unanswered(options, checked, ran_out))
    return HostProbe(results=results, exit_status=outcome.exit_status, timed_out=outcome.timed_out,
                     stderr=outcome.stderr, duration_s=outcome.duration_s, stray=output.stray)


def unanswered(options: ProbeOptions, results: Sequence[ProbeResult], ran_out: bool) -> list[ProbeResult]:
    """An ``error`` record for each probe ``options`` asked for that has no record among
    ``results``: a probe the node never answered was not measured, and is never a pass."""
    printed = {result.probe for result in results}
    why = ("the run ended at its deadline before this probe printed a record" if ran_out
           else "the node printed no record of this probe, which was asked for")
    return [ProbeResult(probe=name, device="host", metric="record", value=None, unit=None, status="error",
                        reason=why) for name in options.names or DEFAULT_PROBE_NAMES if name not in printed]


def last_line(text: str) -> str:
    """The last non-blank line of ``text`` (a program's error output, which a node wrote: cleaned
    of control characters and cut short), or a placeholder."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return one_line(lines[-1], LAST_LINE_CHARS) if lines else "(no error output)"

