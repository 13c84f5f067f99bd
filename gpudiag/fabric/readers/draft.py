"""A plane as a reader builds it, item by item, each checked as it comes so that a problem is
named at the line that made it: a switch defined twice, a cable from a switch to itself, a port
that holds two things, a node cabled to two leaves of one plane. ``PlaneBuilder.build`` then
derives the tiers a file did not give, groups parallel cables into one link and makes the
model's ``Plane`` (gpudiag.fabric.model), which checks everything once more.

Tiers, where a file gives none: a switch with a node under it is a leaf (1); every other switch
is one above the lowest tier among its neighbours, found breadth first from the leaves (and from
the switches whose tier the file gives). A switch with no path to a leaf has no tier.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from ...hosts import host_name_problem
from ..model import LEAF, Attachment, Cable, FabricLink, Plane, Switch, TopologyError, link_key
from .source import MAX_NODES, MAX_SWITCHES, Where, natural_key

MAX_NAME_CHARS = 256
# Cables between switches in one plane: far above any fabric (a 3-tier fat tree of 100,000 nodes
# has some 200,000), low enough that a file of counts such as "count": 4096 cannot fill memory.
MAX_CABLES = 1_000_000
Nic = TypeVar("Nic")


@dataclass(frozen=True)
class Wire:
    """One cable between switches ``a`` and ``b`` as a file gave it (``cable.port_a`` on ``a``)."""

    a: str
    b: str
    cable: Cable
    where: Where
    # the port on b is the name b advertised (an LLDP port id), not b's own name for it: b's own
    # capture, where there is one, names that port and wins
    far_named: bool = False


def switch_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a switch (empty, too long, a control character); None if it can."""
    if not name or not name.strip():
        return "is empty"
    if len(name) > MAX_NAME_CHARS:
        return f"is longer than {MAX_NAME_CHARS} characters"
    if not name.isprintable():
        return "holds a control character"
    return None


