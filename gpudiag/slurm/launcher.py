"""``--launcher slurm``: the sweep's commands run through ``srun`` instead of SSH.

The sweep opens one session per host and each runs the bundle; here the sessions' commands of
one phase are gathered (the same command within a short window) into one ``srun`` step with one
task per node, and each session gets its own node's output back (gpudiag.slurm.step), so the
sweep reads the same records as over SSH. Inside an allocation (``$SLURM_JOB_ID``) the step
``--overlap``s the job's own; outside one srun makes a job of its own (``--immediate``: it never
waits in the queue). Single commands (the pair tests' servers and clients) are one-node steps.

The bundle is staged once in a folder the nodes must share (``~/.cache/gpudiag`` by default:
shared where homes are on NFS, as on most Slurm clusters; ``--slurm-bundle-dir`` otherwise).

A node srun cannot use (unknown to Slurm, down, drained outside a job, not in the job) or on
which no task ran is ``unreachable`` with Slurm's reason, or, with a fallback connector
(``--launcher-fallback ssh``), probed over SSH instead.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from ..bundle import Bundle
from ..errors import InputError
from ..hosts import HostSpec
from ..sshconfig import SshOptions, resolve_all
from ..transport import CommandResult, OutputWatch, RunningCommand, Session, TransportError, Unreachable
from ..transport.fleet import FleetConnector
from ..transport.pool import SessionPool
from ..transport.ssh import SshSettings
from .commands import SlurmCommandError
from .nodelist import expand_nodelist, job_id, job_nodelist
from .nodes import NodeState, launch_problems, query_nodes
from .step import SrunOptions, StepEnd, StepOutput, failed_nodes, srun_argv, step_results

# Seconds past a step's own limit that the controller waits for srun (launch, output, exit).
LAUNCH_ALLOWANCE_S = 60.0
# Seconds srun gets to end its step after TERM before it is killed.
SRUN_TERM_WAIT_S = 10.0
BUNDLE_CACHE = Path(".cache") / "gpudiag"
# Hosts gathered into one step at most (each waits in a sweep worker thread meanwhile).
MAX_STEP_HOSTS = 4096
LAUNCHERS = ("ssh", "slurm")
FALLBACKS = ("none", "ssh")


class Connector(Protocol):
    """What opens sessions (gpudiag.sweep.Connector): the SSH fallback."""

    def connect(self, host: HostSpec) -> Session: ...

    def close(self) -> None: ...


class BundleStageError(Unreachable):
    """The probe bundle could not be staged where the nodes would find it."""


class StepCancelled(TransportError):
    """The sweep was interrupted before the host's srun step started (no fallback is tried)."""

    status = "interrupted"


def stage_bundle(bundle: Bundle, folder: Path) -> Path:
    """Copy the bundle into ``folder/bundle-<hash>`` unless a complete copy is there: a staging
    folder of its own renamed into place, so no node ever sees half a bundle (and concurrent
    controllers sharing the folder keep one copy). Returns the bundle's folder. Raises OSError."""
    final = folder / f"bundle-{bundle.content_hash[:16]}"
    if (final / ".complete").exists():
        return final
    folder.mkdir(parents=True, exist_ok=True)
    staging = folder / f"{final.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        for relative, data in bundle.contents.items():
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        (staging / ".complete").write_text(bundle.content_hash + "\n")
        staging.chmod(0o755)
        os.rename(staging, final)
    except OSError:
        if not (final / ".complete").exists():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone when renamed; the loser of a race removes its own
    return final


@dataclass(eq=False)
class _Step:
    """The nodes gathered for one srun step and, once it ran, their results."""

    key: tuple[object, ...]
    opened: float
    last_join: float
    nodes: list[str] = field(default_factory=list)
    results: dict[str, CommandResult | TransportError] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)
    process: subprocess.Popen[bytes] | None = None
    cancelled: bool = False
    failed: list[str] = field(default_factory=list)  # nodes srun said failed, when no task ran at all


