"""``--launcher slurm``: the sweep's commands run through ``srun`` instead of SSH.

The sweep opens one session per host and each runs the bundle; here the sessions' commands of
one phase are gathered (the same command within a short window) into one ``srun`` step with one
task per node, and each session gets its own node's output back (gpudiag.slurm.step), so the
sweep reads the same records as over SSH. Inside an allocation (``$SLURM_JOB_ID``) the step
``--overlap``s the job's own; outside one srun makes a job of its own (``--immediate``: it never
waits in the queue). Single commands (the pair tests' servers and clients) are one-node steps.

The bundle is staged once in a folder the nodes must share (``~/.cache/gpudiag`` by default:
shared where homes are on NFS, as on most Slurm clusters; ``--slurm-bundle-dir`` otherwise), and
only used where no one else could have written it (gpudiag.slurm.staging).

A node is not trusted: each node's output is its own task's, by Slurm's task layout and srun's
labels (never by what a task prints), and is kept within the connector's OutputLimits
(gpudiag.slurm.step).

A node srun cannot use (unknown to Slurm, down, drained outside a job, not in the job) or on
which no task ran is ``unreachable`` with Slurm's reason, or, with a fallback connector
(``--launcher-fallback ssh``), probed over SSH instead.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..bundle import Bundle
from ..errors import InputError
from ..hosts import HostSpec
from ..transport import CommandResult, Connector, RunningCommand, Session, TransportError, Unreachable
from ..transport.bounded import OutputLimits
from ..transport.fleet import FleetConnector
from ..transport.pool import SessionPool
from ..transport.ssh import SshSettings
from ..transport.sshconfig import SshOptions, resolve_all
from .commands import SlurmCommandError
from .nodelist import expand_nodelist, job_id, job_nodelist
from .nodes import NodeState, launch_problems, query_nodes
from .srunprocess import SrunProcess
from .staging import BUNDLE_CACHE, UnsafeBundleFolder, stage_bundle
from .step import SrunOptions, StepOutput, failed_hosts, srun_argv, step_results, task_layout

# Seconds past a step's own limit that the controller waits for srun (launch, output, exit).
LAUNCH_ALLOWANCE_S = 60.0
# Hosts gathered into one step at most (each waits in a sweep worker thread meanwhile).
MAX_STEP_HOSTS = 4096
# Seconds a node's time limit may differ from a gathering step's and still join it: each host runs
# with what is left of its own limit, so hosts that came a little apart ask for a little less. The
# step runs under the smallest limit of its nodes (a command may end up to this much early).
TIMEOUT_SPREAD_S = 10.0
LAUNCHERS = ("ssh", "slurm")
FALLBACKS = ("none", "ssh")


class BundleStageError(Unreachable):
    """The probe bundle could not be staged where the nodes would find it."""


class StepCancelled(TransportError):
    """The sweep was interrupted before the host's srun step started (no fallback is tried)."""

    status = "interrupted"


@dataclass(eq=False)
class _Step:
    """The nodes gathered for one srun step and, once it ran, their results."""

    key: tuple[object, ...]
    opened: float
    last_join: float
    timeout_s: float  # the smallest time limit its nodes asked for
    nodes: list[str] = field(default_factory=list)
    results: dict[str, CommandResult | TransportError] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)
    process: SrunProcess | None = None
    cancelled: bool = False
    failed: list[str] = field(default_factory=list)  # nodes srun said failed, when no task ran at all


