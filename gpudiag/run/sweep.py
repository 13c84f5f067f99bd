"""A whole sweep, phase by phase: which probes run where, in which phase, and what is kept.

1. Node probes on every host at once (bounded by the fan-out), each host stored as it finishes.
2. Analysis against the fleet, the stored baseline and the SKU figures.
3. Suspects re-tested (their probes only, in the first pass's mode: faults that show only
   under full load must show again) on their hosts; only what repeats is confirmed.
4. Pair tests between the nodes (gpudiag.links), over the fabric where there is a topology.
5. Analysis again, with the re-test and the links: the findings and the job impact.
6. The finished document stored.

Input errors (hosts, SSH configuration, thresholds, fleet file, store, baseline) are raised
before anything runs on a node.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from ..analysis import Analysis, PriorCounts, analyse, prior_counts
from ..analysis.speed import not_retested
from ..analysis.suspects import Suspect, single_runs
from ..analysis.thresholds import Thresholds, load_thresholds, small_fleet_thresholds
from ..bundle import Bundle, BundleMissing, locate_bundle
from ..errors import InputError, InstallationError
from ..fabric.attribution import FabricAttribution
from ..fabric.findings import fabric_findings, fabric_impact
from ..fabric.lldp import with_lldp
from ..fabric.model import Topology
from ..fabric.plan import FabricPlan
from ..fabric.readers import chosen_topology
from ..fabric.schedule import stream_count
from ..fabric.tracing import TopologyTracer
from ..findings import Finding
from ..hosts import HostSpec, fold_hosts, load_hosts
from ..links.addresses import check_net_address, data_addresses
from ..links.attribution import link_thresholds
from ..links.impact import link_impact, with_network
from ..links.linkfindings import link_findings
from ..links.remote import PairTestOptions, RemotePairRunner
from ..links.rounds import LinkRun, PairRunner, PlainPlan, run_links
from ..links.schedule import SCREEN, next_stride
from ..pause import Focus, focus_hosts, focused_thresholds
from ..pause.focus import further_peers_plan, tie_break_plan
from ..store.baselines import Baseline, chosen_baseline
from ..store.store import Store
from ..words import plural
from .budget import BUDGET_STATUS, MIN_PHASE_S, RunBudget, out_of_budget
from .connection import Connection
from .fanout import (
    TIMEOUT,
    Connector,
    HostOutcome,
    SweepOptions,
    SweepResult,
    interrupted_host,
    new_sweep_id,
    probe_hosts,
)
from .impostors import set_aside_impostors
from .nodepeers import NodePeers, joined, node_peer_bound, saying, undecided, with_further_nodes
from .peers import FurtherPeers, PeerPairRunner
from .progress import RoundsOf, StageOf
from .request import AUTO_LINKS, SweepRequest
from .runtime import Runtime
from .sweepstore import finish, last_stride, recorder, stored_options, with_trends
from .trendretest import SlidesRetested, retest_slides

FACTS = "facts"


@dataclass(frozen=True)
class _Setup:
    hosts: list[HostSpec]
    connection: Connection  # the command line's (gpudiag.run.connection), built for these hosts
    thresholds: Thresholds
    store: Store | None
    baseline: Baseline | None
    bundle: Bundle
    sweep: SweepOptions  # the first pass's (_first_pass_options): the request's, as the connection runs it
    focus: Focus | None = None  # --suspects: who is a suspect and who a reference
    topology: Topology | None = None  # the fabric between the hosts (--topology, or a simulated fleet's)

    @property
    def connector(self) -> Connector:
        return self.connection.connector


def run_sweep(request: SweepRequest, runtime: Runtime | None = None) -> SweepResult:
    """Run every phase; returns the analysed sweep, interrupted or not (the runtime's ``gate``
    decides what an interrupt stops, its ``clock`` is what the ``--budget`` counts on: see
    gpudiag.run.runtime; by default a quiet run). Raises InputError/StoreError before any node
    is touched when an input is bad. The request is read as it was built: what the run decides
    itself (the first pass's options, the screen's stride, each phase's time) is worked out
    once, beside it."""
    runtime = runtime or Runtime()
    budget = RunBudget.start(request.budget_s, runtime.clock) if request.budget_s is not None else None
    setup = _set_up(request, runtime)
    try:
        return _run(request, setup, runtime, budget)
    finally:
        setup.connector.close()
        if setup.store is not None:
            setup.store.close()


def _first_pass_options(sweep: SweepOptions, fanout: int) -> SweepOptions:
    """The request's ``sweep`` as its first pass runs it: with the facts probe always in (without
    the GPU model and driver, results of every model and driver would pool into one key, or not
    be compared), at the ``fanout`` the connection allows."""
    names = sweep.probe.names
    probe = sweep.probe if not names or FACTS in names else dataclasses.replace(sweep.probe, names=(FACTS, *names))
    return dataclasses.replace(sweep, probe=probe, fanout=fanout)


def _set_up(request: SweepRequest, runtime: Runtime) -> _Setup:
    thresholds = load_thresholds(request.judging.thresholds_path)
    check_net_address(request.links.net_address)
    stand_in = request.reach.stand_in
    # Hosts named beside a stand-in fleet are those of its nodes to sweep (a node it lacks is unreachable).
    hosts = (list(stand_in.host_specs()) if stand_in is not None and not request.hosts_argument
             else load_hosts(request.hosts_argument or "", runtime.stdin))
    hosts, focus = focus_hosts(hosts, request.focus)
    # The reference peers are the suspects' fleet; a small job's hosts are its own.
    thresholds = focused_thresholds(thresholds, focus) if focus else small_fleet_thresholds(thresholds, len(hosts))
    connection = runtime.connect(request.reach, hosts, request.sweep.fanout)
    store = Store.open(request.judging.store_path) if request.judging.store_path else None
    baseline = chosen_baseline(store, request.judging.baseline_name)
    try:
        bundle = locate_bundle()
    except BundleMissing as missing:
        raise InstallationError(str(missing)) from missing
    return _Setup(hosts, connection, thresholds, store, baseline, bundle,
                  _first_pass_options(request.sweep, connection.fanout), focus, _topology(request))


def _topology(request: SweepRequest) -> Topology | None:
    """The fabric the link phase plans and judges with: the --topology files, else a simulated
    fleet's own fabric; none for --topology none or --links none. Raises InputError for a file
    that cannot be read (before any node is touched)."""
    if request.links.mode == "none":
        return None
    stand_in = request.reach.stand_in
    return chosen_topology(request.links.topology, stand_in.topology() if stand_in is not None else None)


@dataclass(frozen=True)
class _Retested:
    """The re-test phase: whether it ran (``ran``: its suspects are judged by it), every re-tested
    host of every run (None: interrupted before any), the suspects left unchecked without one,
    what was skipped (the run's notes) and whether the run was interrupted by its end."""

    ran: bool = False
    hosts: list[HostOutcome] | None = None
    unretested: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()
    interrupted: bool = False


@dataclass(frozen=True)
class _Linked:
    """The link phase: its pair tests (None: none ran), what it found (in the order the analysis
    gets it), the fabric's attribution where a topology judged it, the topology (with what the
    nodes' LLDP filled in) and the run's notes."""

    run: LinkRun | None = None
    findings: tuple[Finding, ...] = ()
    fabric: FabricAttribution | None = None
    topology: Topology | None = None
    notes: tuple[str, ...] = ()

    @property
    def interrupted(self) -> bool:
        return self.run is not None and self.run.interrupted


def _run(request: SweepRequest, setup: _Setup, runtime: Runtime, budget: RunBudget | None = None) -> SweepResult:
    """The phases in order. The remote ones (node probes, re-test, links) stop at an interrupt
    and keep what finished; the local ones (analysis, the store's final write) run to their end
    whatever arrives, and no remote phase starts after an interrupt (see gpudiag.run.interrupts).
    With a ``budget`` every remote phase ends by its deadline, and what it cut short is
    ``unchecked`` (gpudiag.run.budget)."""
    started_at = datetime.now(timezone.utc)
    sweep_id = new_sweep_id(started_at)
    stride = _screen_stride(request, setup)
    record = recorder(setup.store, sweep_id, started_at, stored_options(request, setup.sweep, stride),
                       [host.label for host in setup.hosts])
    first = _first_pass(setup, runtime, budget, record, started_at, sweep_id)
    first = set_aside_impostors(first, setup.store, record)
    interrupted = first.interrupted or runtime.gate.received
    previous, analysis = _first_analysis(setup, runtime, first, sweep_id, interrupted, request.judging.slurm_gpus)
    wider = None if interrupted else _node_peers(request, setup, runtime, budget, first, analysis, record)
    if wider is None:
        return _rest(request, setup, runtime, budget, first, previous, analysis, interrupted, stride)
    setup, first, close = wider
    try:
        interrupted = first.interrupted or runtime.gate.received
        previous, analysis = _first_analysis(setup, runtime, first, sweep_id, interrupted,
                                             request.judging.slurm_gpus)
        return _rest(request, setup, runtime, budget, first, previous, analysis, interrupted, stride)
    finally:
        close()  # the further nodes' connection (the run closes its own)


def _rest(request: SweepRequest, setup: _Setup, runtime: Runtime, budget: RunBudget | None, first: SweepResult,
          previous: PriorCounts, analysis: Analysis, interrupted: bool, stride: int) -> SweepResult:
    """The phases after the first analysis: re-test, sliding parts, links, the final analysis."""
    retested = _retest_suspects(request, setup, runtime, budget, first, analysis.suspects, interrupted)
    interrupted = interrupted or retested.interrupted
    slides = _retest_slides(request, setup, runtime, budget, first, interrupted)
    interrupted = interrupted or slides.interrupted
    linked = _Linked() if interrupted else _link_tests(request, setup, runtime, budget, first, stride)
    interrupted = interrupted or runtime.gate.received or linked.interrupted
    extra = [*retested.unretested, *linked.findings]
    if retested.ran or extra:
        analysis = _final_analysis(setup, first, previous, retested, extra, interrupted)
    result = _result(setup, first, analysis, linked, interrupted, (*retested.notes, *slides.notes, *linked.notes))
    return finish(setup.store, with_trends(setup.store, setup.thresholds, result, runtime, slides.trends),
                  runtime)


def _node_peers(request: SweepRequest, setup: _Setup, runtime: Runtime, budget: RunBudget | None,
                first: SweepResult, analysis: Analysis,
                record: Callable[[HostOutcome], None]) -> tuple[_Setup, SweepResult, Callable[[], None]] | None:
    """A ``--suspects`` sweep whose references' own level is shifted (gpudiag.run.nodepeers):
    further nodes of the job probed, those that finished joining the references, with a
    connection that reaches both, and what closes the further nodes' connection; None where
    nothing asked for them (or the budget is spent)."""
    focus = setup.focus
    asking = undecided(analysis.findings, focus)
    if focus is None or not asking:
        return None
    bound = node_peer_bound(focus)
    wanted = list(focus.others[:bound])
    because = tuple(f"{f.kind} {f.host}" for f in asking)
    need = max([MIN_PHASE_S, *(h.duration_s for h in first.hosts if h.ok)])  # as long as the first pass took
    if budget is not None and not budget.fits(need):  # said, and the sweep goes on with its own hosts
        return _no_node_peers(setup, first, NodePeers((), bound, because, {
            h.label: f"{BUDGET_STATUS}: {budget.reason()} (a first pass took {need:.0f} s)" for h in wanted}))
    runtime.progress.phase(f"probing {plural(len(wanted), 'further node')} of the job "
                           f"({fold_hosts(h.label for h in wanted)}): the references' own level is shifted")
    try:
        connection = runtime.connect(request.reach, wanted, setup.sweep.fanout)
    except InputError as error:  # no reach for them: said, and the sweep goes on with its own hosts
        return _no_node_peers(setup, first, NodePeers((), bound, because, {h.label: str(error) for h in wanted}))
    options = dataclasses.replace(_within(setup.sweep, budget), fanout=connection.fanout)
    outcomes = runtime.gate.run_phase(
        lambda: probe_hosts(wanted, options, connection.connector, setup.bundle,
                            StageOf(runtime.progress, f"further nodes {fold_hosts(h.label for h in wanted)}"),
                            on_host_done=lambda outcome: record(outcome) if outcome.ok else None,
                            started_at=first.started_at, sweep_id=first.sweep_id, say=runtime.gate.say,
                            clock=runtime.clock, deadline=_deadline(budget), unchecked_findings=False).hosts,
        lambda: ())
    combined = set_aside_impostors(dataclasses.replace(first, hosts=(*first.hosts, *outcomes)), setup.store, record)
    first, wider, specs = with_further_nodes(combined, wanted, focus, bound, because)
    first = dataclasses.replace(first, interrupted=first.interrupted or runtime.gate.received)
    setup = dataclasses.replace(setup, hosts=[*setup.hosts, *specs], focus=wider,
                                connection=joined(setup.connection, connection, [spec.label for spec in specs]),
                                thresholds=focused_thresholds(setup.thresholds, wider))
    return setup, first, connection.connector.close


def _no_node_peers(setup: _Setup, first: SweepResult,
                   peers: NodePeers) -> tuple[_Setup, SweepResult, Callable[[], None]]:
    """The sweep as it was, saying that no further node could be probed and why."""
    return setup, saying(first, peers), lambda: None


def _screen_stride(request: SweepRequest, setup: _Setup) -> int:
    """The link screen's stride: the request's; 1 for a --suspects sweep (its hosts come suspect,
    its references, …: neighbours); else one more than the last stored sweep's, so successive
    sweeps reach every pair in turn."""
    if request.links.screen_stride is not None:
        return request.links.screen_stride
    if request.focus is not None:
        return 1
    return next_stride(last_stride(setup.store), len(setup.hosts))


def _first_pass(setup: _Setup, runtime: Runtime, budget: RunBudget | None, record: Callable[[HostOutcome], None],
                started_at: datetime, sweep_id: str) -> SweepResult:
    """The node probes on every host, each host's time limit within the budget (a host that ran
    out of it says so); every host ``interrupted`` when an interrupt came before they could start."""
    gate = runtime.gate
    focus = setup.focus.to_dict() if setup.focus else None

    def none_started() -> SweepResult:
        outcomes = tuple(interrupted_host(host) for host in setup.hosts)
        return SweepResult(sweep_id, started_at, datetime.now(timezone.utc), outcomes, (), interrupted=True)

    options = _within(setup.sweep, budget)
    first = gate.run_phase(lambda: probe_hosts(setup.hosts, options, setup.connector, setup.bundle, runtime.progress,
                                               on_host_done=record, started_at=started_at, sweep_id=sweep_id,
                                               say=gate.say, clock=runtime.clock, deadline=_deadline(budget),
                                               unchecked_findings=False),
                           none_started)
    if budget is not None:
        _blame_budget(first, budget)
    # Each host that did not finish gets its `unchecked` finding from the analysis, which always
    # runs: the first pass makes none of its own (a fleet-sized set, made only to be dropped).
    return dataclasses.replace(first, focus=focus, findings=())


def _first_analysis(setup: _Setup, runtime: Runtime, first: SweepResult, sweep_id: str,
                    interrupted: bool, slurm_gpus: Mapping[str, int]) -> tuple[PriorCounts, Analysis]:
    """The first pass analysed (each host a mapping whose records are unpacked one host at a
    time), and the error counters of each host's last stored sweep (their growth since then
    decides: they count since the driver loaded), with the GPUs Slurm is configured to give each
    host (``slurm_gpus``)."""
    finished = sum(h.ok for h in first.hosts)
    if interrupted:
        runtime.gate.say(f"analysing the {plural(finished, 'host')} that finished" if finished
                         else "no host finished its probes: each is reported unchecked")
    elif finished:
        runtime.progress.phase(f"analysing {plural(finished, 'host')}")
    previous = prior_counts(setup.store.previous_hosts([h.host for h in first.hosts if h.ok], sweep_id)
                            if setup.store else ())
    previous.slurm_gpus.update(slurm_gpus)
    return previous, analyse(first.hosts, setup.thresholds, baseline=setup.baseline, interrupted=interrupted,
                             previous_hosts=previous)


def _retest_suspects(request: SweepRequest, setup: _Setup, runtime: Runtime, budget: RunBudget | None,
                     first: SweepResult, suspects: Sequence[Suspect], interrupted: bool) -> _Retested:
    """The suspects re-tested, where asked and as far as the budget allows (_to_retest)."""
    chosen, unretested, notes = _to_retest(request.judging.retest, budget, first, suspects, interrupted)
    if not chosen:
        return _Retested(unretested=tuple(unretested), notes=tuple(notes), interrupted=interrupted)
    count = len({s.measurement.host for s in chosen})
    runs = max(s.runs for s in chosen)
    runtime.progress.phase(f"re-testing {plural(len(chosen), 'suspect')} on {plural(count, 'host')}"
                           + (f", up to {runs} runs" if runs > 1 else ""))
    hosts, interrupted = _retest(setup, chosen, first, runtime, budget)
    return _Retested(True, hosts, tuple(unretested), tuple(notes), interrupted)


def _retest_slides(request: SweepRequest, setup: _Setup, runtime: Runtime, budget: RunBudget | None,
                   first: SweepResult, interrupted: bool) -> SlidesRetested:
    """The re-test of GPUs sliding against their siblings (gpudiag.run.trendretest), in a sweep
    with a store whose suspects are re-tested; none after an interrupt, nor within a --budget (a
    pre-flight leaves its time to the checks it planned: a watch drains nothing)."""
    if setup.store is None or not request.judging.retest or interrupted or budget is not None:
        return SlidesRetested()
    return retest_slides(setup.store, first, setup.thresholds, runtime.progress,
                         lambda runs: _probe_again(setup, runs, first, runtime, budget, "trend re-test run"))


def _to_retest(asked: bool, budget: RunBudget | None, first: SweepResult, suspects: Sequence[Suspect],
               interrupted: bool) -> tuple[list[Suspect], list[Finding], list[str]]:
    """The suspects to re-test (none after an interrupt), the ``unchecked`` findings of those left
    without one, and the notes of what the budget skipped. Each suspect not re-tested is an
    unchecked finding, never a pass: "measured slow once" is no verdict."""
    if not asked:
        return [], ([] if interrupted else not_retested(single_runs(suspects))), []
    if not suspects or interrupted:
        return [], [], []
    chosen, notes = list(suspects), []
    if budget is not None and not budget.fits(_retest_need_s(first, chosen)):
        # Several runs no longer fit: one run of what one run flagged (a screen alone is no finding).
        chosen = single_runs(chosen)
        notes.append(f"the re-test of noisy results in several runs was skipped: {budget.reason()}")
    if chosen and budget is not None and not budget.fits(_retest_need_s(first, chosen)):
        # unconfirmed, and each suspect a gap: neither confirmed nor cleared, never healthy
        notes.append(f"the re-test of {len(chosen)} suspects was skipped: {budget.reason()}")
        return [], not_retested(chosen, budget.reason()), notes
    return chosen, [], notes


def _link_tests(request: SweepRequest, setup: _Setup, runtime: Runtime, budget: RunBudget | None,
                first: SweepResult, stride: int) -> _Linked:
    """The link phase over the topology the nodes' LLDP completes, and what it found: hosts left
    out of it, the suspect links and NICs, the fabric's slow parts (where it ran its whole
    schedule) and, where the budget cut it short, every host it left unchecked."""
    topology, notes = setup.topology, []
    if topology is not None:  # the nodes' LLDP fills what the file leaves out
        topology, notes = with_lldp(topology, [(h.host, h.facts) for h in first.hosts if h.ok])
        setup = dataclasses.replace(setup, topology=topology)
    link_run, found, fabric = _links(request, setup, first, runtime, budget, stride)
    findings = list(found)
    if link_run is not None:
        findings += link_findings(link_run.attribution, setup.thresholds.deficit_fail_pct)
    if link_run is not None and fabric is not None and topology is not None and not link_run.cut_short:
        tested = sorted({host for record in link_run.records for host in (record.result.a, record.result.b)})
        findings += fabric_findings(fabric, topology, setup.thresholds.deficit_fail_pct, tested)
    if link_run is not None and link_run.cut_short and budget is not None:
        # Verdicts need the whole schedule: every host of the link phase is left unchecked.
        findings += [out_of_budget(h.host, "pair tests", budget) for h in first.hosts if h.ok]
    return _Linked(link_run, tuple(findings), fabric, topology, tuple(notes))


def _final_analysis(setup: _Setup, first: SweepResult, previous: PriorCounts, retested: _Retested,
                    extra: list[Finding], interrupted: bool) -> Analysis:
    """The first pass analysed again with the re-test and what else was found (``extra``). An
    interrupted re-test confirms nothing, and its suspects are no findings (only counted)."""
    return analyse(first.hosts, setup.thresholds, baseline=setup.baseline,
                   retest_hosts=None if interrupted else retested.hosts, retested=retested.ran, extra=extra,
                   interrupted=interrupted, previous_hosts=previous)


def _result(setup: _Setup, first: SweepResult, analysis: Analysis, linked: _Linked, interrupted: bool,
            notes: Sequence[str]) -> SweepResult:
    """The finished sweep: the first pass with the findings, the job impact (the links' and the
    fabric's too), the pair tests and the references they were judged by."""
    link_run = linked.run
    links = tuple(record.to_dict() for record in link_run.records) if link_run else ()
    impact = analysis.impact.to_dict()
    if link_run is not None:
        impact.update(link_impact(link_run, impact["exclude"]) or {})
        if linked.fabric is not None and linked.topology is not None:
            impact.update(fabric_impact(linked.fabric, linked.topology) or {})
        impact = with_network(impact, link_run, impact.get("fabric_slowdown_pct"))
    groups = tuple(r.to_dict() for r in link_run.attribution.references) if link_run is not None else ()
    tie = link_run.tie_break if link_run is not None else None  # further peers of a --suspects sweep
    focus = first.focus if tie is None or first.focus is None else {**first.focus, "extra_peers": tie.to_dict()}
    return dataclasses.replace(first, findings=analysis.findings, impact=impact,
                               comparison=_comparison(analysis, link_run), links=links, link_groups=groups,
                               references=analysis.references, focus=focus,
                               finished_at=datetime.now(timezone.utc), interrupted=interrupted,
                               warnings=(*setup.connection.notes, *first.warnings, *notes,
                                         *([tie.describe()] if tie is not None and tie.note else [])))


def _comparison(analysis: Analysis, link_run: LinkRun | None) -> dict[str, int]:
    """How many results were compared with a reference and how many had none: the node records',
    and the measured pairs' of the link phase."""
    counts = analysis.comparison_counts()
    for reference in link_run.attribution.references if link_run is not None else ():
        counts["results_compared" if reference.compared else "results_not_compared"] += reference.pairs
    return counts


def _within(sweep: SweepOptions, budget: RunBudget | None) -> SweepOptions:
    """``sweep`` with each host's time limit cut to what the budget has left now."""
    if budget is None:
        return sweep
    return dataclasses.replace(sweep, host_timeout_s=min(sweep.command_timeout_s, max(budget.remaining_s(), 0.1)))


def _deadline(budget: RunBudget | None) -> float | None:
    """When every remote phase ends, on the run's clock (None: no budget)."""
    return budget.deadline if budget is not None else None


def _retest_need_s(first: SweepResult, suspects: Sequence[Suspect]) -> float:
    """Seconds a re-test needs: as long as the first pass took on the slowest suspect's host
    (the same probes, or fewer, on the same host), once for each of its runs."""
    runs: dict[str, int] = {}
    for s in suspects:
        runs[s.measurement.host] = max(runs.get(s.measurement.host, 1), s.runs)
    return max([MIN_PHASE_S, *(h.duration_s * runs[h.host] for h in first.hosts if h.host in runs)])


def _blame_budget(first: SweepResult, budget: RunBudget) -> None:
    """A host that ran out of time ran out of the budget: its error says so (never a pass)."""
    for host in first.hosts:
        if host.status == TIMEOUT:
            host.error = f"node probes {budget.reason()} ({host.error})"


_LinkPhase = tuple[LinkRun | None, list[Finding], FabricAttribution | None]


def _links(request: SweepRequest, setup: _Setup, first: SweepResult, runtime: Runtime, budget: RunBudget | None,
           stride: int) -> _LinkPhase:
    """The link phase over the hosts whose node probes passed (``screen``, ``full``), an
    ``unchecked`` finding for each of them whose data-plane address could not be found (left
    out of the rounds), and the fabric's attribution where a topology judged it; None when no
    pair test runs (``none``). An interrupt before the first round leaves no link run (nothing
    was measured)."""
    mode = SCREEN if request.links.mode == AUTO_LINKS else request.links.mode
    if mode == "none":
        return None, [], None
    ok_hosts = [h.host for h in first.hosts if h.ok]
    if budget is not None and len(ok_hosts) >= 2 and not budget.fits():
        return None, [out_of_budget(host, "pair tests", budget) for host in ok_hosts], None
    if len(ok_hosts) >= 2:
        over = f", over the fabric of {setup.topology.source}" if setup.topology is not None else ""
        runtime.progress.phase(f"pair tests between nodes ({mode}) over {len(ok_hosts)} hosts{over}"
                               + further_peers_plan(setup.focus, len(ok_hosts)))
    return runtime.gate.run_phase(lambda: _link_phase(request, setup, first, mode, runtime, budget, stride),
                                  lambda: (None, [], None))


def _link_phase(request: SweepRequest, setup: _Setup, first: SweepResult, mode: str, runtime: Runtime,
                budget: RunBudget | None, stride: int) -> _LinkPhase:
    hosts = [host.host for host in first.hosts if host.ok]
    connection = setup.connection
    pair = request.links.pair
    if setup.topology is not None:  # enough streams for every uplink of a leaf to carry some
        pair = dataclasses.replace(pair, streams=stream_count(setup.topology, pair.streams))
    peers = _further_peers(request, setup, first, runtime, budget)
    if connection.pairs is not None:
        runner: PairRunner = connection.pairs(pair)
        missing: list[Finding] = []
    else:
        assert connection.session_of is not None, "pair tests run over each host's pooled SSH or srun session"
        ok = set(hosts)
        addresses, missing = data_addresses(
            request.links.net_address, [spec for spec in setup.hosts if spec.label in ok], connection.session_of,
            connection.ssh_addresses, pair.python, connection.fanout,
            budget.remaining_s() if budget is not None else None)
        hosts = [host for host in hosts if host in addresses]
        tracer = TopologyTracer(setup.topology) if setup.topology is not None else None
        runner = (RemotePairRunner(connection.session_of, addresses, pair, tracer) if peers is None
                  else PeerPairRunner(connection.session_of, addresses, pair, tracer, peers))  # the peers' sessions too
    try:
        run, fabric = _run_link_plan(request, setup, hosts, mode, runner, runtime, budget, stride, pair, peers)
    finally:
        if peers is not None:
            peers.close()
    return run, missing, fabric


def _further_peers(request: SweepRequest, setup: _Setup, first: SweepResult, runtime: Runtime,
                   budget: RunBudget | None) -> FurtherPeers | None:
    """How a --suspects sweep reaches the job's other nodes for a tie-break (gpudiag.run.peers):
    with the request's reach, the first pass's options with the facts probe alone; None without
    a focus or another node."""
    if setup.focus is None or not setup.focus.others:
        return None
    facts = dataclasses.replace(setup.sweep, probe=dataclasses.replace(setup.sweep.probe, names=(FACTS,)),
                                host_probes=None)
    return FurtherPeers(setup.focus.others, lambda hosts: runtime.connect(request.reach, hosts, setup.sweep.fanout),
                        facts, setup.bundle, first.hosts, request.links, setup.connection.ssh_addresses, runtime,
                        budget)


def _run_link_plan(request: SweepRequest, setup: _Setup, hosts: list[str], mode: str, runner: PairRunner,
                   runtime: Runtime, budget: RunBudget | None, stride: int, pair: PairTestOptions,
                   peers: FurtherPeers | None) -> tuple[LinkRun, FabricAttribution | None]:
    """The link rounds over ``hosts``, with ``peers`` to break a tie, and the fabric's attribution."""
    connection = setup.connection
    thresholds = dataclasses.replace(link_thresholds(setup.thresholds), whole_job=setup.focus is None)
    if request.links.pair.line_rate_gbps is not None:  # the operator's figure of what a link delivers: tcp reaches it
        thresholds = dataclasses.replace(thresholds, floor_backends=(*thresholds.floor_backends, "tcp"))
    plan = (FabricPlan(setup.topology, mode, thresholds, setup.baseline, pair.streams)
            if setup.topology is not None else None)
    # A paused job's references that cannot decide: further peers from the job's other nodes, bounded.
    tie = tie_break_plan(setup.focus, hosts, plan or PlainPlan(mode, thresholds, stride, setup.baseline), peers)
    run = run_links(hosts, mode, runner, thresholds, parallel=connection.pairs_at_once, stride=stride,
                    baseline=setup.baseline, deadline=_deadline(budget), clock=runtime.clock, plan=tie or plan,
                    watch=RoundsOf(runtime.progress))
    run = dataclasses.replace(run, tie_break=tie.outcome()) if tie is not None else run
    return run, plan.latest if plan is not None and not (run.interrupted or run.cut_short) else None


def _retest(setup: _Setup, suspects: Sequence[Suspect], first: SweepResult, runtime: Runtime,
            budget: RunBudget | None) -> tuple[list[HostOutcome] | None, bool]:
    """The suspects' probes again, in the first pass's mode, on the suspects' hosts only, each
    host's time limit within the budget; run k (from 1) re-tests the suspects that ask for k runs
    or more (gpudiag.analysis.noisy), with their probes, on their hosts. Returns every re-tested
    host of every run (any status, with its first-pass facts) and whether the re-test was
    interrupted."""
    runs: list[dict[str, set[str]]] = []
    for run in range(1, max((s.runs for s in suspects), default=0) + 1):
        by_host: dict[str, set[str]] = defaultdict(set)
        for s in suspects:  # each host its own suspects' probes (a P2P run costs a GEMM host nothing)
            if s.runs >= run:
                by_host[s.measurement.host].add(s.measurement.probe)
        runs.append(by_host)
    return _probe_again(setup, runs, first, runtime, budget, "re-test run")


def _probe_again(setup: _Setup, runs: Sequence[Mapping[str, Iterable[str]]], first: SweepResult, runtime: Runtime,
                 budget: RunBudget | None, label: str) -> tuple[list[HostOutcome] | None, bool]:
    """Each of ``runs`` (per host, the probes to run there) in turn, in the first pass's mode,
    each host's time limit within the budget; a run after the first starts only while the budget
    leaves MIN_PHASE_S. Returns every host of every run (any status, with its first-pass facts;
    None: a run was interrupted before any of its hosts started) and whether it was interrupted."""
    gate, deadline = runtime.gate, _deadline(budget)
    facts = {host.host: host.facts for host in first.hosts}
    outcomes: list[HostOutcome] = []
    sweep = _within(setup.sweep, budget)
    for run, by_host in enumerate(runs, start=1):
        if run > 1 and deadline is not None and runtime.clock() + MIN_PHASE_S > deadline:
            break  # the budget is spent: the runs that finished judge (gpudiag.analysis.noisy)
        probes = tuple(sorted({probe for names in by_host.values() for probe in names}))
        options = dataclasses.replace(sweep, probe=dataclasses.replace(sweep.probe, names=probes),
                                      host_probes={host: tuple(sorted(names)) for host, names in by_host.items()})
        specs = [host for host in setup.hosts if host.label in by_host]
        shown = StageOf(runtime.progress, f"{label} {run} of {len(runs)}")
        again = gate.run_phase(lambda specs=specs, options=options, shown=shown: probe_hosts(
            specs, options, setup.connector, setup.bundle, shown, say=gate.say, clock=runtime.clock,
            deadline=deadline), lambda: None)
        if again is None:
            return None, True
        outcomes += [host.with_facts(facts[host.host]) for host in again.hosts]
        if again.interrupted:
            return outcomes, True
    return outcomes, False