class StepLauncher:
    """Gathers the commands the sessions run into srun steps, and runs them."""

    def __init__(self, options: SrunOptions, in_allocation: bool) -> None:
        self._options = options
        self._in_allocation = in_allocation
        self._changed = threading.Condition()
        self._gathering: dict[tuple[object, ...], _Step] = {}
        self._running: set[_Step] = set()

    def run(self, node: str, argv: Sequence[str], timeout_s: float, folder: str) -> CommandResult:
        """Run ``argv`` on ``node`` in one step with every node that asks for the same command
        within the gathering window; returns this node's result. Raises TransportError when no
        task ran on the node."""
        key = (tuple(argv), timeout_s, folder)
        with self._changed:
            found = self._gathering.get(key)
            leader = found is None or node in found.nodes  # the first to ask launches it
            step = _Step(key, time.monotonic(), time.monotonic()) if leader or found is None else found
            if leader:
                self._gathering[key] = step
            step.nodes.append(node)
            step.last_join = time.monotonic()
            self._changed.notify_all()
        if leader:
            self._gather(step)
            self._launch(step, list(argv), timeout_s, folder)
        else:
            step.done.wait()
        outcome = step.results.get(node) or Unreachable(f"{node}: the srun step ended without a result for it")
        if isinstance(outcome, TransportError):
            raise outcome
        return outcome

    def start(self, node: str, argv: Sequence[str], timeout_s: float, folder: str) -> SrunCommand:
        """Start ``argv`` on ``node`` alone, as a one-node step, and return at once."""
        command = srun_argv([node], argv, folder, timeout_s, self._options, self._in_allocation)
        return SrunCommand(node, command, self._wait_s(timeout_s))

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
                _terminate(step.process)

    def _gather(self, step: _Step) -> None:
        """Wait until no node joined for ``gather_s`` (or ``max_gather_s`` passed), then close it."""
        with self._changed:
            while not step.cancelled:
                now = time.monotonic()
                end = min(step.last_join + self._options.gather_s, step.opened + self._options.max_gather_s)
                if now >= end:
                    break
                self._changed.wait(end - now)
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
        if step.cancelled:
            return {node: StepCancelled(f"{node}: cancelled before its srun step started") for node in nodes}
        command = srun_argv(nodes, argv, folder, timeout_s, self._options, self._in_allocation)
        started = time.monotonic()
        try:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, start_new_session=True)
        except OSError as error:
            return {node: Unreachable(f"{node}: srun could not run: {error}") for node in nodes}
        with self._changed:
            step.process = process
            cancelled = step.cancelled
        if cancelled:
            _terminate(process)
        stdout, stderr, killed = _communicate(process, self._wait_s(timeout_s))
        output = StepOutput()
        for line in stdout.splitlines():
            output.feed(line)
        end = StepEnd(process.returncode, stderr.decode(errors="replace"), killed, time.monotonic() - started)
        step.failed = failed_nodes(nodes, output, end)
        return step_results(nodes, output, end)

    def _wait_s(self, timeout_s: float) -> float:
        queue_s = 0.0 if self._in_allocation else float(self._options.immediate_s)
        return timeout_s + self._options.kill_grace_s + LAUNCH_ALLOWANCE_S + queue_s