class StepLauncher:
    """Gathers the commands the sessions run into srun steps, and runs them.

    A step gathers every node that asks for the same command while others keep joining (within
    ``gather_s`` of the last), and waits for every node whose command is expected: each host's
    first command (``expected`` at the start: the sweep's node phase runs the bundle on every
    host at once) and the next command of each session connected or prepared since (``expect``).
    So a busy controller whose threads come seconds apart still runs one phase as one step.
    Never longer than ``max_gather_s``, and expected commands that have not come
    ``max_gather_s`` after the last sign of them (a session connected or prepared) are no
    longer waited for."""

    def __init__(self, options: SrunOptions, in_allocation: bool, expected: Iterable[str] = ()) -> None:
        self._options = options
        self._in_allocation = in_allocation
        self._changed = threading.Condition()
        self._gathering: dict[tuple[object, ...], _Step] = {}
        self._running: set[_Step] = set()
        self._expected: set[str] = set(expected)  # nodes whose next command is on its way
        self._last_expected = time.monotonic()  # the last sign of one (monotonic s)

    def expect(self, node: str) -> None:
        """``node``'s next command is on its way (its session was connected or prepared):
        steps gathering now wait for it (up to ``max_gather_s``)."""
        with self._changed:
            self._expected.add(node)
            self._last_expected = time.monotonic()

    def forget(self, node: str) -> None:
        """``node``'s expected command will not come to a gathered step (it started a command
        of its own, runs elsewhere, or its session ended)."""
        with self._changed:
            self._expected.discard(node)
            self._changed.notify_all()

    def run(self, node: str, argv: Sequence[str], timeout_s: float, folder: str) -> CommandResult:
        """Run ``argv`` on ``node`` in one step with every node that asks for the same command
        (with a time limit within TIMEOUT_SPREAD_S of it) while the step gathers; the step runs
        under the smallest limit asked. Returns this node's result. Raises TransportError when no
        task ran on the node."""
        key = (tuple(argv), folder)
        with self._changed:
            found = self._gathering.get(key)
            # the first to ask launches it; a node already in it, or whose limit is far off, starts another
            leader = found is None or node in found.nodes or abs(found.timeout_s - timeout_s) > TIMEOUT_SPREAD_S
            step = _Step(key, time.monotonic(), time.monotonic(), timeout_s) if leader or found is None else found
            if leader:
                self._gathering[key] = step
            step.nodes.append(node)
            step.last_join = time.monotonic()
            step.timeout_s = min(step.timeout_s, timeout_s)
            self._expected.discard(node)
            self._changed.notify_all()
        if leader:
            self._gather(step)
            self._launch(step, list(argv), step.timeout_s, folder)
        else:
            step.done.wait()
        outcome = step.results.get(node) or Unreachable(f"{node}: the srun step ended without a result for it")
        if isinstance(outcome, TransportError):
            raise outcome
        return outcome

    def start(self, node: str, argv: Sequence[str], timeout_s: float, folder: str) -> SrunCommand:
        """Start ``argv`` on ``node`` alone, as a one-node step, and return at once; its stdin
        stays open until the command is finished or cancelled, or this process dies."""
        self.forget(node)
        command = srun_argv([node], argv, folder, timeout_s, self._options, self._in_allocation, live_stdin=True)
        return SrunCommand(node, command, self._wait_s(timeout_s), self._options.output)

    def cancel(self, node: str) -> None:
        """End the steps ``node`` is part of (Ctrl-C): srun gets TERM and ends the step."""
        with self._changed:
            steps = [step for step in (*self._gathering.values(), *self._running)
                     if node in step.nodes and not step.cancelled]  # each srun gets one TERM, whoever asks
            for step in steps:
                step.cancelled = True
            self._changed.notify_all()
        for step in steps:
            if step.process is not None:
                step.process.terminate()

    def _gather(self, step: _Step) -> None:
        """Wait until no node joined for ``gather_s`` and no expected node is still on its way
        (or ``max_gather_s`` passed), then close it."""
        with self._changed:
            while not step.cancelled:
                now = time.monotonic()
                last = step.opened + self._options.max_gather_s
                quiet = step.last_join + self._options.gather_s
                awaited_until = self._last_expected + self._options.max_gather_s if self._expected else 0.0
                if now >= last or (now >= quiet and now >= awaited_until):
                    break
                self._changed.wait(min(last, max(quiet, awaited_until)) - now)
            if self._gathering.get(step.key) is step:
                del self._gathering[step.key]
            self._running.add(step)

    def _launch(self, step: _Step, argv: list[str], timeout_s: float, folder: str) -> None:
        try:
            nodes = list(step.nodes)
            step.results = self._run_step(step, nodes, argv, timeout_s, folder)
            again = [node for node in nodes if node not in step.failed]
            if step.failed and again and not step.cancelled:  # one failed node revoked the job: once more without it
                step.results.update(self._run_step(step, again, argv, timeout_s, folder))
        finally:
            with self._changed:
                self._running.discard(step)
            step.done.set()

    def _run_step(self, step: _Step, nodes: list[str], argv: list[str], timeout_s: float,
                  folder: str) -> dict[str, CommandResult | TransportError]:
        """One srun step over ``nodes``; each node's result, from the task Slurm placed there."""
        if step.cancelled:
            return {node: StepCancelled(f"{node}: cancelled before its srun step started") for node in nodes}
        try:
            layout = task_layout(nodes)
        except InputError as error:  # Slurm knows these names; a list it cannot lay out is no node's fault
            return {node: Unreachable(f"{node}: no srun step can be laid out over these nodes: {error}")
                    for node in nodes}
        output = StepOutput(len(layout), self._options.output)
        try:
            process = SrunProcess(srun_argv(layout, argv, folder, timeout_s, self._options, self._in_allocation),
                                  output)
        except OSError as error:
            return {node: Unreachable(f"{node}: srun could not run: {error}") for node in nodes}
        with self._changed:
            step.process = process
            cancelled = step.cancelled
        if cancelled:
            process.terminate()
        end = process.wait(self._wait_s(timeout_s))
        step.failed = failed_hosts(layout, output, end)
        return step_results(layout, output, end)

    def _wait_s(self, timeout_s: float) -> float:
        queue_s = 0.0 if self._in_allocation else float(self._options.immediate_s)
        return timeout_s + self._options.kill_grace_s + LAUNCH_ALLOWANCE_S + queue_s


