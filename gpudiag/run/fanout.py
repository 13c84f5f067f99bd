"""A fleet sweep: the probe bundle on every host at once (bounded by the fan-out), an outcome for
every host, and the sweep document (docs/document.md).

One bad host never stops the others: every failure to reach, trust, log into or probe a host
becomes that host's status. Ctrl-C (or SIGTERM) stops launching, ends the remote probes, and
still returns what finished; hosts not finished are ``interrupted``.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..bundle import Bundle
from ..errors import ProbeOutputError, StoreError
from ..exitcodes import ExitCode, decide_exit_code
from ..findings import INTERRUPTED, SWEEP_SCHEMA, Finding, FindingViews, Kind, Severity, unchecked
from ..hosts import HostSpec
from ..records import ProbeResult
from ..schema.times import iso_time
from ..transport import CommandResult, Connector, Session, TransportError
from ..transport.cancel import cancel_all
from ..words import plural
from .hostprobe import HostProbe, ProbeOptions, last_line, probe_host
from .outcome import HostOutcome
from .progress import SweepProgress

OK = "ok"
TIMEOUT = "timeout"
PROBE_ERROR = "probe_error"
UNCHECKED = Kind.UNCHECKED
# Findings that say something could not be checked: a host, GPU or measurement, or a node pair.
NOT_CHECKED = (UNCHECKED, Kind.LINK_ERROR)
# Findings that, not confirmed, are a gap (exit 3), never a pass: the network's, the fabric's (of no
# host), and a pair's dip its re-test did not repeat (a warning that keeps neither end out of a job).
UNSETTLED_KINDS = (Kind.SLOW_NETWORK, Kind.SLOW_FABRIC_LINK, Kind.SLOW_SWITCH, Kind.SLOW_LINK)
# Exit statuses of a bundle ended by a deadline: its own watchdog and `timeout` give 124, and
# 137 is the KILL that `timeout -k` sends when TERM was not enough.
DEADLINE_EXITS = (124, 137)
# After Ctrl-C, how long running hosts get to end their remote probes and report.
CANCEL_WAIT_S = 15.0
# At the run's deadline, how long running hosts' commands are waited for as they are ended.
LATE_CANCEL_WAIT_S = 2.0
# Hosts named in a warning about hosts the store could not record (the rest are counted).
HOSTS_NAMED = 5
# A sweep id's tail: the start's fraction of a second in this many parts (four hex digits).
SWEEP_ID_TICKS = 0x10000
# The phases of a host's part of the sweep, in the words of a timeout's message. Every phase is
# inside the host's time limit (SweepOptions.command_timeout_s), counted from its start.
CONNECTING = "connecting"
COPYING = "copying the probe bundle"
PROBING = "running the probes"
# The probes get what is left of the host's time limit, under a deadline on the node (timeout -k)
# and in their reader: what they printed by then comes back (a timeout with its records). A host
# still probing this much later (a connection that hangs) is ended by the sweep's watch.
PROBE_BACKSTOP_S = 15.0
# The shortest time limit a command gets when its host's time is all but spent (seconds).
MIN_COMMAND_S = 0.5


@dataclass(frozen=True)
class SweepOptions:
    """How the sweep runs: what to probe, how many hosts at once, and the per-host time limit (s),
    which every phase of a host (connecting, copying the bundle, probing) is inside of.
    ``host_probes``: the probes of each host named there, where hosts probe different ones (a
    re-test: each host its own suspects' probes); every other host, and every host without it,
    runs ``probe.names``. When the run must end is not an option of it: probe_hosts is handed
    the run's clock and deadline."""

    probe: ProbeOptions
    fanout: int = 64
    host_timeout_s: float | None = None
    host_probes: Mapping[str, tuple[str, ...]] | None = field(default=None, compare=False)

    def probe_of(self, label: str) -> ProbeOptions:
        """The probe options of the host ``label``."""
        names = (self.host_probes or {}).get(label)
        return self.probe if names is None else dataclasses.replace(self.probe, names=names)

    @property
    def command_timeout_s(self) -> float:
        return self.host_timeout_s if self.host_timeout_s is not None else self.probe.timeout_s


@dataclass(frozen=True)
class SweepResult:
    """Everything a sweep produced; ``to_dict`` is the sweep document. ``impact`` is the job
    impact of the findings (gpudiag.analysis.Impact.to_dict()), once analysed; ``focus`` the
    suspects and reference peers of a ``--suspects`` sweep (gpudiag.pause.Focus.to_dict())."""

    sweep_id: str
    started_at: datetime
    finished_at: datetime
    hosts: tuple[HostOutcome, ...]
    findings: tuple[Finding, ...]
    interrupted: bool = False
    links: tuple[Mapping[str, Any], ...] = ()
    impact: Mapping[str, Any] | None = None
    comparison: Mapping[str, int] | None = None
    warnings: tuple[str, ...] = ()
    focus: Mapping[str, Any] | None = None
    # what each group of pair tests (backend, rail, line rate) was judged against: gpudiag.links'
    # GroupReference.to_dict(), so every rendering quotes the same reference as the findings
    link_groups: tuple[Mapping[str, Any], ...] = ()
    # what each GPU and host figure's key was judged against (gpudiag.analysis.reference.reference_entries)
    references: tuple[Mapping[str, Any], ...] = ()

    @property
    def exit_code(self) -> ExitCode:
        """Interrupted, else a fail finding, else anything not checked: a host, a GPU, a
        measurement that errored, or a result with nothing to compare against."""
        has_unchecked = any(not h.ok for h in self.hosts) or any(
            f.kind in NOT_CHECKED or (f.kind in UNSETTLED_KINDS and not f.confirmed) for f in self.findings)
        return decide_exit_code(has_fail=any(f.severity == Severity.FAIL for f in self.findings),
                                has_unchecked=has_unchecked, interrupted=self.interrupted)

    def to_dict(self, *, records: bool = True, items: bool = True) -> dict[str, Any]:
        """The sweep document, every record in full; without ``records``, each host's entry has
        ``results_count`` instead of its records (what a report of hosts and findings needs,
        without unpacking every host); without ``items``, ``hosts`` and ``findings`` are empty
        lists, where a writer takes them one at a time from ``hosts`` and ``findings``."""
        return {
            "schema": SWEEP_SCHEMA,
            "sweep_id": self.sweep_id,
            "started_at": iso_time(self.started_at),
            "finished_at": iso_time(self.finished_at),
            "hosts": [host.to_dict() if records else host.summary_dict() for host in self.hosts] if items else [],
            "links": [dict(link) for link in self.links],
            "findings": [finding.to_dict() for finding in self.findings] if items else [],
            **({"impact": dict(self.impact)} if self.impact is not None else {}),
            **({"warnings": list(self.warnings)} if self.warnings else {}),
            **({"focus": dict(self.focus)} if self.focus is not None else {}),
            **({"link_groups": [dict(group) for group in self.link_groups]} if self.link_groups else {}),
            **({"references": [dict(entry) for entry in self.references]} if self.references else {}),
            "summary": {"hosts_total": len(self.hosts), "hosts_ok": sum(h.ok for h in self.hosts),
                        "findings": len(self.findings),
                        "unchecked": sum(f.kind == UNCHECKED for f in self.findings),
                        **(dict(self.comparison) if self.comparison is not None else {}),
                        "exit_code": int(self.exit_code)},
        }

    def summary(self) -> dict[str, Any]:
        """The document without records, for a reader in this process (a report, the textfile, the
        store): its hosts are the packed outcomes themselves (mappings that unpack what is read),
        its findings views of the findings (gpudiag.findings.FindingView), not a copy of each. Not
        JSON as it stands: ``to_dict`` is."""
        return {**self.to_dict(records=False, items=False), "hosts": self.hosts,
                "findings": FindingViews(self.findings)}


def new_sweep_id(now: datetime) -> str:
    """``20261121T101500Z-3f2a``: the start's second, then its fraction in 65,536ths (about 15 µs).
    A store orders sweeps by their start time, kept in whole seconds, then by id: so sweeps that
    start in the same second (a small simulated fleet's take a fraction of one) keep their order,
    and two ids are the same only for sweeps started within the same 15 µs."""
    return f"{now:%Y%m%dT%H%M%SZ}-{now.microsecond * SWEEP_ID_TICKS // 1_000_000:04x}"


def probe_hosts(hosts: Sequence[HostSpec], options: SweepOptions, connector: Connector, bundle: Bundle,
              progress: SweepProgress, on_host_done: Callable[[HostOutcome], None] | None = None,
              started_at: datetime | None = None, sweep_id: str | None = None,
              say: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic,
              deadline: float | None = None, unchecked_findings: bool = True) -> SweepResult:
    """Probe every host once; returns one outcome per host, in the order given, with an
    ``unchecked`` finding for each host that could not be probed. ``on_host_done`` is called
    from worker threads as each host finishes (to store it at once); a StoreError it raises is
    a warning of the result, never the sweep's end. ``say`` tells what an interrupted sweep is
    doing (a line on stderr). ``clock`` is the run's (gpudiag.run.runtime.Runtime: every host's
    time limit and duration are read on it); ``deadline``, a time on it by which every host has
    finished (a run-wide budget): a host still connecting, preparing or probing then is ended
    and ``timeout``; None: no such limit. Without ``unchecked_findings`` the result has no findings (a
    caller whose analysis gives each such host its own: not a fleet-sized set made only to be dropped).
    The caller closes ``connector``."""
    started_at = started_at or datetime.now(timezone.utc)
    runner = _SweepRunner(options, connector, bundle, progress, on_host_done, say or _silent, clock, deadline)
    outcomes, interrupted = runner.run(hosts)
    findings = tuple(unchecked(o.host, o.status, o.error) for o in outcomes if not o.ok) if unchecked_findings else ()
    return SweepResult(sweep_id=sweep_id or new_sweep_id(started_at), started_at=started_at,
                       finished_at=datetime.now(timezone.utc), hosts=tuple(outcomes), findings=findings,
                       interrupted=interrupted, warnings=runner.warnings())


def _silent(text: str) -> None:
    return None


def store_warning(failed: Mapping[str, str]) -> str:
    """One warning for the hosts (name → StoreError text) the store could not record."""
    names = sorted(failed)
    shown = ", ".join(names[:HOSTS_NAMED]) + (f" and {len(names) - HOSTS_NAMED} more" if len(names) > HOSTS_NAMED
                                              else "")
    return (f"the store could not record {len(names)} host{'s' if len(names) != 1 else ''} as they finished "
            f"({shown}): {failed[names[0]]}; the sweep went on, and this document has them")


class _HostRun:
    """One host's part of the sweep as the runner's watch sees it: the phase it is in, the
    session it holds, when that phase must end, and its one outcome (``result``): its worker's,
    or the timeout the watch gives a host still in a phase when the phase's time is up."""

    def __init__(self, host: HostSpec, clock: Callable[[], float] = time.monotonic) -> None:
        self.host = host
        self.clock = clock
        self.result: Future[HostOutcome] = Future()
        self._lock = threading.Lock()
        self._claimed = False
        self._started = 0.0
        self._limit_s = 0.0
        self._phase = ""
        self._phase_ends: float | None = None
        self._session: Session | None = None

    def begin(self, limit_s: float) -> float:
        """The host starts now, with ``limit_s`` seconds for every phase; returns the clock's time."""
        with self._lock:
            self._started, self._limit_s = self.clock(), limit_s
            return self._started

    def enter(self, phase: str, grace_s: float = 0.0) -> bool:
        """Start ``phase``, which must end ``grace_s`` seconds after the host's time limit; False
        when the host's outcome is decided already (its worker stops there)."""
        with self._lock:
            self._phase = phase
            self._phase_ends = self._started + self._limit_s + grace_s
            return not self._claimed

    def hold(self, session: Session) -> bool:
        """The host's session, for the watch to cancel; False when the outcome is decided already."""
        with self._lock:
            self._session = session
            return not self._claimed

    def remaining_s(self) -> float:
        """Seconds left of the host's time limit (negative past it)."""
        with self._lock:
            return self._started + self._limit_s - self.clock()

    def overdue(self, now: float) -> bool:
        """Whether the host is still in a phase whose time is up at ``now`` (on the run's clock)."""
        with self._lock:
            return not self._claimed and self._phase_ends is not None and now > self._phase_ends

    def claim(self) -> bool:
        """True for the first caller only: it decides the outcome."""
        with self._lock:
            claimed, self._claimed = self._claimed, True
            return not claimed

    def timed_out(self) -> tuple[HostOutcome, Session | None]:
        """The outcome of a host whose phase ran out of time, and the session to end."""
        with self._lock:
            elapsed = self.clock() - self._started
            error = (f"no result within the host's {self._limit_s:g} s time limit: still {self._phase} after "
                     f"{elapsed:.1f} s; ended")
            return HostOutcome(self.host.label, TIMEOUT, error, elapsed), self._session


class _Slots:
    """The fan-out: each host's worker starts when one of ``fanout`` slots is free. A slot is
    its host's until the host's outcome is decided: by its worker, or by the watch at the host's
    time limit, whatever its worker is still stuck in (a handshake that never answers). A stuck
    worker never keeps the next host waiting; its own waits end by its host's time limit too.
    A host's run record is made when its slot starts it and let go once its outcome is taken:
    the waiting hosts cost a reference each, however many there are."""

    def __init__(self, hosts: Sequence[HostSpec], fanout: int, start: Callable[[_HostRun, int], None],
                 clock: Callable[[], float]) -> None:
        self._waiting = collections.deque(hosts)
        self.running: dict[Future[HostOutcome], _HostRun] = {}
        self._fanout = max(1, fanout)
        self._start = start
        self._clock = clock
        self._started = 0

    def fill(self) -> None:
        """Start waiting hosts while a slot is free."""
        busy = sum(not result.done() for result in self.running)
        while self._waiting and busy < self._fanout:
            run = _HostRun(self._waiting.popleft(), self._clock)
            self._started += 1
            self.running[run.result] = run
            self._start(run, self._started)
            busy += 1

    def never_started(self) -> list[HostSpec]:
        """The hosts still waiting for a slot, which now never start."""
        waiting, self._waiting = list(self._waiting), collections.deque()
        return waiting


class _SweepRunner:
    def __init__(self, options: SweepOptions, connector: Connector, bundle: Bundle,
                 progress: SweepProgress, on_host_done: Callable[[HostOutcome], None] | None,
                 say: Callable[[str], None], clock: Callable[[], float], deadline: float | None) -> None:
        self._on_host_done = on_host_done
        self._say = say
        self._not_stored: dict[str, str] = {}
        self._options = options
        self._connector = connector
        self._bundle = bundle
        self._progress = progress
        self._stop = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._clock = clock
        self._deadline = deadline
        self._started_at = clock()

    def run(self, hosts: Sequence[HostSpec]) -> tuple[list[HostOutcome], bool]:
        outcomes: dict[str, HostOutcome] = {}
        self._progress.start(len(hosts))
        slots = _Slots(hosts, self._options.fanout, self._start_host, self._clock)
        interrupted = late = False
        try:
            self._gather(slots, outcomes, deadline=self._deadline, start=True)
            late = len(outcomes) < len(hosts)  # the run's deadline came first
            if late:
                self._end_late()
        except KeyboardInterrupt:
            interrupted = True
            # Ending the probes and hearing back is real processes' business: wall time, whatever the run's clock.
            deadline = time.monotonic() + CANCEL_WAIT_S
            self._interrupt(deadline)
            for host in slots.never_started():
                outcomes[host.label] = interrupted_host(host)
            try:
                self._gather(slots, outcomes, deadline, time.monotonic)
            except KeyboardInterrupt:
                pass  # a second Ctrl-C: stop waiting, report what is in
        finally:
            self._closed.set()  # hosts that still end now are not counted on a closed display
            self._progress.close()
        started = self._started_at
        ordered = [outcomes.get(host.label) or (_late_host(host, self._clock() - started)
                                                if late and not interrupted
                                                else interrupted_host(host)) for host in hosts]
        return ordered, interrupted

    def warnings(self) -> tuple[str, ...]:
        with self._lock:
            failed = dict(self._not_stored)
        return (store_warning(failed),) if failed else ()

    def _gather(self, slots: _Slots, outcomes: dict[str, HostOutcome], deadline: float | None,
                clock: Callable[[], float] | None = None, start: bool = False) -> None:
        """Collect outcomes as hosts finish, ending each host still in a phase whose time is up,
        until every started host (with ``start``, every host: the next start as slots come free)
        has one or ``deadline`` (on ``clock``, else the run's) passes."""
        clock = clock or self._clock
        pending = slots.running
        while True:
            if start:
                slots.fill()
            if not pending:
                return
            # A short wait keeps the main thread responsive to Ctrl-C and SIGTERM.
            done, _ = wait(list(pending), timeout=0.2, return_when=FIRST_COMPLETED)
            for future in done:
                outcome = future.result()
                outcomes[outcome.host] = outcome
                del pending[future]
            self._end_overdue(pending.values())
            if deadline is not None and clock() > deadline:
                return

    def _end_overdue(self, runs: Iterable[_HostRun]) -> None:
        """Give each host still in a phase past its time a ``timeout`` naming the phase, and end
        its session's work on the node (on a thread of its own: a dying host may be slow to
        answer the kill)."""
        now = self._clock()
        for run in runs:
            if run.overdue(now) and run.claim():
                threading.Thread(target=self._end_host, args=(run,), name="host-timeout", daemon=True).start()

    def _end_host(self, run: _HostRun) -> None:
        outcome, session = run.timed_out()
        self._deliver(run, outcome)
        if session is not None:
            try:
                session.cancel()
            except TransportError:
                pass  # the connection is gone: nothing is left running through it

    def _end_late(self) -> None:
        """The run's deadline came with hosts still running: no new host starts, and the running
        ones' commands are ended (briefly waited for; each also ends by its deadline on the node)."""
        self._stop.set()
        with self._lock:
            sessions = list(self._sessions.values())
        cancel_all(sessions, LATE_CANCEL_WAIT_S)

    def _interrupt(self, deadline: float) -> None:
        self._stop.set()
        with self._lock:
            sessions = list(self._sessions.values())
        running = f"{len(sessions)} host{'s' if len(sessions) != 1 else ''}"
        self._say(f"interrupted: no new hosts start; ending the probes on the {running} running "
                  f"(at most {CANCEL_WAIT_S:g} s), then writing what finished")
        ended = cancel_all(sessions, max(0.0, deadline - time.monotonic()))
        if ended < len(sessions):
            self._say(f"{plural(len(sessions) - ended, 'host')} did not answer in time: their probes end by their own "
                      f"deadline on the node")

    def _start_host(self, run: _HostRun, number: int) -> None:
        # A daemon: a worker stuck where nothing can end it (a handshake that never answers)
        # after the watch gave its host a timeout never keeps the controller from exiting.
        threading.Thread(target=self._probe_host, args=(run,), name=f"sweep-{number}", daemon=True).start()

    def _probe_host(self, run: _HostRun) -> None:
        host = run.host
        if self._stop.is_set():
            if run.claim():
                run.result.set_result(interrupted_host(host))
            return
        self._progress.host_started()
        started = run.begin(self._options.command_timeout_s)
        try:
            outcome = self._attempt(run, started)
        except Exception as error:  # noqa: BLE001 - one host's unforeseen failure must not end the sweep
            traceback.print_exc(file=sys.stderr)
            outcome = HostOutcome(host.label, PROBE_ERROR, f"gpudiag failed on this host: "
                                  f"{type(error).__name__}: {error}", run.clock() - started)
        if run.claim():  # else the watch ended the host first, and its outcome stands
            self._deliver(run, outcome)

    def _deliver(self, run: _HostRun, outcome: HostOutcome) -> None:
        """Record the host's outcome (the store, the progress display), then make it its result.
        An error of the recording other than the store's is the result instead: the main thread
        raises it (gpudiag's own failure, as from any worker)."""
        try:
            self._record(run.host, outcome)
        except Exception as error:  # noqa: BLE001 - not swallowed: handed to the main thread, which raises it
            run.result.set_exception(error)
            return
        run.result.set_result(outcome)

    def _record(self, host: HostSpec, outcome: HostOutcome) -> None:
        if self._on_host_done is not None:
            try:
                self._on_host_done(outcome)
            except StoreError as error:  # the store's fault, not the host's: keep the outcome
                with self._lock:
                    self._not_stored[host.label] = str(error)
        if not self._closed.is_set():
            self._progress.host_done(outcome.ok)

    def _attempt(self, run: _HostRun, started: float) -> HostOutcome:
        """Connect, copy the bundle, run the probes: each phase inside the host's time limit
        (the watch ends a host still in one at its end; the probes get what is left of it)."""
        host = run.host
        session: Session | None = None
        try:
            if not run.enter(CONNECTING):
                return run.timed_out()[0]
            session = self._connector.connect(host, max(MIN_COMMAND_S, run.remaining_s()))
            held = run.hold(session)
            with self._lock:
                self._sessions[host.label] = session
            if self._stop.is_set():
                return interrupted_host(host, run.clock() - started)
            if not (held and run.enter(COPYING)):
                return run.timed_out()[0]
            session.prepare(self._bundle)
            if not run.enter(PROBING, PROBE_BACKSTOP_S):
                return run.timed_out()[0]
            node = probe_host(_TimedSession(session, run), self._options.probe_of(host.label), source=host.label)
        except (TransportError, ProbeOutputError) as error:
            if self._stop.is_set():  # the failure is the interruption's doing (probes ended, links closed)
                return interrupted_host(host, run.clock() - started)
            status = error.status if isinstance(error, TransportError) else PROBE_ERROR
            return HostOutcome(host.label, status, str(error), run.clock() - started)
        finally:
            with self._lock:
                self._sessions.pop(host.label, None)
            if session is not None:
                session.close()
        return self._outcome(host, node, run.clock() - started)

    def _outcome(self, host: HostSpec, node: HostProbe, duration: float) -> HostOutcome:
        facts = _facts(node.results)
        measured = {"facts": facts, "results": node.results, "stray": node.stray}
        if self._stop.is_set():
            return HostOutcome(host.label, INTERRUPTED, "the sweep was interrupted", duration, **measured)
        if node.timed_out or node.exit_status in DEADLINE_EXITS:
            return HostOutcome(host.label, TIMEOUT, f"the probes did not finish within "
                               f"{self._options.command_timeout_s:g} s on the node", duration, **measured)
        if node.exit_status != 0:
            return HostOutcome(host.label, PROBE_ERROR, f"the probe bundle exited with status {node.exit_status}: "
                               f"{last_line(node.stderr)}", duration, **measured)
        return HostOutcome(host.label, OK, None, duration, **measured)


class _TimedSession:
    """A session whose commands run within what is left of the host's time limit."""

    def __init__(self, session: Session, run: _HostRun) -> None:
        self._session = session
        self._run = run

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        return self._session.run(argv, min(timeout_s, max(MIN_COMMAND_S, self._run.remaining_s())))


def _facts(results: Sequence[ProbeResult]) -> dict[str, Any]:
    facts_record = next((r for r in results if r.probe == "facts" and r.ok), None)
    if facts_record is None:
        return {}
    details = dict(facts_record.details)
    return {"gpu_model": details.get("gpu_model"), "gpu_count": details.get("gpu_count"),
            "driver": details.get("driver_version"), **details}


def _late_host(host: HostSpec, duration: float) -> HostOutcome:
    """The outcome of a host still running at the run's deadline (probe_hosts' ``deadline``), after
    ``duration`` seconds of the run."""
    return HostOutcome(host.label, TIMEOUT, "not finished by the run's deadline: ended", duration)


def interrupted_host(host: HostSpec, duration: float = 0.0) -> HostOutcome:
    """The outcome of a host the sweep's interruption kept from finishing, after ``duration`` s."""
    return HostOutcome(host.label, INTERRUPTED, "the sweep was interrupted before this host finished", duration)
