"""The fabric between the nodes, as a topology file describes it: per rail plane, the switches by
tier, the links between switches (parallel cables grouped), and where each node's NIC of that
rail is cabled.

A ``Plane`` is one rail's switched network (``rail`` None: one fabric that carries every rail). A
``FabricLink`` is every cable between two switches, grouped: its ``cables`` each with the port on
either end and a rate. An ``Attachment`` puts one node's NIC of the plane on a leaf switch's port.
Tiers count from the nodes up: 1 for a leaf (a switch with nodes), 2 for a spine, 3 for a core.

Everything here is checked when it is made (``Plane.__post_init__``): a switch named twice, a
link to a switch the plane lacks, a node on two leaves of one plane, two nodes on one port. A
reader (gpudiag.fabric.readers) turns each problem into an InputError naming the file and line.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

LEAF, SPINE, CORE = 1, 2, 3
TIER_NAMES = {LEAF: "leaf", SPINE: "spine", CORE: "core"}
MAX_TIER = 8


class TopologyError(ValueError):
    """A topology that cannot be: the message names the switch, link or node (and ``line``, where
    the reader knows it, the source line that made it)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


@dataclass(frozen=True)
class Switch:
    """One switch of a plane: its ``name`` exactly as the topology gives it, its ``tier`` (1 leaf,
    2 spine, 3 core, …), and what reaches it for its counters: ``lid`` (InfiniBand) and ``guid``,
    and ``addresses`` (IP addresses its interfaces answer from: a traced stream's hops map to it).
    ``line``: the source line that defined it (0: unknown)."""

    name: str
    tier: int
    lid: int | None = None
    guid: str | None = None
    addresses: tuple[str, ...] = ()
    line: int = 0

    @property
    def tier_name(self) -> str:
        return TIER_NAMES.get(self.tier, f"tier {self.tier}")


@dataclass(frozen=True)
class Cable:
    """One cable of a link between two switches: the port on each end (None: not known) and its
    rate in Gb/s (None: not known)."""

    port_a: str | None = None
    port_b: str | None = None
    rate_gbps: float | None = None


@dataclass(frozen=True)
class FabricLink:
    """Every cable between switches ``a`` and ``b`` (``a`` the lower tier, then the lower name):
    parallel cables grouped, one link of the model."""

    a: str
    b: str
    cables: tuple[Cable, ...]
    line: int = 0

    @property
    def key(self) -> tuple[str, str]:
        return (self.a, self.b)

    @property
    def count(self) -> int:
        return len(self.cables)

    @property
    def capacity_gbps(self) -> float | None:
        """The sum of its cables' rates; None when any is unknown."""
        rates = [cable.rate_gbps for cable in self.cables]
        return None if any(rate is None for rate in rates) else math.fsum(r for r in rates if r is not None)

    @property
    def ports(self) -> tuple[str, str] | None:
        """(port on ``a``, port on ``b``) of a single-cable link with both known; else None."""
        if len(self.cables) == 1 and self.cables[0].port_a is not None and self.cables[0].port_b is not None:
            return (self.cables[0].port_a, self.cables[0].port_b)
        return None

    def describe(self) -> str:
        """``leaf01–spine02`` with its ports and cable count where known."""
        text = f"{self.a}–{self.b}"
        ports = self.ports
        if ports is not None:
            text = f"{self.a} port {ports[0]} – {self.b} port {ports[1]}"
        elif len(self.cables) > 1:
            text += f" ({len(self.cables)} cables)"
        return text


@dataclass(frozen=True)
class Attachment:
    """One node's NIC of a plane, cabled to ``switch`` (a leaf) at ``port`` (None: unknown), at
    ``rate_gbps``; ``nic``: the device (an HCA such as mlx5_0, or an interface)."""

    host: str
    switch: str
    port: str | None = None
    rate_gbps: float | None = None
    nic: str | None = None
    line: int = 0


def link_key(a: str, b: str, tiers: Mapping[str, int]) -> tuple[str, str]:
    """The canonical order of a link's two switches: the lower tier first, then the lower name."""
    return (a, b) if (tiers.get(a, 0), a) <= (tiers.get(b, 0), b) else (b, a)


