"""The plan of a sweep: which probes run where, in which phase, and what is kept.

1. Node probes on every host at once (bounded by the fan-out), each host stored as it finishes.
2. Analysis against the fleet, the stored baseline and the SKU figures.
3. Suspects re-tested (their probes only, in the first pass's mode: faults that show only
   under full load must show again) on their hosts; only what repeats is confirmed.
4. Findings, job impact and the finished document stored.

Input errors (hosts, SSH configuration, thresholds, fleet file, store, baseline) are raised
before anything runs on a node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TextIO

from .analysis import Analysis, analyse
from .baseline import Baseline, list_baselines, load_baseline
from .bundle import Bundle, BundleMissing, locate_bundle
from .errors import InputError, InstallationError
from .hosts import HostSpec, load_hosts
from .links.attribution import link_thresholds
from .links.impact import link_impact
from .links.rounds import LinkRun, PairRunner, run_links
from .links.schedule import FULL, SCREEN
from .links.simulated import SimulatedPairRunner
from .links.verdicts import link_findings
from .progress import QuietProgress, SweepProgress
from .sim import SimulatedConnector, load_fleet
from .sshconfig import SshOptions, resolve_all
from .store import Store
from .sweep import Connector, HostOutcome, SweepOptions, SweepResult, new_sweep_id, run_sweep
from .thresholds import Thresholds, load_thresholds
from .transport.fleet import FleetConnector
from .transport.ssh import SshSettings

DEFAULT_BASELINE = "default"
FACTS = "facts"
# --links auto: the screen schedule where the transport can run pair tests, else none.
AUTO_LINKS = "auto"
LINK_MODES = (AUTO_LINKS, SCREEN, FULL, "none")


@dataclass(frozen=True)
class SweepRequest:
    """A whole ``gpudiag sweep``: which hosts (or a simulated fleet), what to run, how to reach
    them, where to store it, and how to judge it."""

    hosts_argument: str | None
    sweep: SweepOptions
    ssh: SshOptions = SshOptions()
    settings: SshSettings = SshSettings()
    simulate_path: str | None = None
    store_path: str | None = None
    thresholds_path: str | None = None
    baseline_name: str | None = None
    retest: bool = True
    links: str = AUTO_LINKS


@dataclass(frozen=True)
class _Setup:
    hosts: list[HostSpec]
    connector: Connector
    thresholds: Thresholds
    store: Store | None
    baseline: Baseline | None
    bundle: Bundle


def run_plan(request: SweepRequest, stdin: TextIO, progress: SweepProgress) -> SweepResult:
    """Run every phase; returns the analysed sweep. Raises InputError/StoreError before any node
    is touched when an input is bad."""
    request = with_facts(request)
    setup = _set_up(request, stdin)
    try:
        return _run(request, setup, progress)
    finally:
        setup.connector.close()
        if setup.store is not None:
            setup.store.close()


def with_facts(request: SweepRequest) -> SweepRequest:
    """The request with the facts probe always in its first pass: without the GPU model and
    driver, results of every model and driver would pool into one key (or not be compared)."""
    names = request.sweep.probe.names
    if not names or FACTS in names:
        return request
    probe = dataclasses.replace(request.sweep.probe, names=(FACTS, *names))
    return dataclasses.replace(request, sweep=dataclasses.replace(request.sweep, probe=probe))


def _set_up(request: SweepRequest, stdin: TextIO) -> _Setup:
    thresholds = load_thresholds(request.thresholds_path)
    if request.simulate_path is not None:
        fleet = load_fleet(request.simulate_path)
        hosts: list[HostSpec] = list(fleet.host_specs())
        connector: Connector = SimulatedConnector(fleet)
    else:
        if request.links not in (AUTO_LINKS, "none"):
            raise InputError(f"--links {request.links}: pair tests over SSH are not available in this version "
                             "(the node-side pair probes are being built); use --links none or auto")
        hosts = load_hosts(request.hosts_argument or "", stdin)
        remote = [host for host in hosts if not host.is_local]
        resolved = dict(zip((h.label for h in remote), resolve_all(remote, request.ssh), strict=True))
        connector = FleetConnector(resolved, request.ssh, request.settings)
    store = Store.open(request.store_path) if request.store_path else None
    baseline = _baseline(store, request.baseline_name)
    try:
        bundle = locate_bundle()
    except BundleMissing as missing:
        raise InstallationError(str(missing)) from missing
    return _Setup(hosts, connector, thresholds, store, baseline, bundle)


def _baseline(store: Store | None, name: str | None) -> Baseline | None:
    if store is None:
        return None
    if name is not None:
        return load_baseline(store, name)
    stored = {entry["name"] for entry in list_baselines(store)}
    return load_baseline(store, DEFAULT_BASELINE) if DEFAULT_BASELINE in stored else None


def _run(request: SweepRequest, setup: _Setup, progress: SweepProgress) -> SweepResult:
    started_at = datetime.now(timezone.utc)
    sweep_id = new_sweep_id(started_at)
    record = _recorder(setup.store, sweep_id, started_at, request)
    first = run_sweep(setup.hosts, request.sweep, setup.connector, setup.bundle, progress,
                      on_host_done=record, started_at=started_at, sweep_id=sweep_id)
    hosts = [host.to_dict() for host in first.hosts]
    analysis = analyse(hosts, setup.thresholds, baseline=setup.baseline)
    interrupted = first.interrupted
    retest: list[dict[str, Any]] | None = None
    wanted = request.retest and bool(analysis.suspects) and not interrupted
    if wanted:
        retest, interrupted = _retest(request, setup, analysis, first)
    link_run = None if interrupted else _links(request, setup, first)
    extra = link_findings(link_run.attribution, setup.thresholds.deficit_fail_pct) if link_run else []
    if wanted or extra:
        # An interrupted re-test confirms nothing: the suspects stay, unconfirmed, "not re-tested".
        analysis = analyse(hosts, setup.thresholds, baseline=setup.baseline,
                           retest_hosts=None if interrupted else retest, retested=wanted, extra=extra)
    links = tuple(record.to_dict() for record in link_run.records) if link_run else ()
    impact = analysis.impact.to_dict()
    if link_run is not None:
        impact.update(link_impact(link_run, impact["exclude"]) or {})
    result = dataclasses.replace(first, findings=analysis.findings, impact=impact,
                                 comparison=analysis.comparison_counts(), links=links,
                                 finished_at=datetime.now(timezone.utc), interrupted=interrupted)
    if setup.store is not None:  # the finished document carries the links, the findings and the impact
        setup.store.finish_sweep(sweep_id, result.to_dict())
    return result


def _links(request: SweepRequest, setup: _Setup, first: SweepResult) -> LinkRun | None:
    """The link phase over the hosts whose node probes ran (``screen``, ``full``); None when no
    pair test runs (``none``, or ``auto`` where the transport cannot run them yet)."""
    runner = _pair_runner(setup.connector)
    mode = request.links
    if mode == AUTO_LINKS:
        mode = SCREEN if runner is not None else "none"
    if mode == "none" or runner is None:
        return None
    return run_links([host.host for host in first.hosts if host.ok], mode, runner,
                     link_thresholds(setup.thresholds), parallel=request.sweep.fanout)


def _pair_runner(connector: Connector) -> PairRunner | None:
    """How this transport runs pair tests: the simulated fleet's network model; over SSH the
    pair server and client are not wired in yet (issue 8), so none."""
    if isinstance(connector, SimulatedConnector):
        return SimulatedPairRunner(connector.fleet)
    return None


def _recorder(store: Store | None, sweep_id: str, started_at: datetime,
              request: SweepRequest) -> Callable[[HostOutcome], None] | None:
    if store is None:
        return None
    store.begin_sweep(sweep_id, started_at.strftime("%Y-%m-%dT%H:%M:%SZ"), _options(request))
    return lambda outcome: store.record_host(sweep_id, outcome.to_dict())


def _retest(request: SweepRequest, setup: _Setup, analysis: Analysis,
            first: SweepResult) -> tuple[list[dict[str, Any]], bool]:
    """The suspects' probes again, in the first pass's mode, on the suspects' hosts only; returns
    every re-tested host (any status, with its first-pass facts) and whether the re-test was
    interrupted."""
    suspect_hosts = sorted({s.measurement.host for s in analysis.suspects})
    probes = tuple(sorted({s.measurement.probe for s in analysis.suspects}))
    options = dataclasses.replace(request.sweep, probe=dataclasses.replace(request.sweep.probe, names=probes))
    wanted = set(suspect_hosts)
    specs = [host for host in setup.hosts if host.label in wanted]
    again = run_sweep(specs, options, setup.connector, setup.bundle, QuietProgress())
    facts = {host.host: host.facts for host in first.hosts}
    return [{**host.to_dict(), "facts": facts[host.host]} for host in again.hosts], again.interrupted


def _options(request: SweepRequest) -> dict[str, Any]:
    probe = request.sweep.probe
    return {"probes": list(probe.names), "duration_s": probe.duration_s, "max_gpu_mem_mib": probe.max_gpu_mem_mib,
            "dtype": probe.dtype, "sequential": probe.sequential, "deadline_s": probe.deadline_s,
            "fanout": request.sweep.fanout, "simulate": request.simulate_path, "retest": request.retest,
            "links": request.links}
