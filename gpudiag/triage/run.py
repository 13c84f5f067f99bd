"""Running a triage: every node probe and the kernel log's Xid history on one host, over the
transport a sweep uses, judged as a sweep judges it, against the stored baseline and the host's
own history.

1. The host (or a node of a simulated fleet) is reached as ``gpudiag sweep`` reaches it: SSH with
   the user's OpenSSH configuration, ``localhost`` here.
2. The probes run with a longer load (``duration_s``, two minutes by default) so throttling from
   heat or power has time to show, and the xid probe reads the kernel log and NVML's pending
   recovery actions.
3. The sweep's analysis judges the results (gpudiag.analysis.analyse): alone, the host has no
   fleet to compare with, so the stored baseline and the SKU figures decide, and error counters
   are judged on their growth since the host's last stored sweep. Suspects are re-tested once.
4. The host's stored history (its last sweeps' figures) is read for the explanation.

The store is only read: a triage is never stored as a sweep.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..analysis import Analysis, analyse, prior_counts
from ..analysis.speed import not_retested
from ..analysis.thresholds import Thresholds, load_thresholds
from ..bundle import Bundle, BundleMissing, locate_bundle
from ..errors import InputError, InstallationError
from ..fabric.model import Topology
from ..fabric.place import place_lines
from ..fabric.readers import chosen_topology
from ..hosts import HostSpec, load_hosts
from ..records import DEFAULT_PROBE_NAMES
from ..run.fanout import SweepOptions, SweepResult, probe_hosts
from ..run.hostprobe import ProbeOptions
from ..run.outcome import HostOutcome
from ..run.progress import QuietProgress, SweepProgress
from ..run.request import Judging, Reach
from ..run.runtime import Runtime
from ..store.baselines import DEFAULT_BASELINE, Baseline, chosen_baseline
from ..store.store import Store
from ..transport import Connector
from ..words import plural

XID = "xid"
# Every probe a sweep runs, and the kernel log's Xid history.
TRIAGE_PROBES = (*DEFAULT_PROBE_NAMES, XID)
# Seconds of timed load per probe: long enough for heat and power limits to show.
DEFAULT_DURATION_S = 120.0
# The bundle's deadline: a sweep's 600 s and room for the longer load of every load probe.
DEADLINE_BASE_S = 600.0
DEADLINE_PER_DURATION = 4.0
HISTORY_SWEEPS = 10


def default_deadline_s(duration_s: float) -> float:
    """The bundle's overall deadline (s) for a triage whose load probes run ``duration_s`` each."""
    return DEADLINE_BASE_S + DEADLINE_PER_DURATION * duration_s


@dataclass(frozen=True)
class TriageRequest:
    """One ``gpudiag triage``: which host (or node of the reach's stand-in fleet), what to run,
    how to reach it and how to keep and judge its results (the sweep's own ``Reach`` and
    ``Judging``; ``store_required``: the store was named, so a missing file is an error)."""

    host: str
    probe: ProbeOptions
    reach: Reach = Reach()
    judging: Judging = Judging()
    store_required: bool = False
    history_sweeps: int = HISTORY_SWEEPS
    host_timeout_s: float | None = None
    topology: tuple[str, ...] = ()  # --topology: where the host sits in the fabric (gpudiag.fabric.readers)


@dataclass(frozen=True)
class TriageRun:
    """What a triage gathered: the host's ``outcome`` (its records), the sweep's ``analysis`` of it,
    whether suspects were ``retested``, the ``baseline`` name used (None: none), ``notes`` on what
    could not be compared (no store, no baseline), the host's stored ``history`` (newest first, as
    Store.host_history gives it), the deficit (percent) that makes a figure a suspect, and whether
    it was ``interrupted``."""

    host: str
    outcome: HostOutcome
    analysis: Analysis
    retested: bool
    baseline: str | None
    notes: tuple[str, ...]
    history: tuple[dict[str, Any], ...]
    probe: ProbeOptions
    started_at: datetime
    finished_at: datetime
    deficit_warn_pct: float
    interrupted: bool = False
    fabric: tuple[str, ...] = ()  # where the host sits in the fabric (gpudiag.fabric.place), with a topology


@dataclass
class _Setup:
    spec: HostSpec
    connector: Connector
    thresholds: Thresholds
    store: Store | None
    baseline: Baseline | None
    notes: list[str]
    topology: Topology | None = None


def run_triage(request: TriageRequest, runtime: Runtime | None = None) -> TriageRun:
    """Probe the host, judge it and read its history, in ``runtime`` (gpudiag.run.runtime; by
    default a quiet run). Raises InputError, StoreError or InstallationError before the host is
    touched when an input is bad."""
    runtime = runtime or Runtime()
    setup = _set_up(request, runtime)
    try:
        return _run(request, setup, runtime)
    finally:
        setup.connector.close()
        if setup.store is not None:
            setup.store.close()