class PlaneBuilder:
    """The switches, cables and node attachments of one plane (``rail``; None: every rail) as
    they are read, each with where it came from. Each ``add_*`` raises InputError naming the
    line where the plane could not hold it."""

    def __init__(self, rail: int | None, path: str) -> None:
        self.rail = rail
        self.path = path
        self.switches: dict[str, Switch] = {}
        self.switch_where: dict[str, Where] = {}
        self.wires: list[Wire] = []
        self.attachments: dict[str, tuple[Attachment, Where]] = {}
        self._ports: dict[tuple[str, str], tuple[str, Where]] = {}
        self._peer: dict[tuple[str, str], tuple[str, str]] = {}
        self._wire_at: dict[tuple[str, str], int] = {}  # each cabled end's wire, by index
        self._advertised: set[tuple[str, str]] = set()  # ends named only by the far switch's advertisement

    def describe(self) -> str:
        """``rail 3``, or ``the shared plane`` (rail None)."""
        return "the shared plane" if self.rail is None else f"rail {self.rail}"

    def add_switch(self, switch: Switch, where: Where, *, again: bool = False) -> None:
        """Add ``switch`` (tier 0: to be derived). With ``again`` a switch already there is the
        same one seen again (from another capture): what it lacked is filled in; without, it is
        an error."""
        problem = switch_name_problem(switch.name)
        if problem is not None:
            where.fail(f"the switch name {switch.name[:80]!r} {problem}", "give each switch a printable name")
        known = self.switches.get(switch.name)
        if known is None:
            if len(self.switches) >= MAX_SWITCHES:
                where.fail(f"more than {MAX_SWITCHES} switches", "give the topology of one fabric")
            self.switches[switch.name] = replace(switch, line=where.line)
            self.switch_where[switch.name] = where
            return
        first = self.switch_where[switch.name]
        if not again:
            where.fail(f"switch {switch.name!r} is defined twice (first at {_place(first, where)})",
                       "remove one of them, or rename one")
        self.switches[switch.name] = self._merged(known, switch, first, where)

    @staticmethod
    def _merged(known: Switch, seen: Switch, first: Where, where: Where) -> Switch:
        if known.tier and seen.tier and known.tier != seen.tier:
            where.fail(f"switch {known.name!r} has tier {seen.tier} here and tier {known.tier} at "
                       f"{_place(first, where)}", "give it one tier")
        addresses = known.addresses + tuple(a for a in seen.addresses if a not in known.addresses)
        return replace(known, tier=known.tier or seen.tier, lid=known.lid if known.lid is not None else seen.lid,
                       guid=known.guid or seen.guid, addresses=addresses)

    def add_wire(self, wire: Wire, *, both_ends: bool = False) -> None:
        """Add one cable. With ``both_ends`` (a capture lists each cable from either end) a cable
        already there with the same ports on the same switches is that cable, not a second one."""
        if wire.a == wire.b:
            wire.where.fail(f"a cable from switch {wire.a!r} to itself", "a link joins two switches: fix its ends")
        if len(self.wires) >= MAX_CABLES:
            wire.where.fail(f"more than {MAX_CABLES} cables between switches", "give the topology of one fabric")
        ends = ((wire.a, wire.cable.port_a), (wire.b, wire.cable.port_b))
        if all(port is not None for _, port in ends):
            a_end, b_end = ((name, str(port)) for name, port in ends)
            if both_ends and self._known_cable(wire, a_end, b_end):
                return
            self._take(a_end, f"a cable to {wire.b} port {b_end[1]}", wire.where)
            self._take(b_end, f"a cable to {wire.a} port {a_end[1]}", wire.where)
            self._peer[a_end], self._peer[b_end] = b_end, a_end
            self._wire_at[a_end] = self._wire_at[b_end] = len(self.wires)
            if wire.far_named:
                self._advertised.add(b_end)
        else:
            for name, port in ends:
                if port is not None:
                    other = wire.b if name == wire.a else wire.a
                    self._take((name, port), f"a cable to {other}", wire.where)
        self.wires.append(wire)

    def _known_cable(self, wire: Wire, a_end: tuple[str, str], b_end: tuple[str, str]) -> bool:
        """Whether ``wire`` is a cable already added, seen from its other end. Where the far port's
        name is an advertisement (``far_named``) the names may differ: a cable from ``a_end`` to
        switch b is known already (under b's own name for its port, unless b's own capture gives
        the advertised name to another of its ports), or b's capture came first and
        advertised a name for the port of a that ``a_end`` now names as a itself does, which then
        replaces the advertised one."""
        if self._peer.get(a_end) == b_end and self._peer.get(b_end) == a_end:
            return True
        if not wire.far_named:
            return False
        held = self._peer.get(a_end)
        if held is not None:  # unless b names the advertised port as its own, holding something else
            return held[0] == wire.b and (b_end not in self._ports or b_end in self._advertised)
        advertised = self._peer.get(b_end)
        if advertised is None or advertised[0] != wire.a or advertised not in self._advertised or a_end in self._ports:
            return False
        self._rename(advertised, a_end)
        return True

    def _rename(self, old: tuple[str, str], new: tuple[str, str]) -> None:
        """Name the cabled end ``old`` as ``new`` (the same switch's own name for that port)."""
        index = self._wire_at.pop(old)
        wire = self.wires[index]
        cable = (replace(wire.cable, port_a=new[1]) if (wire.a, wire.cable.port_a) == old
                 else replace(wire.cable, port_b=new[1]))
        self.wires[index] = replace(wire, cable=cable, far_named=False)
        peer = self._peer.pop(old)
        self._peer[new], self._peer[peer] = peer, new
        self._ports[new] = self._ports.pop(old)
        self._ports[peer] = (f"a cable to {new[0]} port {new[1]}", self._ports[peer][1])
        self._wire_at[new] = index
        self._advertised.discard(old)

    def _take(self, end: tuple[str, str], what: str, where: Where) -> None:
        held = self._ports.get(end)
        if held is not None:
            where.fail(f"port {end[1]} of {end[0]} holds both {held[0]} (at {_place(held[1], where)}) and {what}",
                       "one port holds one cable: fix the port numbers")
        self._ports[end] = (what, where)

    def attach(self, attachment: Attachment, where: Where, *, again: bool = False) -> None:
        """Cable a node to a leaf. With ``again`` the same attachment seen twice (from the leaf's
        and the node's capture) is one."""
        problem = host_name_problem(attachment.host)
        if problem is not None or len(attachment.host) > MAX_NAME_CHARS:
            where.fail(f"the node name {attachment.host[:80]!r} {problem or 'is too long'}",
                       "name each node by its host name")
        known = self.attachments.get(attachment.host)
        if known is not None:
            first, first_where = known
            if again and (first.switch, first.port) == (attachment.switch, attachment.port):
                return
            if first.switch == attachment.switch:
                here, there, what = (f"{attachment.switch} port {attachment.port or '?'}",
                                     f"port {first.port or '?'}", "two ports")
            else:
                here, there, what = attachment.switch, first.switch, "two leaves"
            where.fail(f"node {attachment.host} is cabled to {here} here and to {there} at "
                       f"{_place(first_where, where)}, {what} of {self.describe()}",
                       "a node has one NIC on each rail's plane: fix its switch (or give the rails apart)")
        if len(self.attachments) >= MAX_NODES:
            where.fail(f"more than {MAX_NODES} nodes", "give the topology of one fabric")
        if attachment.port is not None:
            self._take((attachment.switch, attachment.port), f"node {attachment.host}", where)
        self.attachments[attachment.host] = (replace(attachment, line=where.line), where)

    def merge(self, other: PlaneBuilder) -> None:
        """Add what ``other`` read (another capture of the same plane): a switch, cable or node
        both saw is one."""
        for name, switch in other.switches.items():
            self.add_switch(switch, other.switch_where[name], again=True)
        for wire in other.wires:
            self.add_wire(wire, both_ends=True)
        for attachment, where in other.attachments.values():
            self.attach(attachment, where, again=True)

    def build(self, *, drop_unplaced: bool = False) -> tuple[Plane, list[str]]:
        """The plane, and notes on what was left out of it. Tiers not given are derived (see the
        module docstring); a switch with no tier is left out with a note when ``drop_unplaced``,
        else an InputError. Raises InputError for a cable or node on a switch the plane lacks."""
        self._check_ends()
        tiers = derive_tiers(self.switches, [(w.a, w.b) for w in self.wires],
                             {name: s.tier for name, s in self.switches.items() if s.tier},
                             {a.switch for a, _ in self.attachments.values()})
        unplaced = sorted(set(self.switches) - set(tiers))
        notes = []
        if unplaced and not drop_unplaced:
            self.switch_where[unplaced[0]].fail(
                f"switch {unplaced[0]!r} has no tier: no path joins it to a switch with nodes",
                "give its tier, or the links that join it to the fabric")
        if unplaced:
            notes.append(f"{self.describe()}: left out {len(unplaced)} switch{'es' if len(unplaced) > 1 else ''} "
                         f"with no path to a leaf: {', '.join(unplaced[:5])}{', …' if len(unplaced) > 5 else ''}")
        switches = tuple(replace(s, tier=tiers[s.name]) for s in self.switches.values() if s.name in tiers)
        links = group_links([w for w in self.wires if w.a in tiers and w.b in tiers], tiers)
        attachments = tuple(a for a, _ in self.attachments.values())
        try:
            plane = Plane(rail=self.rail, switches=switches, links=links, attachments=attachments)
        except TopologyError as error:
            Where(self.path, error.line or 0).fail(str(error), "fix the topology")
        return plane, notes

    def _check_ends(self) -> None:
        for wire in self.wires:
            for end in (wire.a, wire.b):
                if end not in self.switches:
                    wire.where.fail(f"a cable {wire.a}–{wire.b} names switch {end!r}, which {self.describe()} "
                                    "does not define", "define the switch, or fix the name")
        for attachment, where in self.attachments.values():
            if attachment.switch not in self.switches:
                where.fail(f"node {attachment.host} is cabled to switch {attachment.switch!r}, which "
                           f"{self.describe()} does not define", "define the switch, or fix the name")