class SrunCommand:
    """A one-node srun step whose framed output is read as it arrives (a pair server's first
    line says where it listens), kept within ``limits``.

    Its stdin is live, as over SSH: srun forwards a pipe this process holds to the command, so
    the command sees no EOF while the controller holds it, and sees EOF once ``finish`` ended
    it, ``cancel`` was called, or the controller died (a pair server then exits instead of
    waiting for a client that will never come).
    """

    def __init__(self, node: str, argv: Sequence[str], wait_s: float, limits: OutputLimits) -> None:
        self._node = node
        self._deadline = time.monotonic() + wait_s
        self._output = StepOutput(1, limits)
        try:
            self._srun = SrunProcess(argv, self._output, live_stdin=True)
        except OSError as error:
            raise Unreachable(f"{node}: srun could not run: {error}") from error

    def first_line(self, timeout_s: float) -> str | None:
        """The first line of the command's stdout; None when it ended, or ``timeout_s`` passed,
        without one."""
        wait_s = min(timeout_s, max(0.0, self._deadline - time.monotonic()))
        return self._output.tasks[0].stdout.first_line(wait_s)

    def finish(self, timeout_s: float) -> CommandResult:
        """Wait at most ``timeout_s`` more for the step; past that its stdin is closed, and it
        is ended unless it ends on its own at that EOF. This node's result. Raises
        TransportError when no task ran on the node."""
        end = self._srun.wait(min(timeout_s, self._deadline - time.monotonic()), eof_first=True)
        outcome = step_results([self._node], self._output, end)[self._node]
        if isinstance(outcome, TransportError):
            raise outcome
        return outcome

    def send_line(self, text: str) -> None:
        """Write ``text`` and a newline to the command's stdin (through srun's). Raises ValueError
        for a line break in ``text``, TransportError when the stdin is closed (the step ended)."""
        try:
            self._srun.write_line(text)
        except OSError as error:
            raise TransportError(f"{self._node}: could not write to the command's stdin: {error}") from error

    def cancel(self) -> None:
        """Close its stdin and end the step (from any thread; returns at once)."""
        self._srun.close_stdin()
        self._srun.terminate()

    def running(self) -> bool:
        """True until srun has ended."""
        return self._srun.running()