@dataclass(frozen=True)
class Plane:
    """One rail's switched network (``rail`` None: a fabric every rail shares). Raises
    TopologyError when it cannot be (see the module docstring)."""

    rail: int | None
    switches: tuple[Switch, ...]
    links: tuple[FabricLink, ...]
    attachments: tuple[Attachment, ...]

    def __post_init__(self) -> None:
        names: dict[str, Switch] = {}
        for switch in self.switches:
            if not switch.name:
                raise TopologyError("a switch has no name", switch.line)
            if switch.name in names:
                raise TopologyError(f"switch {switch.name!r} is defined twice{self._where()}", switch.line)
            if not 1 <= switch.tier <= MAX_TIER:
                raise TopologyError(f"switch {switch.name!r} has tier {switch.tier}; tiers run 1 (leaf) to {MAX_TIER}",
                                    switch.line)
            names[switch.name] = switch
        tiers = {name: switch.tier for name, switch in names.items()}
        seen_links: set[tuple[str, str]] = set()
        for link in self.links:
            for end in (link.a, link.b):
                if end not in names:
                    raise TopologyError(f"link {link.a}–{link.b} names switch {end!r}, which{self._where()} "
                                        "defines nowhere", link.line)
            if link.a == link.b:
                raise TopologyError(f"link {link.a}–{link.b} joins a switch to itself", link.line)
            if link_key(link.a, link.b, tiers) != link.key:
                raise TopologyError(f"link {link.a}–{link.b} is not in canonical order", link.line)
            if link.key in seen_links:
                raise TopologyError(f"link {link.a}–{link.b} is given twice{self._where()}", link.line)
            if not link.cables:
                raise TopologyError(f"link {link.a}–{link.b} has no cable", link.line)
            seen_links.add(link.key)
        self._check_ports(names)
        self._check_attachments(names)

    def _where(self) -> str:
        return "" if self.rail is None else f" on rail {self.rail}"

    def _check_ports(self, names: Mapping[str, Switch]) -> None:
        used: dict[tuple[str, str], str] = {}

        def take(switch: str, port: str | None, what: str, line: int) -> None:
            if port is None:
                return
            other = used.get((switch, port))
            if other is not None:
                raise TopologyError(f"port {port} of {switch} holds both {other} and {what}{self._where()}", line)
            used[(switch, port)] = what

        for link in self.links:
            for cable in link.cables:
                take(link.a, cable.port_a, f"a cable to {link.b}", link.line)
                take(link.b, cable.port_b, f"a cable to {link.a}", link.line)
        for attachment in self.attachments:
            take(attachment.switch, attachment.port, f"node {attachment.host}", attachment.line)

    def _check_attachments(self, names: Mapping[str, Switch]) -> None:
        hosts: dict[str, Attachment] = {}
        for attachment in self.attachments:
            if attachment.switch not in names:
                raise TopologyError(f"node {attachment.host} is cabled to {attachment.switch!r}, which{self._where()} "
                                    "defines nowhere", attachment.line)
            if names[attachment.switch].tier != LEAF:
                raise TopologyError(f"node {attachment.host} is cabled to {attachment.switch}, a "
                                    f"{names[attachment.switch].tier_name}, not a leaf", attachment.line)
            first = hosts.get(attachment.host)
            if first is not None:
                raise TopologyError(f"node {attachment.host} is cabled to both {first.switch} and "
                                    f"{attachment.switch}{self._where()}", attachment.line)
            hosts[attachment.host] = attachment

    @cached_property
    def switch_by_name(self) -> dict[str, Switch]:
        return {switch.name: switch for switch in self.switches}

    @cached_property
    def link_by_key(self) -> dict[tuple[str, str], FabricLink]:
        return {link.key: link for link in self.links}

    @cached_property
    def attachment_of(self) -> dict[str, Attachment]:
        """Each node's attachment in this plane, by host name."""
        return {attachment.host: attachment for attachment in self.attachments}

    @cached_property
    def neighbours(self) -> dict[str, tuple[str, ...]]:
        """Each switch's neighbouring switches, sorted."""
        found: dict[str, set[str]] = defaultdict(set)
        for link in self.links:
            found[link.a].add(link.b)
            found[link.b].add(link.a)
        return {name: tuple(sorted(found.get(name, ()))) for name in self.switch_by_name}

    @cached_property
    def hosts_under(self) -> dict[str, tuple[str, ...]]:
        """Each leaf's nodes, sorted (every leaf listed, those with none too)."""
        found: dict[str, list[str]] = {switch.name: [] for switch in self.switches if switch.tier == LEAF}
        for attachment in self.attachments:
            found[attachment.switch].append(attachment.host)
        return {leaf: tuple(sorted(hosts)) for leaf, hosts in found.items()}

    def leaf_of(self, host: str) -> str | None:
        attachment = self.attachment_of.get(host)
        return None if attachment is None else attachment.switch

    def uplinks(self, switch: str) -> tuple[FabricLink, ...]:
        """The links from ``switch`` to switches of a higher tier."""
        tier = self.switch_by_name[switch].tier
        return tuple(link for link in self.links if switch in link.key
                     and self.switch_by_name[link.b if link.a == switch else link.a].tier > tier)

    def node_gbps(self, leaf: str) -> float | None:
        """The sum of the line rates of the nodes under ``leaf``; None when any is unknown."""
        rates = [a.rate_gbps for a in self.attachments if a.switch == leaf]
        return None if not rates or any(rate is None for rate in rates) else math.fsum(r for r in rates if r)

    def uplink_gbps(self, leaf: str) -> float | None:
        """The capacity of ``leaf``'s uplinks; None when a cable's rate is unknown or it has none."""
        capacities = [link.capacity_gbps for link in self.uplinks(leaf)]
        return None if not capacities or any(c is None for c in capacities) else math.fsum(c for c in capacities if c)

    def oversubscription(self, leaf: str) -> float | None:
        """Its nodes' line rate over its uplinks' capacity (1.0: non-blocking; 2.0: 2:1); None when
        either is unknown."""
        nodes, uplinks = self.node_gbps(leaf), self.uplink_gbps(leaf)
        return None if nodes is None or not uplinks else nodes / uplinks

    @cached_property
    def address_owner(self) -> dict[str, str]:
        """Each switch address (as its IP literal), the switch that answers from it."""
        return {address: switch.name for switch in self.switches for address in switch.addresses}

    def describe(self) -> str:
        return "every rail" if self.rail is None else f"rail {self.rail}"


