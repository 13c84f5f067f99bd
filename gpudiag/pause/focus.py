"""``--suspects``: the hosts the job's own monitoring suspects, and the peers they are compared with.

A paused job's monitoring (its step times per rank, a straggler detector) usually names a few
nodes. Probing only those would leave nothing to compare them with, and probing the whole job
costs the whole pause: so the sweep takes the suspects and ``K`` unsuspected peers per suspect
as reference, chosen deterministically and spread over the host list (the same inputs, the same
peers). Suspects are a host set or file (``node[3,7]``, matched against the host list's labels,
or by host name where that is unique) or ranks (``rank:3,7`` or ``rank:0-3``: 0-based positions
in the host list, i.e. the job's node ranks when the list is the job's node list).

The hosts are ordered suspect, its references, next suspect, …: the screen schedule pairs each
host with its neighbours in that order, so each suspect's links are tested against references.

The reference peers are the suspects' fleet (``focused_thresholds``): their live level judges a
suspect even when they are fewer than ``min_peers``, so a suspect slow on every GPU against them
is one ``slow_node``, not a per-GPU verdict against the SKU figure alone.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..analysis.thresholds import Thresholds
from ..errors import InputError
from ..hosts import HostSpec, fold_hosts, load_hosts
from ..links.rounds import LinkPlan
from ..links.tiebreak import PeerReacher, TieBreakPlan, extra_pair_bound

DEFAULT_REFERENCE_PEERS = 2
RANK_PREFIX = "rank:"


@dataclass(frozen=True)
class FocusRequest:
    """``--suspects`` as given (a host set or file, or ``rank:LIST``) and ``--reference-peers``."""

    suspects: str
    reference_peers: int = DEFAULT_REFERENCE_PEERS


@dataclass(frozen=True)
class Focus:
    """The hosts a focused sweep probes: the suspects and their reference peers (labels); and
    ``others``, the host list's other nodes (the job's, not probed), in the order a tie-break
    draws further peers from them (gpudiag.links.tiebreak), as the host list gives them (how
    they are reached: gpudiag.run.peers)."""

    suspects: tuple[str, ...]
    references: tuple[str, ...]
    others: tuple[HostSpec, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The sweep document's ``focus``."""
        return {"suspects": list(self.suspects), "references": list(self.references)}


def focus_hosts(hosts: Sequence[HostSpec], request: FocusRequest | None) -> tuple[list[HostSpec], Focus | None]:
    """The hosts to probe, in schedule order, and who is who; every host and None without ``request``.

    Raises InputError for a suspect not in ``hosts``, a rank out of range, or an unreadable set."""
    if request is None:
        return list(hosts), None
    labels = [host.label for host in hosts]
    suspects = parse_suspects(request.suspects, hosts)
    references = choose_references(labels, suspects, request.reference_peers)
    by_label = {host.label: host for host in hosts}
    order = schedule_order(suspects, references, request.reference_peers)
    others = spread([label for label in labels if label not in set(order)])
    return ([by_label[label] for label in order],
            Focus(tuple(suspects), tuple(references), tuple(by_label[label] for label in others)))


def spread(labels: Sequence[str]) -> list[str]:
    """``labels`` in an order that spreads over the list: the middle one first, then the middles
    of the halves, and so on (far from each other, as the references are chosen)."""
    order: list[str] = []
    stretches = [(0, len(labels))]
    while stretches:
        low, high = stretches.pop(0)
        if low >= high:
            continue
        middle = (low + high) // 2
        order.append(labels[middle])
        stretches += [(low, middle), (middle + 1, high)]
    return order


def tie_break_plan(focus: Focus | None, hosts: Sequence[str], base: LinkPlan,
                   reacher: PeerReacher | None = None) -> TieBreakPlan | None:
    """The link phase's plan for a ``--suspects`` sweep of ``hosts`` (the probed ones that take
    part): ``base`` with the job's other nodes as further peers, each reached by ``reacher``
    before its first pair test, at most ``extra_pair_bound`` pair tests with them; None without
    a focus."""
    if focus is None:
        return None
    spares = [host.label for host in focus.others]
    return TieBreakPlan(base, hosts, spares, extra_pair_bound(len(hosts)), reacher=reacher)