def _set_up(request: TriageRequest, runtime: Runtime) -> _Setup:
    thresholds = load_thresholds(request.judging.thresholds_path)
    spec, connector = _connect(request, runtime)
    notes: list[str] = []
    store = _open_store(request, notes)
    baseline = _baseline(store, request.judging.baseline_name, notes)
    stand_in = request.reach.stand_in
    topology = chosen_topology(request.topology, stand_in.topology() if stand_in is not None else None)
    return _Setup(spec, connector, thresholds, store, baseline, notes, topology)


def _connect(request: TriageRequest, runtime: Runtime) -> tuple[HostSpec, Connector]:
    """The one host and the runtime's connector to it (gpudiag.run.connection)."""
    stand_in = request.reach.stand_in
    if stand_in is not None:
        hosts = [spec.host for spec in stand_in.host_specs()]
        if request.host not in hosts:
            raise InputError(f"--host {request.host}: not a node of the simulated fleet {stand_in.source} "
                             f"({hosts[0]}..{hosts[-1]})")
        specs = [HostSpec(request.host)]
    else:
        specs = load_hosts(request.host, runtime.stdin)
    if len(specs) != 1:
        raise InputError(f"gpudiag triage looks at one host; {request.host!r} names {len(specs)} "
                         f"({', '.join(spec.label for spec in specs[:3])}{'...' if len(specs) > 3 else ''})")
    return specs[0], runtime.connect(request.reach, specs, 1).connector


def _open_store(request: TriageRequest, notes: list[str]) -> Store | None:
    if request.judging.store_path is None:
        notes.append("no store given (--no-store): no baseline or history to compare with")
        return None
    path = Path(request.judging.store_path).expanduser()
    if not path.exists():
        if request.store_required:
            raise InputError(f"--store {request.judging.store_path}: no such store")
        notes.append(f"no store at {path} yet: no baseline or history to compare with (gpudiag sweep fills it)")
        return None
    return Store.open(path, readonly=True)


def _baseline(store: Store | None, name: str | None, notes: list[str]) -> Baseline | None:
    baseline = chosen_baseline(store, name)
    if store is None or baseline is not None:
        return baseline
    notes.append(f"no baseline named {DEFAULT_BASELINE!r} in {store.path}: results are judged against the SKU "
                 "figures only (gpudiag baseline build --name default)")
    return None


def _run(request: TriageRequest, setup: _Setup, runtime: Runtime) -> TriageRun:
    progress, gate = runtime.progress, runtime.gate
    started_at = datetime.now(timezone.utc)
    bundle = _bundle()
    options = SweepOptions(probe=request.probe, fanout=1, host_timeout_s=request.host_timeout_s)

    def probe(names: Sequence[str], shown: SweepProgress) -> SweepResult | None:
        chosen = dataclasses.replace(options, probe=dataclasses.replace(options.probe, names=tuple(names)))
        return gate.run_phase(lambda: probe_hosts([setup.spec], chosen, setup.connector, bundle, shown, say=gate.say,
                                                  clock=runtime.clock), lambda: None)

    limit = request.host_timeout_s or request.probe.deadline_s
    if limit is not None:
        progress.expect(limit, f"probing {setup.spec.label} ({request.probe.duration_s:g} s of load per load probe)")
    first = probe(request.probe.names, progress)
    interrupted = first is None or first.interrupted
    outcome = first.hosts[0] if first is not None else HostOutcome(setup.spec.label, "interrupted",
                                                                   "the triage was interrupted", 0.0)
    previous = prior_counts(setup.store.previous_hosts([outcome.host], "") if setup.store else ())
    analysis = analyse([outcome], setup.thresholds, baseline=setup.baseline, previous_hosts=previous,
                       interrupted=interrupted)
    retested = False
    if request.judging.retest and analysis.suspects and not interrupted:
        progress.phase(f"re-testing {plural(len(analysis.suspects), 'suspect result')}")
        again = probe(sorted({s.measurement.probe for s in analysis.suspects}), QuietProgress())
        interrupted = again is None or again.interrupted
        retested = True
        retest_hosts = None if again is None else [host.with_facts(outcome.facts) for host in again.hosts]
        analysis = analyse([outcome], setup.thresholds, baseline=setup.baseline, previous_hosts=previous,
                           retest_hosts=None if interrupted else retest_hosts, retested=True, interrupted=interrupted)
    elif analysis.suspects and not interrupted:  # --no-retest: measured slow once is no verdict
        analysis = analyse([outcome], setup.thresholds, baseline=setup.baseline, previous_hosts=previous,
                           extra=not_retested(analysis.suspects))
    history = tuple(setup.store.host_history(outcome.host, request.history_sweeps)) if setup.store else ()
    return TriageRun(host=outcome.host, outcome=outcome, analysis=analysis, retested=retested,
                     baseline=setup.baseline.name if setup.baseline else None, notes=tuple(setup.notes),
                     history=history, probe=request.probe, started_at=started_at,
                     finished_at=datetime.now(timezone.utc), deficit_warn_pct=setup.thresholds.deficit_warn_pct,
                     interrupted=interrupted or gate.received,
                     fabric=tuple(place_lines(outcome.host, setup.topology, outcome.facts)) if setup.topology else ())


def _bundle() -> Bundle:
    try:
        return locate_bundle()
    except BundleMissing as missing:
        raise InstallationError(str(missing)) from missing
