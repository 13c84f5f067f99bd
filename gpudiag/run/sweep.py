"""A whole sweep, phase by phase: which probes run where, in which phase, and what is kept.

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
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..analysis import Analysis, SweepReader, analyse, prior_counts
from ..analysis.speed import not_retested
from ..analysis.suspects import Suspect, single_runs
from ..analysis.thresholds import Thresholds, load_thresholds, small_fleet_thresholds
from ..bundle import Bundle, BundleMissing, locate_bundle
from ..errors import InputError, InstallationError, StoreError
from ..fabric.attribution import FabricAttribution
from ..fabric.findings import fabric_findings, fabric_impact
from ..fabric.lldp import with_lldp
from ..fabric.model import Topology
from ..fabric.plan import FabricPlan
from ..fabric.readers import chosen_topology
from ..fabric.schedule import stream_count
from ..fabric.tracing import TopologyTracer
from ..findings import Finding, unchecked
from ..hosts import HostSpec, load_hosts
from ..links.addresses import address_refusal, usable_address
from ..links.attribution import link_thresholds
from ..links.impact import link_impact, with_network
from ..links.linkfindings import link_findings
from ..links.protocol import PairProtocolError, interface_event, parse_event, plain_text
from ..links.remote import RemotePairRunner
from ..links.rounds import LinkRun, PairRunner, run_links
from ..links.schedule import SCREEN, next_stride
from ..pause import Focus, focus_hosts, focused_thresholds
from ..schema.times import iso_time
from ..store.baselines import Baseline, chosen_baseline
from ..store.store import Store
from ..transport import Session, TransportError
from ..words import plural
from .budget import MIN_PHASE_S, RunBudget, out_of_budget
from .connection import Connection
from .fanout import (
    TIMEOUT,
    Connector,
    HostOutcome,
    SweepResult,
    interrupted_host,
    new_sweep_id,
    probe_hosts,
)
from .interrupts import InterruptGate
from .progress import RoundsOf, StageOf, SweepProgress
from .request import AUTO_LINKS, SweepRequest
from .runtime import Runtime

FACTS = "facts"
# --net-address: where a host's data-plane address comes from (or iface:NAME on the node).
NET_ADDRESS_SOURCES = ("auto", "field", "ssh")
IFACE_PREFIX = "iface:"
# Seconds a node gets to say an interface's addresses.
ADDRESS_LOOKUP_S = 60.0


@dataclass(frozen=True)
class _Setup:
    hosts: list[HostSpec]
    connection: Connection  # the command line's (gpudiag.run.connection), built for these hosts
    thresholds: Thresholds
    store: Store | None
    baseline: Baseline | None
    bundle: Bundle
    focus: Focus | None = None  # --suspects: who is a suspect and who a reference
    topology: Topology | None = None  # the fabric between the hosts (--topology, or a simulated fleet's)

    @property
    def connector(self) -> Connector:
        return self.connection.connector


def run_sweep(request: SweepRequest, runtime: Runtime | None = None) -> SweepResult:
    """Run every phase; returns the analysed sweep, interrupted or not (the runtime's ``gate``
    decides what an interrupt stops, its ``clock`` is what the ``--budget`` counts on: see
    gpudiag.run.runtime; by default a quiet run). Raises InputError/StoreError before any node
    is touched when an input is bad."""
    runtime = runtime or Runtime()
    budget = RunBudget.start(request.budget_s, runtime.clock) if request.budget_s is not None else None
    request = with_facts(request)
    setup = _set_up(request, runtime)
    request = dataclasses.replace(request, sweep=dataclasses.replace(request.sweep, fanout=setup.connection.fanout,
                                                                      clock=runtime.clock))
    try:
        return _run(request, setup, runtime.progress, runtime.gate, budget)
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
    return _Setup(hosts, connection, thresholds, store, baseline, bundle, focus, _topology(request))


def _topology(request: SweepRequest) -> Topology | None:
    """The fabric the link phase plans and judges with: the --topology files, else a simulated
    fleet's own fabric; none for --topology none or --links none. Raises InputError for a file
    that cannot be read (before any node is touched)."""
    if request.links.mode == "none":
        return None
    stand_in = request.reach.stand_in
    return chosen_topology(request.links.topology, stand_in.topology() if stand_in is not None else None)


def _run(request: SweepRequest, setup: _Setup, progress: SweepProgress, gate: InterruptGate,
         budget: RunBudget | None = None) -> SweepResult:
    """The phases in order. The remote ones (node probes, re-test, links) stop at an interrupt
    and keep what finished; the local ones (analysis, the store's final write) run to their end
    whatever arrives, and no remote phase starts after an interrupt (see gpudiag.run.interrupts).
    With a ``budget`` every remote phase ends by its deadline, and what it cut short is
    ``unchecked`` (gpudiag.run.budget)."""
    started_at = datetime.now(timezone.utc)
    sweep_id = new_sweep_id(started_at)
    if request.links.screen_stride is None:
        # Each screen moves to the next stride, so successive sweeps reach every pair in turn.
        stride = next_stride(_last_stride(setup.store), len(setup.hosts))
        request = dataclasses.replace(request, links=dataclasses.replace(request.links, screen_stride=stride))
    record = _recorder(setup.store, sweep_id, started_at, request)
    first = _first_pass(_within(request, budget), setup, progress, gate, record, started_at, sweep_id)
    run_notes: list[str] = []
    if budget is not None:
        _blame_budget(first, budget)
    interrupted = first.interrupted or gate.received
    finished = sum(h.ok for h in first.hosts)
    if interrupted:
        gate.say(f"analysing the {plural(finished, 'host')} that finished" if finished
                 else "no host finished its probes: each is reported unchecked")
    elif finished:
        progress.phase(f"analysing {plural(finished, 'host')}")
    hosts = first.hosts  # each a mapping whose records are unpacked one host at a time
    # Error counters count since the driver loaded: their growth since each host's last stored sweep decides.
    previous = prior_counts(setup.store.previous_hosts([h.host for h in hosts if h.ok], sweep_id)
                            if setup.store else ())
    analysis = analyse(hosts, setup.thresholds, baseline=setup.baseline, interrupted=interrupted,
                       previous_hosts=previous)
    retest: list[HostOutcome] | None = None
    suspects = analysis.suspects
    wanted = request.judging.retest and bool(suspects) and not interrupted
    unretested: list[Finding] = []
    if wanted and budget is not None and not budget.fits(_retest_need_s(first, suspects)):
        # Several runs no longer fit: one run of what one run flagged (a screen alone is no finding).
        suspects = single_runs(suspects)
        wanted = bool(suspects)
        run_notes.append(f"the re-test of noisy results in several runs was skipped: {budget.reason()}")
    if wanted and budget is not None and not budget.fits(_retest_need_s(first, suspects)):
        wanted = False  # unconfirmed, and each suspect a gap: neither confirmed nor cleared, never healthy
        run_notes.append(f"the re-test of {len(suspects)} suspects was skipped: {budget.reason()}")
        unretested = not_retested(suspects, budget.reason())
    elif not request.judging.retest and not interrupted:
        # Each suspect is also an unchecked finding, never a pass: "measured slow once" is no verdict.
        unretested = not_retested(single_runs(suspects))
    if wanted:
        count = len({s.measurement.host for s in suspects})
        runs = max(s.runs for s in suspects)
        progress.phase(f"re-testing {plural(len(suspects), 'suspect')} on {plural(count, 'host')}"
                       + (f", up to {runs} runs" if runs > 1 else ""))
        retest, interrupted = _retest(_within(request, budget), setup, suspects, first, gate, progress)
    if setup.topology is not None and not interrupted:  # the nodes' LLDP fills what the file leaves out
        topology, notes = with_lldp(setup.topology, [(h.host, h.facts) for h in first.hosts if h.ok])
        setup = dataclasses.replace(setup, topology=topology)
        run_notes += notes
    link_run, extra, fabric = (None, [], None) if interrupted else _links(request, setup, first, gate, progress,
                                                                              budget)
    extra = [*unretested, *extra]
    interrupted = interrupted or gate.received or (link_run is not None and link_run.interrupted)
    if link_run is not None:
        extra += link_findings(link_run.attribution, setup.thresholds.deficit_fail_pct)
    if link_run is not None and fabric is not None and setup.topology is not None and not link_run.cut_short:
        tested = sorted({host for record in link_run.records for host in (record.result.a, record.result.b)})
        extra += fabric_findings(fabric, setup.topology, setup.thresholds.deficit_fail_pct, tested)
    if link_run is not None and link_run.cut_short and budget is not None:
        # Verdicts need the whole schedule: every host of the link phase is left unchecked.
        extra += [out_of_budget(h.host, "pair tests", budget) for h in first.hosts if h.ok]
    if wanted or extra:
        # An interrupted re-test confirms nothing, and its suspects are no findings (only counted).
        analysis = analyse(hosts, setup.thresholds, baseline=setup.baseline,
                           retest_hosts=None if interrupted else retest, retested=wanted, extra=extra,
                           interrupted=interrupted, previous_hosts=previous)
    links = tuple(record.to_dict() for record in link_run.records) if link_run else ()
    impact = analysis.impact.to_dict()
    if link_run is not None:
        impact.update(link_impact(link_run, impact["exclude"]) or {})
        if fabric is not None and setup.topology is not None:
            impact.update(fabric_impact(fabric, setup.topology) or {})
        impact = with_network(impact, link_run, impact.get("fabric_slowdown_pct"))
    if setup.store is not None and not interrupted:  # an interrupted sweep says so itself (gate)
        progress.phase(f"storing the sweep in {setup.store.path}")
    groups = tuple(r.to_dict() for r in link_run.attribution.references) if link_run is not None else ()
    result = dataclasses.replace(first, findings=analysis.findings, impact=impact,
                                 comparison=_comparison(analysis, link_run), links=links, link_groups=groups,
                                 references=analysis.references,
                                 finished_at=datetime.now(timezone.utc), interrupted=interrupted,
                                 warnings=(*setup.connection.notes, *first.warnings, *run_notes))
    return _finish(setup.store, result, gate)


def _comparison(analysis: Analysis, link_run: LinkRun | None) -> dict[str, int]:
    """How many results were compared with a reference and how many had none: the node records',
    and the measured pairs' of the link phase."""
    counts = analysis.comparison_counts()
    for reference in link_run.attribution.references if link_run is not None else ():
        counts["results_compared" if reference.compared else "results_not_compared"] += reference.pairs
    return counts


def _first_pass(request: SweepRequest, setup: _Setup, progress: SweepProgress, gate: InterruptGate,
                record: Callable[[HostOutcome], None], started_at: datetime, sweep_id: str) -> SweepResult:
    """The node probes on every host; every host ``interrupted`` when an interrupt came before
    they could start."""
    focus = setup.focus.to_dict() if setup.focus else None

    def none_started() -> SweepResult:
        outcomes = tuple(interrupted_host(host) for host in setup.hosts)
        return SweepResult(sweep_id, started_at, datetime.now(timezone.utc), outcomes,
                           tuple(unchecked(o.host, o.status, o.error) for o in outcomes), interrupted=True)

    first = gate.run_phase(lambda: probe_hosts(setup.hosts, request.sweep, setup.connector, setup.bundle, progress,
                                               on_host_done=record, started_at=started_at, sweep_id=sweep_id,
                                               say=gate.say), none_started)
    return dataclasses.replace(first, focus=focus)


def _finish(store: Store | None, result: SweepResult, gate: InterruptGate) -> SweepResult:
    """Store the finished document (it carries the links, the findings and the impact). A store
    that fails now costs the store its copy, never the document: the failure is a warning."""
    if store is None:
        return result
    if result.interrupted:
        gate.say(f"writing the sweep to the store {store.path}")
    try:
        # The hosts as they are (lazy mappings): the store adds only those it has not recorded yet.
        store.finish_sweep(result.sweep_id, {**result.to_dict(records=False), "hosts": result.hosts})
    except StoreError as error:
        warning = f"the store could not keep this sweep ({error}); the sweep document and exclude list still hold it"
        gate.say(f"warning: {warning}")
        return dataclasses.replace(result, warnings=(*result.warnings, warning))
    return result


def _within(request: SweepRequest, budget: RunBudget | None) -> SweepRequest:
    """The request with each host's time limit cut to what the budget has left."""
    if budget is None:
        return request
    limit = min(request.sweep.command_timeout_s, max(budget.remaining_s(), 0.1))
    return dataclasses.replace(request, sweep=dataclasses.replace(request.sweep, host_timeout_s=limit,
                                                                  deadline=budget.deadline))


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


def _links(request: SweepRequest, setup: _Setup, first: SweepResult, gate: InterruptGate,
           progress: SweepProgress, budget: RunBudget | None = None) -> _LinkPhase:
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
        progress.phase(f"pair tests between nodes ({mode}) over {len(ok_hosts)} hosts{over}")
    return gate.run_phase(lambda: _link_phase(request, setup, first, mode, progress, budget),
                          lambda: (None, [], None))


def _link_phase(request: SweepRequest, setup: _Setup, first: SweepResult, mode: str, progress: SweepProgress,
                budget: RunBudget | None = None) -> _LinkPhase:
    hosts = [host.host for host in first.hosts if host.ok]
    connection = setup.connection
    pair = request.links.pair
    if setup.topology is not None:  # enough streams for every uplink of a leaf to carry some
        pair = dataclasses.replace(pair, streams=stream_count(setup.topology, pair.streams))
    if connection.pairs is not None:
        runner: PairRunner = connection.pairs(pair)
        missing: list[Finding] = []
    else:
        assert connection.session_of is not None, "pair tests run over each host's pooled SSH or srun session"
        addresses, missing = _data_addresses(request, setup, hosts, connection.session_of, budget)
        hosts = [host for host in hosts if host in addresses]
        tracer = TopologyTracer(setup.topology) if setup.topology is not None else None
        runner = RemotePairRunner(connection.session_of, addresses, pair, tracer)
    thresholds = dataclasses.replace(link_thresholds(setup.thresholds), whole_job=setup.focus is None)
    if request.links.pair.line_rate_gbps is not None:  # the operator's figure of what a link delivers: tcp reaches it
        thresholds = dataclasses.replace(thresholds, floor_backends=(*thresholds.floor_backends, "tcp"))
    plan = (FabricPlan(setup.topology, mode, thresholds, setup.baseline, pair.streams)
            if setup.topology is not None else None)
    run = run_links(hosts, mode, runner, thresholds, parallel=connection.pairs_at_once,
                    stride=request.links.screen_stride or 1, baseline=setup.baseline,
                    deadline=budget.deadline if budget is not None else None, clock=request.sweep.clock, plan=plan,
                    watch=RoundsOf(progress))
    return run, missing, plan.latest if plan is not None and not (run.interrupted or run.cut_short) else None


def _last_stride(store: Store | None) -> int | None:
    """The screen stride of the newest stored sweep that had one (None: no such sweep)."""
    if store is None:
        return None
    for sweep in store.list_sweeps(limit=20):
        stride = sweep["options"].get("screen_stride")
        if isinstance(stride, int) and stride > 0:
            return stride
    return None


def check_net_address(source: str) -> None:
    """Raises InputError unless ``source`` is a --net-address value."""
    if source in NET_ADDRESS_SOURCES or (source.startswith(IFACE_PREFIX) and len(source) > len(IFACE_PREFIX)):
        return
    raise InputError(f"--net-address {source!r}: expected auto, field, ssh or iface:NAME (e.g. iface:ib0)")


def _data_addresses(request: SweepRequest, setup: _Setup, labels: Sequence[str],
                    session_of: Callable[[str], Session | None],
                    budget: RunBudget | None = None) -> tuple[dict[str, str], list[Finding]]:
    """Each host's data-plane address, by --net-address: ``field`` the hosts file's ``net=``,
    ``ssh`` the address SSH reaches, ``auto`` the field where given else the SSH address,
    ``iface:NAME`` the address of NAME on the node, asked within ADDRESS_LOOKUP_S and within
    what the run's ``budget`` has left. Every address is checked (gpudiag.links.addresses:
    none unspecified, multicast, link-local, loopback off this machine, or another host's SSH
    address); hosts without an address, or with one refused, get an ``unchecked`` and are left
    out of the link rounds: no other host's verdict changes."""
    source = request.links.net_address
    specs = {host.label: host for host in setup.hosts}
    if source.startswith(IFACE_PREFIX):
        interface = source[len(IFACE_PREFIX):]
        python = request.links.pair.python
        lookup_s = ADDRESS_LOOKUP_S if budget is None else max(0.1, min(ADDRESS_LOOKUP_S, budget.remaining_s()))
        with ThreadPoolExecutor(max_workers=max(1, min(request.sweep.fanout, len(labels) or 1)),
                                thread_name_prefix="address") as workers:
            answers = workers.map(lambda label: _interface_address(session_of, label, interface, python, lookup_s,
                                                                   setup.connection.ssh_addresses),
                                  labels)
            found = dict(zip(labels, answers, strict=True))
    else:
        found = {}
        for label in labels:
            field = specs[label].net_address
            if source == "field":
                found[label] = (field, None) if field else (None, "the hosts file gives no net= address "
                                                            "for it (--net-address field)")
            else:
                found[label] = (field if field and source == "auto" else setup.connection.ssh_addresses[label], None)
            address = found[label][0]
            refused = address_refusal(label, address, setup.connection.ssh_addresses) if address else None
            if refused is not None:
                where = "its net= address" if address == field else "its SSH address"
                found[label] = (None, f"{where} cannot be its data-plane address: {refused} "
                                      "(give its data-plane address as net= in the hosts file)")
    addresses = {label: address for label, (address, _) in found.items() if address}
    missing = [unchecked(label, "not pair-tested", f"left out of the link rounds: {why}")
               for label, (address, why) in found.items() if not address]
    return addresses, missing


def _interface_address(session_of: Callable[[str], Session | None], label: str, interface: str, python: str,
                       timeout_s: float = ADDRESS_LOOKUP_S,
                       ssh_addresses: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(address, None) of ``interface`` on the node (asked within ``timeout_s``): the first one it
    reports that passes gpudiag.links.addresses' checks; or (None, why not). What the node prints
    is checked line by line (gpudiag.links.protocol): a malformed ``interface`` event is a reason,
    never an address."""
    session = session_of(label)
    if session is None:
        return None, "no open SSH session to ask for its data-plane address"
    try:
        ran = session.run([python, "-m", "probes", "net-info", "--interface", interface], timeout_s)
    except TransportError as error:
        return None, f"could not ask for the address of {interface}: {error}"
    finally:
        session.close()  # the pool keeps the connection
    for line in ran.stdout.splitlines():
        try:
            event = parse_event(line)
        except PairProtocolError:
            continue  # a stray line: the answer may follow
        if event["event"] != "interface":
            continue
        try:
            reported = interface_event(event)
        except PairProtocolError as error:
            return None, f"net-info printed a malformed answer for {interface}: {error}"
        if reported.interface != interface:
            return None, f"net-info answered for {plain_text(reported.interface, 64)!r}, not {interface}"
        return usable_address(label, interface, reported.addresses, ssh_addresses or {})
    last = plain_text(ran.stderr.strip()[-200:]) if ran.stderr.strip() else "no output"
    return None, f"net-info printed no address for {interface}: {last}"


def _recorder(store: Store | None, sweep_id: str, started_at: datetime,
              request: SweepRequest) -> Callable[[HostOutcome], None]:
    """What each host does as it finishes (in a worker thread, while others still probe): the
    analysis reads it, and the store records it (a StoreError is the sweep's warning)."""
    reader = SweepReader()
    if store is not None:
        store.begin_sweep(sweep_id, iso_time(started_at), _options(request))

    def done(outcome: HostOutcome) -> None:
        records = outcome.records()  # unpacked once, for both
        if outcome.ok:
            outcome.reading = reader.read(records)
        if store is not None:
            store.record_host(sweep_id, outcome.unpacked(records.results))

    return done


def _retest(request: SweepRequest, setup: _Setup, suspects: Sequence[Suspect], first: SweepResult,
            gate: InterruptGate, progress: SweepProgress) -> tuple[list[HostOutcome] | None, bool]:
    """The suspects' probes again, in the first pass's mode, on the suspects' hosts only; run k
    (from 1) re-tests the suspects that ask for k runs or more (gpudiag.analysis.noisy), with
    their probes, on their hosts. Returns every re-tested host of every run (any status, with its
    first-pass facts) and whether the re-test was interrupted."""
    facts = {host.host: host.facts for host in first.hosts}
    outcomes: list[HostOutcome] = []
    sweep = request.sweep
    runs = max((s.runs for s in suspects), default=0)
    for run in range(1, runs + 1):
        if run > 1 and sweep.deadline is not None and sweep.clock() + MIN_PHASE_S > sweep.deadline:
            break  # the budget is spent: the runs that finished judge (gpudiag.analysis.noisy)
        wanted = [s for s in suspects if s.runs >= run]
        by_host: dict[str, set[str]] = defaultdict(set)
        for s in wanted:  # each host its own suspects' probes (a P2P run costs a GEMM host nothing)
            by_host[s.measurement.host].add(s.measurement.probe)
        probes = tuple(sorted({probe for names in by_host.values() for probe in names}))
        options = dataclasses.replace(sweep, probe=dataclasses.replace(sweep.probe, names=probes),
                                      host_probes={host: tuple(sorted(names)) for host, names in by_host.items()})
        specs = [host for host in setup.hosts if host.label in by_host]
        shown = StageOf(progress, f"re-test run {run} of {runs}")
        again = gate.run_phase(lambda specs=specs, options=options, shown=shown: probe_hosts(
            specs, options, setup.connector, setup.bundle, shown, say=gate.say), lambda: None)
        if again is None:
            return None, True
        outcomes += [host.with_facts(facts[host.host]) for host in again.hosts]
        if again.interrupted:
            return outcomes, True
    return outcomes, False


def _options(request: SweepRequest) -> dict[str, Any]:
    probe = request.sweep.probe
    return {"probes": list(probe.names), "duration_s": probe.duration_s, "max_gpu_mem_mib": probe.max_gpu_mem_mib,
            "dtype": probe.dtype, "sequential": probe.sequential, "deadline_s": probe.deadline_s,
            "fanout": request.sweep.fanout,
            "simulate": request.reach.stand_in.source if request.reach.stand_in else None,
            "retest": request.judging.retest, "links": request.links.mode, "net_address": request.links.net_address,
            "net_backend": request.links.pair.backend,
            "net_duration_s": request.links.pair.duration_s, "net_line_rate_gbps": request.links.pair.line_rate_gbps,
            "screen_stride": request.links.screen_stride, "launcher": request.reach.launcher, "pause": probe.pause,
            "suspects": request.focus.suspects if request.focus else None,
            "topology": list(request.links.topology) or None}
