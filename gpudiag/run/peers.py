"""Further peers of a tie-break (gpudiag.links.tiebreak), reached as the sweep reaches its own hosts.

A ``--suspects`` sweep probes the suspects and their references; the job's other nodes are not
probed, and the sweep's connection (built for the probed hosts: their SSH settings resolved,
their srun steps) does not reach them. When a tie-break needs some, ``FurtherPeers`` reaches them
the same way: a connection of their own from the run's ``connect`` (the same SSH options, known
hosts and jump hosts, or srun), then, through gpudiag.run.fanout as for any host, each one
connected, the node's bundle staged and its facts probe run, within its host time limit and the
run's deadline; its facts through the identity check of the probed hosts (gpudiag.run.impostors);
and its data-plane address found as the probed hosts' were (gpudiag.links.addresses). A peer that
fails any step is not reached: said (its status and why), never pair-tested, never a pass, never
blamed.

The pair tests then reach the peers too: over SSH or srun ``PeerPairRunner`` tests a pair over
both connections' sessions and addresses; a stand-in fleet's own pair runner reaches every node
of it already.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from ..bundle import Bundle
from ..errors import InputError
from ..hosts import HostSpec, another_host_named, fold_hosts
from ..links.addresses import data_addresses
from ..links.attribution import LinkResult
from ..links.remote import PairTestOptions, PathTracer, RemotePairRunner
from ..links.rounds import PeerReach
from ..transport import Session, Unreachable
from .budget import BUDGET_STATUS, RunBudget
from .connection import Connection
from .fanout import OK, SweepOptions, probe_hosts
from .impostors import IDENTITY_CONFLICT, gpu_uuids, impostors
from .outcome import HostOutcome
from .progress import StageOf
from .request import LinkOptions
from .runtime import Runtime

# A reached peer without a usable data-plane address (the probed hosts' finding says "not pair-tested").
NOT_PAIR_TESTED = "not_pair_tested"


class FurtherPeers:
    """The PeerReacher of gpudiag.links.tiebreak over real hosts (or a stand-in fleet's): see the
    module. ``hosts``: the job's nodes not probed; ``connect`` builds a connection to some of
    them (the run's, with the request's reach); ``options``: the sweep's, with the facts probe
    alone; ``probed``: the probed hosts' outcomes (their facts are the identity check's);
    ``ssh_addresses``: how the sweep reaches the probed hosts (no peer's data-plane address may
    be one of them).
    Close it when the link phase is over."""

    def __init__(self, hosts: Sequence[HostSpec], connect: Callable[[Sequence[HostSpec]], Connection],
                 options: SweepOptions, bundle: Bundle, probed: Sequence[HostOutcome], links: LinkOptions,
                 ssh_addresses: Mapping[str, str], runtime: Runtime, budget: RunBudget | None = None) -> None:
        self._specs = {host.label: host for host in hosts}
        self._connect = connect
        self._options = options
        self._bundle = bundle
        self._probed = [host for host in probed if host.ok]
        self._links = links
        self._ssh_addresses = dict(ssh_addresses)
        self._runtime = runtime
        self._budget = budget
        self._connections: list[Connection] = []
        self._reached: dict[str, Connection] = {}  # each reached peer's connection
        self._facts: list[HostOutcome] = []  # the reached peers' outcomes (their facts)
        self.addresses: dict[str, str] = {}  # each reached peer's data-plane address (over SSH or srun)

    def reach(self, hosts: Sequence[str]) -> list[PeerReach]:
        """One outcome per label of ``hosts`` (each one of the ``hosts`` it was made with), in
        order (see the module). Raises KeyboardInterrupt when the sweep was interrupted while they
        were being reached."""
        specs = [self._specs[label] for label in hosts]
        if self._budget is not None and not self._budget.fits():
            return [PeerReach(spec.label, BUDGET_STATUS, self._budget.reason()) for spec in specs]
        try:
            connection = self._connect(specs)
        except InputError as error:  # a reach that cannot be built for them: none of them is reached
            return [PeerReach(spec.label, Unreachable.status, str(error)) for spec in specs]
        self._connections.append(connection)
        outcomes = self._probe(specs, connection)
        why = self._impostors([outcome for outcome in outcomes if outcome.ok])
        reached = [spec for spec, outcome in zip(specs, outcomes, strict=True) if outcome.ok and spec.label not in why]
        addresses, missing = self._data_addresses(reached, connection)
        found = {}
        for spec, outcome in zip(specs, outcomes, strict=True):
            label = spec.label
            if not outcome.ok:
                found[label] = PeerReach(label, outcome.status, outcome.error)
            elif label in why:
                found[label] = PeerReach(label, IDENTITY_CONFLICT, why[label])
            elif label in missing:
                found[label] = PeerReach(label, NOT_PAIR_TESTED, missing[label])
            else:
                found[label] = PeerReach(label, OK)
                self._reached[label] = connection
                self._facts.append(outcome)
                if label in addresses:
                    self.addresses[label] = addresses[label]
        return [found[spec.label] for spec in specs]

    def is_reached(self, label: str) -> bool:
        return label in self._reached

    def session_of(self, label: str) -> Session | None:
        """The session on the reached peer ``label`` (None: not reached, or its connection is gone)."""
        connection = self._reached.get(label)
        if connection is None or connection.session_of is None:
            return None
        return connection.session_of(label)

    def close(self) -> None:
        for connection in self._connections:
            connection.connector.close()

    def _probe(self, specs: Sequence[HostSpec], connection: Connection) -> list[HostOutcome]:
        """Each peer connected, the bundle staged, its facts probed, within the host time limit
        and the run's deadline, as probe_hosts does for the sweep's hosts."""
        options = dataclasses.replace(self._options, fanout=connection.fanout)
        if self._budget is not None:
            options = dataclasses.replace(options, host_timeout_s=min(options.command_timeout_s,
                                                                      max(self._budget.remaining_s(), 0.1)))
        runtime = self._runtime
        shown = StageOf(runtime.progress, f"reaching further peers {fold_hosts(spec.label for spec in specs)}")
        # Within the link phase, an interruptible phase already: probe_hosts ends its hosts at an
        # interrupt and says so; the link phase then ends as interrupted.
        result = probe_hosts(specs, options, connection.connector, self._bundle, shown, say=runtime.gate.say,
                             clock=runtime.clock, deadline=self._budget.deadline if self._budget is not None else None)
        if result.interrupted:
            raise KeyboardInterrupt
        return list(result.hosts)

    def _impostors(self, peers: Sequence[HostOutcome]) -> dict[str, str]:
        """Why each of ``peers`` is set aside: its facts name another host of the sweep, probed or
        further peer, or its GPUs' UUIDs are another's (whoever the store saw them on: a peer
        never decides on a word that may be another's); or a probed host now names it, or shares
        its GPUs."""
        labels = {peer.host for peer in peers}
        why = {host: reason for host, reason in impostors([*self._probed, *self._facts, *peers]).items()
               if host in labels}
        for host in self._probed:
            named = another_host_named(str(host.facts.get("hostname") or ""), host.host, labels)
            if named is not None:
                why.setdefault(named[1], f"{host.host}, a probed host, gives its name {named[0]!r}: who is "
                                         "who cannot be told, so it decides nothing")
            for peer in peers:
                if gpu_uuids(host.facts) & gpu_uuids(peer.facts):
                    why.setdefault(peer.host, f"it reports a GPU UUID that {host.host}, a probed host, reports too")
        return why

    def _data_addresses(self, specs: Sequence[HostSpec], connection: Connection
                        ) -> tuple[dict[str, str], dict[str, str]]:
        """The data-plane address of each of ``specs`` and why each without one has none (none
        asked of a stand-in fleet, whose own pair runner reaches its nodes)."""
        if connection.pairs is not None or not specs:
            return {}, {}
        ssh = {**self._ssh_addresses, **connection.ssh_addresses}
        addresses, missing = data_addresses(
            self._links.net_address, specs, connection.session_of or (lambda label: None), ssh,
            self._links.pair.python, connection.fanout, self._budget.remaining_s() if self._budget else None)
        return addresses, {str(finding.host): finding.evidence for finding in missing}


class PeerPairRunner:
    """The PairRunner of the link phase over real hosts: RemotePairRunner over the probed hosts'
    sessions (``session_of``) and those of the further peers ``peers`` reached, each host's
    data-plane address from ``addresses`` or the peers'. A new runner is made at the start of
    the first round after a peer was reached (rounds start one at a time); every one made is
    cancelled on ``cancel``."""

    def __init__(self, session_of: Callable[[str], Session | None], addresses: Mapping[str, str],
                 options: PairTestOptions, tracer: PathTracer | None, peers: FurtherPeers) -> None:
        self._session_of = session_of
        self._addresses = dict(addresses)
        self._options = options
        self._tracer = tracer
        self._peers = peers
        self._known = 0  # peers' addresses the latest runner has
        self._runners = [RemotePairRunner(session_of, addresses, options, tracer)]

    def run_pair(self, a: str, b: str) -> list[LinkResult]:
        return self._runners[-1].run_pair(a, b)

    def round_started(self, pairs: Sequence[tuple[str, str]]) -> None:
        if len(self._peers.addresses) != self._known:
            self._known = len(self._peers.addresses)
            self._runners.append(RemotePairRunner(self._either_session, {**self._addresses, **self._peers.addresses},
                                                  self._options, self._tracer))
        self._runners[-1].round_started(pairs)

    def cancel(self) -> None:
        for runner in self._runners:
            runner.cancel()

    def _either_session(self, label: str) -> Session | None:
        return self._peers.session_of(label) if self._peers.is_reached(label) else self._session_of(label)