class SlurmSession:
    """A host's session whose commands run through srun (or over SSH once srun could not reach
    it, with a fallback)."""

    def __init__(self, host: HostSpec, launcher: StepLauncher, stage: StageFunction,
                 fallback: Connector | None) -> None:
        self._host = host
        self._launcher = launcher
        self._stage = stage
        self._fallback = fallback
        self._fallback_session: Session | None = None
        self._bundle: Bundle | None = None
        self._folder = "."
        self._lock = threading.Lock()
        self._started: set[SrunCommand] = set()
        launcher.expect(host.host)

    def prepare(self, bundle: Bundle) -> None:
        """Stage the bundle where the nodes see it (once for all hosts); the next command is
        awaited by the step gathering for it."""
        self._bundle = bundle
        try:
            self._folder = self._stage(bundle)
        except BundleStageError:
            self._launcher.forget(self._host.host)
            raise
        if self._fallback_session is not None:
            self._fallback_session.prepare(bundle)
        else:
            self._launcher.expect(self._host.host)

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        """Run ``argv`` on the node in the sweep phase's srun step. Raises TransportError when
        srun could not run it there and there is no fallback (or the fallback fails too)."""
        if self._fallback_session is not None:
            self._launcher.forget(self._host.host)
            return self._fallback_session.run(argv, timeout_s)
        try:
            return self._launcher.run(self._host.host, argv, timeout_s, self._folder)
        except Unreachable as error:
            return self._over_fallback(error).run(argv, timeout_s)

    def start(self, argv: Sequence[str], timeout_s: float) -> RunningCommand:
        """Start ``argv`` on the node as a one-node step (or over the fallback); its stdin stays
        open until the command is finished or cancelled, or the controller dies."""
        if self._fallback_session is not None:
            self._launcher.forget(self._host.host)
            return self._fallback_session.start(argv, timeout_s)
        command = self._launcher.start(self._host.host, argv, timeout_s, self._folder)
        with self._lock:
            self._started = {started for started in self._started if started.running()} | {command}
        return command

    def is_open(self) -> bool:
        return self._fallback_session.is_open() if self._fallback_session is not None else True

    def cancel(self) -> None:
        self._launcher.forget(self._host.host)
        self._launcher.cancel(self._host.host)
        with self._lock:
            started = list(self._started)
        for command in started:
            command.cancel()
        if self._fallback_session is not None:
            self._fallback_session.cancel()

    def close(self) -> None:
        self._launcher.forget(self._host.host)
        if self._fallback_session is not None:
            self._fallback_session.close()

    def _over_fallback(self, error: Unreachable) -> Session:
        """The fallback session, opened and prepared; re-raises ``error`` without a fallback."""
        if self._fallback is None or isinstance(error, BundleStageError):
            raise error
        session = self._fallback.connect(self._host)
        if self._bundle is not None:
            session.prepare(self._bundle)
        self._fallback_session = session
        return session


class StageFunction(Protocol):
    def __call__(self, bundle: Bundle) -> str: ...


