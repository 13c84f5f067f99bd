"""Running the link schedule: screen (or full) rounds, attribution, then confirm rounds until
nothing is left to settle, every pair of a round at once.

The pair tests themselves are a ``PairRunner``'s business (over SSH, or a simulated fleet); a
runner never raises for one bad pair: a pair that cannot be measured comes back as results
with an ``error``, so the round and the sweep go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol

from ..hosts import fold_hosts
from ..words import plural
from .attribution import (
    DEFAULT_THRESHOLDS,
    LinkAttribution,
    LinkBaseline,
    LinkResult,
    LinkThresholds,
    attribute_links,
)
from .groups import MAX_STREAMS, StreamFigure
from .schedule import (
    FULL,
    SCREEN,
    Pair,
    Round,
    Suspects,
    confirm_rounds,
    full_rounds,
    pair_key,
    pair_levels,
    screen_rounds,
)

MODES = ("none", SCREEN, FULL)
# Confirm phases at most: each settles what the last could not (a suspect with a new partner).
MAX_CONFIRM_PHASES = 3
# After Ctrl-C, how long the pairs in flight get to end (their processes are being killed).
CANCEL_WAIT_S = 15.0
# The status of a further peer reached for a tie-break: a host's "ok" (gpudiag.run.outcome.OK).
REACHED = "ok"


class PairRunner(Protocol):
    """Measures one pair on every rail: returns one result per rail (or one error result per
    rail that could not be measured); never raises for a bad pair."""

    def run_pair(self, a: str, b: str) -> list[LinkResult]: ...

    def round_started(self, pairs: Sequence[Pair]) -> None:
        """The pairs of the round that starts now (each then runs through ``run_pair``, at once)."""
        ...

    def cancel(self) -> None:
        """End the pair tests in flight (Ctrl-C): they come back soon, as errors."""
        ...


@dataclass(frozen=True)
class LinkRecord:
    """One measured pair on one rail and the phase that measured it: an entry of the sweep
    document's ``links`` (value in Gb/s, or None with the error)."""

    phase: str
    result: LinkResult

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        entry = {"a": r.a, "b": r.b, "rail": r.rail, "backend": r.backend, "metric": "gbps", "value": r.gbps,
                 "unit": "Gbit/s", "phase": self.phase, "line_rate_gbps": r.line_rate_gbps, "error": r.error,
                 "fault": r.fault}
        if any(rate not in (None, r.line_rate_gbps) for rate in r.end_rates_gbps):  # a pair of two line rates
            entry["end_rates_gbps"] = list(r.end_rates_gbps)
        if r.streams or r.back_streams:
            entry.update(collective_gbps=r.collective_gbps, streams=[_stream_dict(s) for s in r.streams],
                         back_streams=[_stream_dict(s) for s in r.back_streams])
        return entry

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LinkRecord:
        """The record of a ``links[]`` entry (``to_dict``'s form; a stored document's entry may
        lack ``line_rate_gbps``, ``error``, ``fault``, ``phase`` and ``end_rates_gbps``, which
        is written only for a pair between two rates: a host is still known unreached from those).
        An entry with no figure and no error reads as an error; a ``fault`` that names no end of a
        failed pair is dropped. Raises ValueError for an entry that is not a pair test's."""
        try:
            value, rail, rate = data.get("value"), data.get("rail"), data.get("line_rate_gbps")
            if (value is not None and not _is_number(value)) or (rate is not None and not _is_number(rate)):
                raise ValueError(f"value and line_rate_gbps must be numbers, got {value!r} and {rate!r}")
            if rail is not None and (isinstance(rail, bool) or not isinstance(rail, int)):
                raise ValueError(f"rail must be an integer, got {rail!r}")
            error = None if value is not None else str(data.get("error") or "no figure")
            a, b, fault = str(data["a"]), str(data["b"]), data.get("fault")
            fault = fault if error is not None and fault in (a, b) else None
            result = LinkResult(a, b, str(data["backend"]), rail, value, rate, error, fault,
                                _streams(data.get("streams")), _streams(data.get("back_streams")),
                                _end_rates(data.get("end_rates_gbps")))
        except KeyError as missing:
            raise ValueError(f"a link entry needs {missing.args[0]!r}") from None
        return cls(str(data.get("phase") or ""), result)