class SrunCommand:
    """A one-node srun step whose framed output is read as it arrives (a pair server's first
    line says where it listens)."""

    def __init__(self, node: str, argv: Sequence[str], wait_s: float) -> None:
        self._node = node
        self._started = time.monotonic()
        self._deadline = self._started + wait_s
        self._output = StepOutput()
        self._watch = OutputWatch()
        self._stderr = bytearray()
        try:
            self._process = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, start_new_session=True)
        except OSError as error:
            raise Unreachable(f"{node}: srun could not run: {error}") from error
        assert self._process.stdout is not None and self._process.stderr is not None
        self._readers = [threading.Thread(target=self._read_stdout, args=(self._process.stdout,), daemon=True),
                         threading.Thread(target=self._read_stderr, args=(self._process.stderr,), daemon=True)]
        for reader in self._readers:
            reader.start()

    def first_line(self, timeout_s: float) -> str | None:
        return self._watch.first_line(min(timeout_s, max(0.0, self._deadline - time.monotonic())))

    def finish(self, timeout_s: float) -> CommandResult:
        """Wait at most ``timeout_s`` more for the step (then end it); this node's result.
        Raises TransportError when no task ran on the node."""
        wait_s = max(0.0, min(timeout_s, self._deadline - time.monotonic()))
        killed = False
        try:
            self._process.wait(wait_s)
        except subprocess.TimeoutExpired:
            killed = True
            _end(self._process)
        for reader in self._readers:
            reader.join(5.0)
        end = StepEnd(self._process.returncode, self._stderr.decode(errors="replace"), killed,
                      time.monotonic() - self._started)
        outcome = step_results([self._node], self._output, end)[self._node]
        if isinstance(outcome, TransportError):
            raise outcome
        return outcome

    def cancel(self) -> None:
        _terminate(self._process)

    def running(self) -> bool:
        """True until srun has ended."""
        return self._process.poll() is None

    def _read_stdout(self, stream: IO[bytes]) -> None:
        for line in iter(stream.readline, b""):
            fed = self._output.feed(line)
            if fed is not None:
                self._watch.feed(fed[1])
        self._watch.end()

    def _read_stderr(self, stream: IO[bytes]) -> None:
        for chunk in iter(lambda: stream.read(65536), b""):
            self._stderr += chunk


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

    def prepare(self, bundle: Bundle) -> None:
        """Stage the bundle where the nodes see it (once for all hosts)."""
        self._bundle = bundle
        self._folder = self._stage(bundle)
        if self._fallback_session is not None:
            self._fallback_session.prepare(bundle)

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        """Run ``argv`` on the node in the sweep phase's srun step. Raises TransportError when
        srun could not run it there and there is no fallback (or the fallback fails too)."""
        if self._fallback_session is not None:
            return self._fallback_session.run(argv, timeout_s)
        try:
            return self._launcher.run(self._host.host, argv, timeout_s, self._folder)
        except Unreachable as error:
            return self._over_fallback(error).run(argv, timeout_s)

    def start(self, argv: Sequence[str], timeout_s: float) -> RunningCommand:
        if self._fallback_session is not None:
            return self._fallback_session.start(argv, timeout_s)
        command = self._launcher.start(self._host.host, argv, timeout_s, self._folder)
        with self._lock:
            self._started = {started for started in self._started if started.running()} | {command}
        return command

    def is_open(self) -> bool:
        return self._fallback_session.is_open() if self._fallback_session is not None else True

    def cancel(self) -> None:
        self._launcher.cancel(self._host.host)
        with self._lock:
            started = list(self._started)
        for command in started:
            command.cancel()
        if self._fallback_session is not None:
            self._fallback_session.cancel()

    def close(self) -> None:
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
                 fallback: Connector | None = None, addresses: Mapping[str, str] | None = None) -> None:
        self._problems = dict(problems)
        self._options = options
        self._fallback = fallback
        self._launcher = StepLauncher(options, in_allocation)
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
        return cls(problems, options, allocation is not None, fallback, addresses)

    def connect(self, host: HostSpec) -> Session:
        """A session on ``host``. Raises TransportError when srun cannot run there and there is
        no fallback (or the fallback cannot reach it either)."""
        problem = self._problems.get(host.host)
        if problem is not None:
            if self._fallback is None:
                raise Unreachable(problem)
            return self._fallback.connect(host)
        return SlurmSession(host, self._launcher, self._stage, self._fallback)

    def close(self) -> None:
        if self._fallback is not None:
            self._fallback.close()

    def _stage(self, bundle: Bundle) -> str:
        with self._stage_lock:
            staged = self._staged.get(bundle.content_hash)
            if staged is None:
                folder = Path(self._options.bundle_dir) if self._options.bundle_dir else Path.home() / BUNDLE_CACHE
                try:
                    staged = str(stage_bundle(bundle, folder.absolute()))
                except OSError as error:
                    raise BundleStageError(f"could not stage the probe bundle in {folder}: {error}") from error
                self._staged[bundle.content_hash] = staged
            return staged


def slurm_connector(hosts: Sequence[HostSpec], ssh: SshOptions, settings: SshSettings, environ: Mapping[str, str],
                    fallback: str = "none", bundle_dir: str | None = None,
                    fanout: int = 64) -> tuple[SessionPool, dict[str, str], int]:
    """The sweep's connector for ``--launcher slurm`` (pooled, as the link phase expects), each
    host's address as Slurm has it (NodeAddr, for the pair tests), and the sweep's fan-out: every
    host at once (up to MAX_STEP_HOSTS), so one phase is one srun step (srun does the fan-out).
    ``fallback`` ``ssh`` reaches the hosts srun cannot over SSH, resolved as ``--launcher ssh``
    does. Raises InputError for an unknown fallback or a missing srun."""
    if fallback not in FALLBACKS:
        raise InputError(f"--launcher-fallback {fallback!r}: expected one of {', '.join(FALLBACKS)}")
    over_ssh: FleetConnector | None = None
    if fallback == "ssh":
        over_ssh = FleetConnector(resolve_all([host for host in hosts if not host.is_local], ssh), ssh, settings)
    slurm = SlurmConnector.for_hosts(hosts, SrunOptions(bundle_dir=bundle_dir), environ, over_ssh)
    return SessionPool(slurm), slurm.addresses, max(fanout, min(len(hosts), MAX_STEP_HOSTS))


def _communicate(process: subprocess.Popen[bytes], wait_s: float) -> tuple[bytes, bytes, bool]:
    """srun's stdout and stderr once it ends; after ``wait_s`` it is ended (TERM, then KILL).
    Returns (stdout, stderr, whether it had to be ended)."""
    try:
        stdout, stderr = process.communicate(timeout=wait_s)
        return stdout, stderr, False
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
        try:
            stdout, stderr = process.communicate(timeout=SRUN_TERM_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        return stdout, stderr, True


def _end(process: subprocess.Popen[bytes]) -> None:
    """TERM to srun (it ends its step on the nodes), KILL after SRUN_TERM_WAIT_S; returns once it ended."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(SRUN_TERM_WAIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _terminate(process: subprocess.Popen[bytes]) -> None:
    """``_end`` from a thread of its own, so a cancel never blocks."""
    threading.Thread(target=_end, args=(process,), daemon=True).start()