class SlurmConnector:
    """Sessions whose commands run through srun on the hosts Slurm can run them on; the others
    are unreachable with Slurm's reason, or reached through ``fallback`` (an SSH connector)."""

    def __init__(self, problems: Mapping[str, str], options: SrunOptions, in_allocation: bool,
                 fallback: Connector | None = None, addresses: Mapping[str, str] | None = None,
                 hosts: Iterable[str] = ()) -> None:
        """``hosts``: the nodes the sweep will run its first command on (the first steps wait
        for those srun can run on)."""
        self._problems = dict(problems)
        self._options = options
        self._fallback = fallback
        self._launcher = StepLauncher(options, in_allocation, [host for host in hosts if host not in self._problems])
        self._stage_lock = threading.Lock()
        self._staged: dict[str, str] = {}
        self.addresses: dict[str, str] = dict(addresses or {})

    @classmethod
    def for_hosts(cls, hosts: Sequence[HostSpec], options: SrunOptions, environ: Mapping[str, str],
                  fallback: Connector | None = None, scontrol: str = "scontrol") -> SlurmConnector:
        """Ask Slurm about ``hosts`` once: which it can run on here (inside the job of
        ``environ``, if any) and their addresses. A controller that does not answer makes every
        host's problem that. Raises InputError when srun is not installed."""
        if shutil.which(options.srun) is None:
            raise InputError(f"--launcher slurm: {options.srun} not found on PATH; install Slurm's client "
                             f"commands or use --launcher ssh")
        nodelist = job_nodelist(environ)
        allocation = frozenset(expand_nodelist(nodelist)) if job_id(environ) and nodelist else None
        names = [host.host for host in hosts]
        nodes: dict[str, NodeState] = {}
        try:
            nodes = query_nodes(names, scontrol=scontrol)
            problems = launch_problems(names, nodes, allocation)
        except SlurmCommandError as error:
            problems = {name: f"Slurm could not be asked about {name}: {error}" for name in names}
        addresses = {host.label: (nodes[host.host].address if host.host in nodes else None) or host.host
                     for host in hosts}
        return cls(problems, options, allocation is not None, fallback, addresses, names)

    def connect(self, host: HostSpec, within_s: float | None = None) -> Session:
        """A session on ``host``. Raises TransportError when srun cannot run there and there is
        no fallback (or the fallback cannot reach it either, within ``within_s`` seconds)."""
        problem = self._problems.get(host.host)
        if problem is not None:
            if self._fallback is None:
                raise Unreachable(problem)
            return self._fallback.connect(host, within_s)
        return SlurmSession(host, self._launcher, self._stage, self._fallback)

    def close(self) -> None:
        if self._fallback is not None:
            self._fallback.close()

    def _stage(self, bundle: Bundle) -> str:
        """The staged bundle's folder (staged once). Raises BundleStageError when it cannot be
        staged, or the folder is not ours alone (its message names it and the fix)."""
        with self._stage_lock:
            staged = self._staged.get(bundle.content_hash)
            if staged is None:
                folder = Path(self._options.bundle_dir) if self._options.bundle_dir else Path.home() / BUNDLE_CACHE
                try:
                    staged = str(stage_bundle(bundle, folder.absolute()))
                except UnsafeBundleFolder as error:
                    raise BundleStageError(str(error)) from error
                except OSError as error:
                    raise BundleStageError(f"could not stage the probe bundle in {folder}: {error}") from error
                self._staged[bundle.content_hash] = staged
            return staged


def slurm_connector(hosts: Sequence[HostSpec], ssh: SshOptions, settings: SshSettings, environ: Mapping[str, str],
                    fallback: str = "none", bundle_dir: str | None = None, fanout: int = 64,
                    output: OutputLimits | None = None) -> tuple[SessionPool, dict[str, str], int]:
    """The sweep's connector for ``--launcher slurm`` (pooled, as the link phase expects), each
    host's address as Slurm has it (NodeAddr, for the pair tests), and the sweep's fan-out: every
    host at once (up to MAX_STEP_HOSTS), so one phase is one srun step (srun does the fan-out).
    ``fallback`` ``ssh`` reaches the hosts srun cannot over SSH, resolved as ``--launcher ssh``
    does. ``output``: the caps on each node's output (default: the SSH settings' own). Raises
    InputError for an unknown fallback or a missing srun."""
    if fallback not in FALLBACKS:
        raise InputError(f"--launcher-fallback {fallback!r}: expected one of {', '.join(FALLBACKS)}")
    over_ssh: FleetConnector | None = None
    if fallback == "ssh":
        over_ssh = FleetConnector(resolve_all([host for host in hosts if not host.is_local], ssh), ssh, settings)
    limits = output or settings.output
    slurm = SlurmConnector.for_hosts(hosts, SrunOptions(bundle_dir=bundle_dir, output=limits), environ, over_ssh)
    return SessionPool(slurm), slurm.addresses, max(fanout, min(len(hosts), MAX_STEP_HOSTS))