def _place(first: Where, here: Where) -> str:
    """``line 7`` in the same file, ``other.txt:7`` in another."""
    if first.path == here.path:
        return f"line {first.line}" if first.line else "the start of the file"
    return f"{first.path}:{first.line}" if first.line else first.path


def derive_tiers(names: Iterable[str], edges: Iterable[tuple[str, str]], given: Mapping[str, int],
                 leaves: Iterable[str]) -> dict[str, int]:
    """Each switch's tier: ``given`` where given, 1 for ``leaves``, else one above its lowest
    neighbour's (breadth first); switches with no path to either are left out."""
    neighbours: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        neighbours[a].add(b)
        neighbours[b].add(a)
    tiers = dict(given)
    for leaf in leaves:
        tiers.setdefault(leaf, LEAF)
    queue = [(tier, name) for name, tier in tiers.items()]
    heapq.heapify(queue)
    known = set(names)
    while queue:
        tier, name = heapq.heappop(queue)
        if tiers.get(name) != tier:
            continue
        for other in neighbours.get(name, ()):
            if other in known and other not in given and tier + 1 < tiers.get(other, tier + 2):
                tiers[other] = tier + 1
                heapq.heappush(queue, (tier + 1, other))
    return {name: tier for name, tier in tiers.items() if name in known}