@dataclass(frozen=True)
class PeerReach:
    """How reaching one further peer of a tie-break ended: ``status`` ``ok`` (its session holds
    the node's bundle and its facts passed the identity check: it can be pair-tested), else the
    host status that says why not (``unreachable``, ``timeout``, ``identity_conflict``, ...)
    and the ``error``. A peer not reached takes part in no pair test: never a pass, never blamed."""

    host: str
    status: str
    error: str | None = None

    @property
    def reached(self) -> bool:
        return self.status == REACHED

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "status": self.status, "error": self.error}


@dataclass(frozen=True)
class TieBreak:
    """What a tie-break did (gpudiag.links.tiebreak): the further ``peers`` brought in, the ``pair_tests`` run with
    them, the bound, the ``candidates`` it could draw on, how reaching each one it tried ended
    (``tried``, in order), and a ``note`` in plain words where it could not help (no further
    peer, the bound reached) or a peer could not be reached; None otherwise."""

    peers: tuple[str, ...]
    pair_tests: int
    max_pair_tests: int
    candidates: int
    note: str | None = None
    tried: tuple[PeerReach, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The sweep document's ``focus.extra_peers``."""
        return {"peers": list(self.peers), "pair_tests": self.pair_tests, "max_pair_tests": self.max_pair_tests,
                "candidates": self.candidates, "note": self.note, "tried": [peer.to_dict() for peer in self.tried]}

    def describe(self) -> str:
        """``extra peers node[001,008]: 6 pair tests of at most 18`` (or why none)."""
        if self.peers:
            text = (f"extra peers {fold_hosts(self.peers)}: {plural(self.pair_tests, 'pair test')} of at most "
                    f"{self.max_pair_tests}")
            return text + (f" ({self.note})" if self.note else "")
        return f"extra peers: none ({self.note})" if self.note else "extra peers: none needed"


@dataclass(frozen=True)
class LinkRun:
    """Every pair test a sweep ran, the verdicts from all of them, and how many rounds it took."""

    records: tuple[LinkRecord, ...]
    attribution: LinkAttribution
    rounds: int
    interrupted: bool = False
    cut_short: bool = False  # the run's deadline (a --budget) ended it before its schedule did
    tie_break: TieBreak | None = None  # further peers brought in (gpudiag.links.tiebreak), where a plan could


class _Interrupted(Exception):
    """Ctrl-C during a round; carries the pairs that had finished before it."""

    def __init__(self, records: list[LinkRecord]) -> None:
        super().__init__("interrupted")
        self.records = records


class _OutOfTime(_Interrupted):
    """The deadline came before a round could start or while it ran; carries what finished."""


class LinkPlan(Protocol):
    """How a link phase chooses its rounds and judges them: the first rounds (a screen or the full
    round robin), the attribution of everything measured so far, and the confirm rounds that
    follow it. ``PlainPlan`` is the plan without a topology; gpudiag.fabric has the one with."""

    @property
    def confirm_phases(self) -> int:
        """The confirm phases the link phase may run (``MAX_CONFIRM_PHASES``), besides the last one
        for suspects none of them took up."""
        ...

    def first_rounds(self, hosts: Sequence[str]) -> list[Round]: ...

    def attribute(self, records: Sequence[LinkRecord]) -> LinkAttribution: ...

    def confirm(self, attribution: LinkAttribution, suspects: Suspects, records: Sequence[LinkRecord]) -> list[Round]:
        """The next confirm rounds for ``suspects`` (the NIC and pair suspects left to settle)
        and whatever else the plan still wants re-tested; [] when nothing is."""
        ...


@dataclass(frozen=True)
class PlainPlan:
    """The schedule without a topology: ``screen`` (a cycle of ``stride``) or ``full``, then each
    suspect re-paired with hosts that passed (gpudiag.links.schedule)."""

    mode: str
    thresholds: LinkThresholds = DEFAULT_THRESHOLDS
    stride: int = 1
    baseline: LinkBaseline | None = None

    @property
    def confirm_phases(self) -> int:
        return MAX_CONFIRM_PHASES

    def first_rounds(self, hosts: Sequence[str]) -> list[Round]:
        if self.mode == FULL:
            return full_rounds(hosts)
        return screen_rounds(hosts, (self.stride - 1) % max(1, len(hosts) // 2) + 1)

    def attribute(self, records: Sequence[LinkRecord]) -> LinkAttribution:
        return attribute_links((r.result for r in records), self.thresholds, baseline=self.baseline)

    def confirm(self, attribution: LinkAttribution, suspects: Suspects, records: Sequence[LinkRecord]) -> list[Round]:
        if not suspects:
            return []
        tested = [r.result.pair for r in records]  # with repeats: re-runs go round the partners
        return confirm_rounds(suspects, attribution.partners, tested, attribution.line_rates,
                              pair_levels((r.result.pair, r.result.gbps) for r in records))


class RoundWatch(Protocol):
    """Who is told how the rounds go, live: a progress display."""

    def round_started(self, label: str, pairs: int) -> None:
        """A round of ``pairs`` pairs starts: ``label`` says which (``screen round 2 of 3``)."""

    def pair_done(self) -> None:
        """One pair of the round is done (measured, failed or ended)."""


def run_links(hosts: Sequence[str], mode: str, runner: PairRunner,
              thresholds: LinkThresholds = DEFAULT_THRESHOLDS, parallel: int = 64, stride: int = 1, *,
              baseline: LinkBaseline | None = None, deadline: float | None = None,
              clock: Callable[[], float] = time.monotonic, plan: LinkPlan | None = None,
              watch: RoundWatch | None = None) -> LinkRun:
    """The link phase of a sweep over ``hosts`` (those whose node probes passed, in sweep
    order): ``screen`` (two rounds forming a cycle of ``stride``, then confirm rounds; a stride
    beyond ⌊N/2⌋ for the hosts left wraps around) or ``full`` (the round-robin, then confirm
    rounds); ``none`` runs nothing. Every attribution also judges against ``baseline`` (a
    gpudiag.store.baselines.Baseline; its link entries) where given. ``plan``: another way to
    choose and judge the rounds (a topology's: gpudiag.fabric), in place of ``PlainPlan``.
    ``deadline`` (on ``clock``): no round starts after it, and a round still running at it is
    ended; the run is then ``cut_short``, with what finished and no verdicts. ``watch`` is told
    each round's start and each pair's end. Raises ValueError for another mode."""
    if mode not in MODES:
        raise ValueError(f"unknown link mode {mode!r}; choose from {', '.join(MODES)}")
    if mode == "none" or len(hosts) < 2:
        return LinkRun((), attribute_links(()), 0)
    plan = plan or PlainPlan(mode, thresholds, stride, baseline)
    first = plan.first_rounds(hosts)
    records: list[LinkRecord] = []
    rounds = 0
    try:
        records += _run_rounds(first, runner, parallel, deadline, clock, watch)
        attribution = plan.attribute(records)
        rounds = len(first)
        retested: set[str] = set()  # suspect hosts and pairs a confirm phase took up
        for phase in range(plan.confirm_phases + 1):
            suspects = attribution.suspects
            if phase == plan.confirm_phases:
                # One more phase only for suspects no phase took up yet: the last re-judging (more
                # runs move the level and spread a little) may raise a pair measured once.
                suspects = Suspects(tuple(h for h in suspects.hosts if h not in retested),
                                    tuple(p for p in suspects.pairs if _pair_name(p) not in retested))
            retested |= set(suspects.hosts) | {_pair_name(p) for p in suspects.pairs}
            confirm = plan.confirm(attribution, suspects, records)
            if not confirm:
                break
            records += _run_rounds(confirm, runner, parallel, deadline, clock, watch)
            rounds += len(confirm)
            attribution = plan.attribute(records)
    except _OutOfTime as late:
        records += late.records
        return LinkRun(tuple(records), attribute_links(()), rounds, cut_short=True)
    except _Interrupted as interrupted:
        # What finished is kept for the document; verdicts from an unfinished schedule are not drawn.
        records += interrupted.records
        return LinkRun(tuple(records), attribute_links(()), rounds, interrupted=True)
    except KeyboardInterrupt:  # between rounds (an attribution): every round run so far is whole
        return LinkRun(tuple(records), attribute_links(()), rounds, interrupted=True)
    return LinkRun(tuple(records), attribution, rounds)


def _pair_name(pair: Pair) -> str:
    a, b = pair_key(*pair)
    return f"{a}\x00{b}"


def _run_rounds(rounds: Sequence[Round], runner: PairRunner, parallel: int,
                deadline: float | None = None, clock: Callable[[], float] = time.monotonic,
                watch: RoundWatch | None = None) -> list[LinkRecord]:
    """Rounds one after another; the pairs of one round all at once (a node is in one pair).
    Raises _Interrupted on Ctrl-C, after ending the pairs in flight, and _OutOfTime when
    ``deadline`` (on ``clock``) comes before a round starts or while one runs."""
    records: list[LinkRecord] = []
    for index, round_ in enumerate(rounds, start=1):
        if deadline is not None and clock() >= deadline:
            raise _OutOfTime(records)
        runner.round_started(round_.pairs)
        if watch is not None:
            watch.round_started(f"{round_.phase} round {index} of {len(rounds)}", len(round_.pairs))
        pool = ThreadPoolExecutor(max_workers=max(1, min(parallel, len(round_.pairs))), thread_name_prefix="links")
        futures = [pool.submit(runner.run_pair, *pair) for pair in round_.pairs]
        if watch is not None:
            for future in futures:
                future.add_done_callback(lambda _: watch.pair_done())
        try:
            _wait_all(futures, deadline, clock)
            if not all(future.done() for future in futures):  # the deadline came first
                finished = [f for f in futures if f.done()]
                runner.cancel()
                _wait_all(futures, time.monotonic() + CANCEL_WAIT_S)  # real processes ending: wall time
                pool.shutdown(wait=False, cancel_futures=True)
                raise _OutOfTime(records + _round_records(round_, finished))
        except KeyboardInterrupt:
            finished = [f for f in futures if f.done()]
            runner.cancel()
            try:
                _wait_all(futures, time.monotonic() + CANCEL_WAIT_S)
            except KeyboardInterrupt:
                pass  # a second Ctrl-C: stop waiting
            pool.shutdown(wait=False, cancel_futures=True)
            raise _Interrupted(records + _round_records(round_, finished)) from None
        pool.shutdown()
        records += _round_records(round_, futures)
    return records


def _wait_all(futures: Sequence[Future[list[LinkResult]]], deadline: float | None = None,
              clock: Callable[[], float] = time.monotonic) -> None:
    pending = set(futures)
    while pending and (deadline is None or clock() < deadline):
        # A short wait keeps the main thread responsive to Ctrl-C and SIGTERM.
        _, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)


def _round_records(round_: Round, futures: Sequence[Future[list[LinkResult]]]) -> list[LinkRecord]:
    return [LinkRecord(round_.phase, result) for future in futures if future.done() and not future.cancelled()
            for result in future.result()]


def link_results(entries: Iterable[Mapping[str, Any]]) -> list[LinkResult]:
    """The pair tests of ``links[]`` entries (a stored or written sweep document's), in order;
    an entry that is not one (``LinkRecord.from_dict`` refuses it) is left out."""
    results = []
    for entry in entries:
        try:
            results.append(LinkRecord.from_dict(entry).result)
        except ValueError:
            continue  # a hand-made or foreign entry: it names no pair test to read a figure from
    return results


def _stream_dict(stream: StreamFigure) -> dict[str, Any]:
    return {"gbps": stream.gbps, "hops": None if stream.hops is None else list(stream.hops)}


def _streams(entries: object) -> tuple[StreamFigure, ...]:
    """A document entry's streams (``_stream_dict``'s form). Raises ValueError for anything else."""
    if entries is None:
        return ()
    if not isinstance(entries, list) or len(entries) > MAX_STREAMS:
        raise ValueError(f"streams must be a list of at most {MAX_STREAMS} entries")
    streams = []
    for entry in entries:
        if not isinstance(entry, Mapping) or not _is_number(entry.get("gbps")):
            raise ValueError("a stream needs a gbps figure")
        hops = entry.get("hops")
        if hops is not None and not (isinstance(hops, list) and all(isinstance(h, str) for h in hops)):
            raise ValueError("a stream's hops must be a list of switch names")
        streams.append(StreamFigure(float(entry["gbps"]), None if hops is None else tuple(hops)))
    return tuple(streams)


def _end_rates(entry: object) -> tuple[float | None, float | None]:
    """A document entry's ``end_rates_gbps`` (two rates, each a number or null); neither known
    without one. Raises ValueError for anything else."""
    if entry is None:
        return None, None
    if not (isinstance(entry, list) and len(entry) == 2 and all(r is None or _is_number(r) for r in entry)):
        raise ValueError(f"end_rates_gbps must be two rates (numbers or null), got {entry!r}")
    return entry[0], entry[1]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