@dataclass(frozen=True)
class Topology:
    """A fabric's planes (``source``: the file it was read from, for messages). At most one plane
    per rail, and at most one shared plane (rail None), which serves every rail with no plane of
    its own. Raises TopologyError otherwise."""

    source: str
    planes: tuple[Plane, ...]
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        counts = Counter(plane.rail for plane in self.planes)
        twice = sorted((rail for rail, count in counts.items() if count > 1), key=lambda r: -1 if r is None else r)
        if twice:
            which = "the shared plane" if twice[0] is None else f"rail {twice[0]}"
            raise TopologyError(f"{self.source}: {which} is given twice")
        if not self.planes:
            raise TopologyError(f"{self.source}: no plane (no switch with a node under it)")
        object.__setattr__(self, "_by_rail", {plane.rail: plane for plane in self.planes})

    def plane(self, rail: int | None) -> Plane | None:
        """The plane of ``rail``: its own, else the shared one (None when neither exists)."""
        by_rail: dict[int | None, Plane] = self.__dict__["_by_rail"]
        return by_rail.get(rail, by_rail.get(None))

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every node cabled in some plane, sorted."""
        return tuple(sorted({a.host for plane in self.planes for a in plane.attachments}))

    def group_of(self, host: str) -> tuple[str | None, ...]:
        """The leaves ``host`` is under, one per plane (None where a plane lacks it): nodes with
        the same group share every leaf."""
        return tuple(plane.leaf_of(host) for plane in self.planes)

    def missing(self, hosts: Iterable[str]) -> list[str]:
        """The ``hosts`` that some plane does not place (in the order given)."""
        return [host for host in hosts if any(plane.leaf_of(host) is None for plane in self.planes)]


def sorted_switches(switches: Sequence[Switch]) -> list[Switch]:
    """By tier from the top, then name."""
    return sorted(switches, key=lambda switch: (-switch.tier, switch.name))
