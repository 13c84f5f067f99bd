"""Further nodes of a paused job for the node probes: a tie that more peers can break.

A ``--suspects`` sweep probes the suspects and a few reference peers (gpudiag.pause.focus), and
their level is the suspects' fleet. When the references are slow themselves (both of them, or a
reference and the suspect), that level is theirs: the group finding that follows (a
``fleet_shift`` of two or three hosts out of a sample of three) says the fleet regressed, the
healthy host looks fast, and the slow references are named nowhere. The job's other nodes can
decide. Where the first analysis of such a sweep has a group finding on its probed hosts, the
sweep probes further nodes of the job — as many as it probed, and one more (``node_peer_bound``)
so that healthy ones outnumber the sample — with the same probes, in the order
gpudiag.pause.focus.spread gives, and analyses them all together: the further nodes are
references too. A node that cannot be reached or probed is said (the document's
``focus.node_peers``) and takes no part: never a pass, never blamed. Each further node is
reached with a connection of its own, as the link tie-break reaches its peers
(gpudiag.run.peers); ``JoinedConnector`` then reaches both kinds of host for the re-test and
the pair tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..findings import Finding, Kind
from ..hosts import HostSpec, fold_hosts, hosts_named
from ..pause import Focus
from ..transport import Session
from .connection import Connection
from .fanout import Connector, HostOutcome, SweepResult

# The group findings a sample of a job cannot tell from its own slow references.
GROUP_KINDS = (Kind.FLEET_SHIFT, Kind.SOFTWARE_REGRESSION)


def node_peer_bound(focus: Focus) -> int:
    """The most further nodes a ``--suspects`` sweep probes: one more than it probed first."""
    return len(focus.suspects) + len(focus.references) + 1


def undecided(findings: Sequence[Finding], focus: Focus | None) -> list[Finding]:
    """The group findings of a ``--suspects`` sweep's first analysis over its probed hosts (none
    without a focus or a further node of the job to probe)."""
    if focus is None or not focus.others:
        return []
    probed = set(focus.suspects) | set(focus.references)
    return [f for f in findings if f.kind in GROUP_KINDS and hosts_named(f.host, probed)]


@dataclass(frozen=True)
class NodePeers:
    """What probing further nodes did: the ``hosts`` that finished their probes and joined the
    references, the ``bound``, the group findings that asked (``because``) and, for each node
    that did not finish, its status and why (``missed``)."""

    hosts: tuple[str, ...]
    bound: int
    because: tuple[str, ...]
    missed: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The sweep document's ``focus.node_peers``."""
        return {"hosts": list(self.hosts), "max_hosts": self.bound, "because": list(self.because),
                "not_probed": dict(self.missed)}

    def describe(self) -> str:
        """``further nodes probed: node[011,014] (of at most 4), as the references' own level was
        shifted (fleet_shift node[004,013])``, and each node not probed and why."""
        what = fold_hosts(self.hosts) if self.hosts else "none"
        text = (f"further nodes probed: {what} (of at most {self.bound}), as the references' own level was "
                f"shifted ({'; '.join(self.because)})")
        if self.missed:
            text += "; not probed: " + "; ".join(f"{host} ({why})" for host, why in sorted(self.missed.items()))
        return text


def with_further_nodes(combined: SweepResult, wanted: Sequence[HostSpec], focus: Focus, bound: int,
                       because: tuple[str, ...]) -> tuple[SweepResult, Focus, list[HostSpec]]:
    """The sweep with the further nodes ``wanted`` that finished their probes among its hosts and
    references (``combined``: the first pass and their outcomes, impostors set aside), those that
    did not left out and said; the focus widened to them; their specs."""
    labels = {spec.label for spec in wanted}
    outcomes = {h.host: h for h in combined.hosts if h.host in labels}
    specs = [spec for spec in wanted if spec.label in outcomes and outcomes[spec.label].ok]
    missed = {spec.label: _why_not(outcomes.get(spec.label)) for spec in wanted if spec not in specs}
    peers = NodePeers(tuple(spec.label for spec in specs), bound, because, missed)
    wider = widened(focus, specs)
    hosts = tuple(h for h in combined.hosts if h.host not in labels or h.ok)
    first = dataclasses.replace(combined, hosts=hosts, focus=wider.to_dict())
    return saying(first, peers), wider, specs


def _why_not(outcome: HostOutcome | None) -> str:
    """Why a further node took no part: its status and error, or that no probe of it finished."""
    if outcome is None:
        return "interrupted before it was probed"
    return f"{outcome.status}: {outcome.error or 'no reason given'}"


def saying(first: SweepResult, peers: NodePeers) -> SweepResult:
    """``first`` with ``peers`` in its ``focus`` (``node_peers``) and its warnings."""
    return dataclasses.replace(first, focus={**(first.focus or {}), "node_peers": peers.to_dict()},
                               warnings=(*first.warnings, peers.describe()))


def widened(focus: Focus, peers: Sequence[HostSpec]) -> Focus:
    """``focus`` with ``peers`` among its references and out of the nodes left to draw on."""
    labels = {peer.label for peer in peers}
    return Focus(focus.suspects, (*focus.references, *(peer.label for peer in peers)),
                 tuple(host for host in focus.others if host.label not in labels))


class JoinedConnector:
    """Reaches the ``further`` hosts (by label) through their own connector, every other host
    through ``base``; closing it closes the further hosts' connector only (the run closes its own)."""

    def __init__(self, base: Connector, further: Connector, labels: Sequence[str]) -> None:
        self._base = base
        self._further = further
        self._labels = frozenset(labels)

    def connect(self, host: HostSpec, within_s: float | None = None) -> Session:
        chosen = self._further if host.label in self._labels else self._base
        return chosen.connect(host, within_s)

    def close(self) -> None:
        self._further.close()


def joined(base: Connection, further: Connection, labels: Sequence[str]) -> Connection:
    """One connection for the sweep's hosts and the further nodes: each host's session, address
    and connector from the connection that reached it; the base's pair runner (a stand-in
    fleet's reaches every node of it), limits and notes."""
    wanted = frozenset(labels)

    def session_of(label: str) -> Session | None:
        chosen = further if label in wanted else base
        return chosen.session_of(label) if chosen.session_of is not None else None

    return Connection(JoinedConnector(base.connector, further.connector, labels), base.fanout, base.pairs_at_once,
                      {**base.ssh_addresses, **{k: v for k, v in further.ssh_addresses.items() if k in wanted}},
                      base.notes, base.pairs, session_of if base.session_of is not None else None)