def group_links(wires: Iterable[Wire], tiers: Mapping[str, int]) -> tuple[FabricLink, ...]:
    """The wires grouped into one FabricLink per pair of switches, in canonical order (each
    cable's ports turned with it), sorted; a link's line is its first cable's."""
    cables: dict[tuple[str, str], list[Cable]] = defaultdict(list)
    lines: dict[tuple[str, str], int] = {}
    for wire in wires:
        key = link_key(wire.a, wire.b, tiers)
        cable = wire.cable if key == (wire.a, wire.b) else Cable(wire.cable.port_b, wire.cable.port_a,
                                                                  wire.cable.rate_gbps)
        cables[key].append(cable)
        lines.setdefault(key, wire.where.line)
    return tuple(FabricLink(a, b, tuple(sorted(group, key=_cable_order)), line=lines[(a, b)])
                 for (a, b), group in sorted(cables.items(), key=lambda item: (tiers[item[0][0]], item[0])))


def _cable_order(cable: Cable) -> tuple[int, tuple[str, ...]]:
    ports = (cable.port_a or "", cable.port_b or "")
    return (0 if cable.port_a is None else 1, tuple(p.zfill(8) if p.isdigit() else p for p in ports))


def rail_groups(nics: Sequence[Nic], host_of: Callable[[Nic], str], name_of: Callable[[Nic], str | None],
                where_of: Callable[[Nic], Where], rail: int | None,
                rails: Mapping[str, int] | None) -> tuple[dict[int | None, list[Nic]], list[str]]:
    """The NICs of each rail's plane, and notes on NICs left out. ``rail`` puts every NIC on it
    (a host with two is an error); where each host has one NIC, one plane: the one rail the
    ``rails`` map gives them all, else None (every rail); where hosts have several, each NIC's
    rail is the map's for its name (NICs it does not name are left out), else its place in the
    natural order of its host's NIC names (mlx5_0 -> 0, mlx5_10 after mlx5_9). Raises
    InputError."""
    by_host: dict[str, list[Nic]] = defaultdict(list)
    for nic in nics:
        by_host[host_of(nic)].append(nic)
    several = sorted((host for host, found in by_host.items() if len(found) > 1), key=natural_key)
    if rail is not None:
        if several:
            found = by_host[several[0]]
            where_of(found[1]).fail(f"host {several[0]} has {len(found)} NICs here "
                                    f"({', '.join(str(name_of(nic)) for nic in found)}), in a capture of rail {rail}",
                                    "a capture of one rail has one NIC per host: leave out the rail to split it")
        return {rail: list(nics)}, []
    if not several:
        given = {rails.get(name_of(nic) or "") for nic in nics} if rails else {None}
        return {given.pop() if len(given) == 1 else None: list(nics)}, []
    groups: dict[int | None, list[Nic]] = defaultdict(list)
    unnamed: set[str] = set()
    for found in by_host.values():
        for index, nic in enumerate(sorted(found, key=lambda n: natural_key(name_of(n) or ""))):
            nic_rail = index if rails is None else rails.get(name_of(nic) or "")
            if nic_rail is None:
                unnamed.add(name_of(nic) or "(no NIC name)")
            else:
                groups[nic_rail].append(nic)
    if not groups:
        where_of(nics[0]).fail("the rails map names none of these NICs", "map their names (e.g. mlx5_0) to rails")
    notes = [f"NICs {', '.join(sorted(unnamed, key=natural_key))} left out: the rails map gives them no rail"
             ] if unnamed else []
    return dict(groups), notes