def focused_thresholds(thresholds: Thresholds, focus: Focus | None) -> Thresholds:
    """``thresholds`` for a sweep narrowed to ``focus``: a fleet level from as few hosts as a
    suspect and its reference peers (two at least), where ``min_peers`` asks for more. The peers
    were picked to be the suspects' reference; without their level a suspect is judged by the
    SKU figure alone, whose wide spread lets a node slow on every GPU fall apart into the GPUs
    that noise pushed past it. The suspects alone are never a shift of the fleet: a
    ``fleet_shift`` needs a reference peer low as well (more than the suspects' share of the
    hosts). Unchanged without a focus."""
    if focus is None:
        return thresholds
    peers = len(focus.references) + 1
    hosts = len(focus.suspects) + len(focus.references)
    suspects_pct = 100 * (len(focus.suspects) + 0.5) / max(1, hosts)
    return dataclasses.replace(thresholds, min_peers=max(2, min(thresholds.min_peers, peers)),
                               fleet_shift_share_pct=max(thresholds.fleet_shift_share_pct, min(100.0, suspects_pct)))


def parse_suspects(text: str, hosts: Sequence[HostSpec]) -> list[str]:
    """The labels ``text`` names among ``hosts``, in host-list order. Raises InputError."""
    text = text.strip()
    if text.startswith(RANK_PREFIX):
        positions = _ranks(text, len(hosts))
        return [host.label for index, host in enumerate(hosts) if index in positions]
    if not text or text == "-":
        raise InputError(f"--suspects {text!r}: give a host set such as 'node[3,7]', a hosts file, or ranks "
                         "such as rank:3,7 (stdin is --hosts')")
    try:
        named = load_hosts(text, io.StringIO())
    except InputError as error:
        raise InputError(f"--suspects: {error}".replace("--hosts ", "", 1)) from None
    wanted = {_match(spec, hosts, text) for spec in named}
    return [host.label for host in hosts if host.label in wanted]


def _match(spec: HostSpec, hosts: Sequence[HostSpec], text: str) -> str:
    exact = [host.label for host in hosts if host.label == spec.label]
    by_name = [host.label for host in hosts if host.host == spec.host]
    if exact or len(by_name) == 1:
        return (exact or by_name)[0]
    listed = fold_hosts(host.label for host in hosts)
    raise InputError(f"--suspects {text!r}: {spec.label} is not one of the {len(hosts)} hosts swept ({listed}); "
                     "fix: name hosts of the host list, or ranks as rank:N (0-based positions in it)")


def _ranks(text: str, count: int) -> set[int]:
    body = text[len(RANK_PREFIX):]
    positions: set[int] = set()
    for part in (part.strip() for part in body.split(",")):
        low, _, high = part.partition("-")
        if not (low.isdigit() and (not high or high.isdigit())):
            raise InputError(f"--suspects {text!r}: {part!r} is not a rank; fix: write ranks as rank:3,7 or "
                             "rank:0-3 (0-based positions in the host list)")
        first, last = int(low), int(high or low)
        if last < first or last >= count:
            raise InputError(f"--suspects {text!r}: rank {part} is out of range: the host list has {count} "
                             f"hosts, ranks 0-{count - 1}; fix: give ranks within it")
        positions.update(range(first, last + 1))
    return positions


def choose_references(labels: Sequence[str], suspects: Sequence[str], per_suspect: int) -> list[str]:
    """``per_suspect`` unsuspected peers per suspect (fewer where the list has fewer), spread evenly
    over the host list: the middle host of each of as many equal stretches of the unsuspected hosts."""
    chosen = set(suspects)
    candidates = [label for label in labels if label not in chosen]
    wanted = min(len(candidates), per_suspect * len(suspects))
    return [candidates[(2 * i + 1) * len(candidates) // (2 * wanted)] for i in range(wanted)]


def schedule_order(suspects: Sequence[str], references: Sequence[str], per_suspect: int) -> list[str]:
    """Each suspect followed by its share of the references, then any references left."""
    order: list[str] = []
    for index, suspect in enumerate(suspects):
        order += [suspect, *references[index * per_suspect:(index + 1) * per_suspect]]
    return order + list(references[len(suspects) * per_suspect:])


def further_peers_plan(focus: Focus | None, hosts: int) -> str:
    """The link phase's plan in words, for a ``--suspects`` sweep of ``hosts`` probed hosts:
    ``; up to 18 extra pair tests with further peers of the job (node[...]) where the references
    cannot decide`` (or that there are none); empty without a focus."""
    if focus is None:
        return ""
    if not focus.others:
        return "; no further peer of the job to break a tie (every node of it is probed)"
    return (f"; up to {extra_pair_bound(hosts)} extra pair tests with further peers of the job "
            f"({len(focus.others)} other nodes) where the references cannot decide")
