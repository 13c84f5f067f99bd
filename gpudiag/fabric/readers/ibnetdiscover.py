"""ibnetdiscover's default output (infiniband-diags): an InfiniBand subnet's switches, its
channel adapters (CAs: the nodes' HCAs) and every cable between them, as a Topology.

The capture is a list of blocks, one per node of the subnet::

    vendid=0x2c9
    switchguid=0xb83fd20300a1b2c0(b83fd20300a1b2c0)
    Switch  64 "S-b83fd20300a1b2c0"   # "leaf01" enhanced port 0 lid 3 lmc 0
    [1]     "H-946dae0300f1e2a0"[1](946dae0300f1e2a0)   # "node01 mlx5_0" lid 41 4xNDR
    [33]    "S-b83fd20300a1b3c0"[1]   # "spine01" lid 11 4xNDR

    caguid=0x946dae0300f1e2a0
    Ca      1 "H-946dae0300f1e2a0"    # "node01 mlx5_0"
    [1](946dae0300f1e2a0)   "S-b83fd20300a1b2c0"[1]   # lid 41 lmc 0 "leaf01" lid 3 4xNDR

Each cable is listed from both of its ends; a port listed with two different far ends, a far
end with no block of its own (a capture cut short) or a line of no known form is an error
naming the line. A switch is named by its node description, exactly; where several switches
share one (an unnamed switch keeps its vendor's "SwitchIB Mellanox Technologies"), each is
named by its node name, ``S-`` and its GUID, with a note. Its LID and GUID are kept (perfquery
reads its counters by LID). A cable's rate is its width times the nominal per-lane rate of its
speed (4xNDR: 4 x 100 = 400 Gb/s).

A CA belongs to the host named by the first word of its node description, and its HCA is the
second ("node01 mlx5_0", as rdma-ndd or the subnet manager sets it). A CA with several cabled
ports (a dual-port mlx4) is on its lowest one: the pair tests run on a device's first port, and
its other ports are left out with a note. Which rail's plane a CA is on, where one capture holds
several rails:

- A capture where every host has one CA is one plane: the ``rail`` given, else the one rail the
  ``rails`` map gives every CA, else None (one fabric serving every rail).
- Where hosts have several CAs, each CA's rail is the ``rails`` map's for its HCA (CAs of HCAs
  the map does not name are left out, with a note), else its place in the natural order of that
  host's HCA names in the capture (mlx5_0 -> 0, mlx5_1 -> 1, mlx5_10 after mlx5_9). Each rail's
  plane is then the switches reachable from that rail's CAs: in a rail-optimised fabric each
  rail's switches form a network of their own, so its planes are apart. Where rails share
  switches (one fat tree for every HCA), each rail's plane holds the whole shared fabric with
  that rail's CAs on it, and a note says so: a rail's traffic runs between its own CAs' leaves,
  which one plane of rail None could not say, since a host is on one leaf of a plane.

Switches that no CA reaches are left out with a note; routers and cables between two CAs are
left out with a note too. Tiers: a switch with a CA is a leaf; the rest breadth first above.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from ..model import LEAF, Attachment, Cable, Plane, Switch, Topology
from .draft import PlaneBuilder, Wire, rail_groups
from .source import MAX_NODES, Where

# Nominal Gb/s per lane of each InfiniBand speed (IBTA); a port's rate is its width times this.
SPEED_GBPS_PER_LANE = {"SDR": 2.5, "DDR": 5.0, "QDR": 10.0, "FDR10": 10.0, "FDR": 14.0, "EDR": 25.0, "HDR": 50.0,
                       "NDR": 100.0, "XDR": 200.0}

_GUID = r"([0-9a-fA-F]{1,16})"
_IGNORED = re.compile(r"(#|vendid=|devid=|sysimgguid=|switchguid=|caguid=|rtguid=|Non-Chassis Nodes|Chassis\b)")
_NODE = re.compile(rf'(Switch|Ca|Rt)\s+(\d{{1,3}})\s+"([SHR])-{_GUID}"\s*#\s*"(.*)"(.*)')
_SWITCH_TAIL = re.compile(r"\s*(?:base|enhanced)\s+port\s+0\s+lid\s+(\d{1,5})\s+lmc\s+\d+\s*")
_EXT = r"(?:\[ext\s+\d+\])?"
_RATE = r"(?:\s+(\d{1,2})x(\w+))?"
_SWITCH_PORT = re.compile(rf'\[(\d{{1,3}})\]{_EXT}\s+"([SHR])-{_GUID}"\[(\d{{1,3}})\]{_EXT}(?:\({_GUID}\))?\s*#\s*'
                          rf'"(.*)"\s+lid\s+\d+{_RATE}\s*')
_CA_PORT = re.compile(rf'\[(\d{{1,3}})\]\({_GUID}\)\s+"([SHR])-{_GUID}"\[(\d{{1,3}})\]{_EXT}\s*#\s*'
                      rf'lid\s+\d+\s+lmc\s+\d+\s+"(.*)"\s+lid\s+\d+{_RATE}\s*')
_KIND_LETTER = {"Switch": "S", "Ca": "H", "Rt": "R"}
_BLOCK_NAME = {"S": "Switch", "H": "Ca", "R": "Rt"}
_FIX_CAPTURE = "capture it again with ibnetdiscover > FILE"
_VENDOR_DEFAULT = re.compile(r"MT\d+$")


@dataclass(frozen=True)
class _Node:
    """One block's node: its kind (Switch, Ca, Rt), GUID (16 hex digits), ports, node
    description, LID (switches) and the line of its header."""

    kind: str
    guid: str
    ports: int
    description: str
    lid: int | None
    line: int


@dataclass(frozen=True)
class _Seen:
    """One port line: the local end, the far end (its block letter), the far end's node
    description as printed, the rate, the line."""

    local: tuple[str, int]
    far: tuple[str, int]
    far_letter: str
    far_description: str
    rate_gbps: float | None
    line: int


@dataclass(frozen=True)
class _Nic:
    """A cabled CA port: its host, HCA and label, the leaf (GUID) and port it is cabled to."""

    host: str
    hca: str | None
    nic: str | None
    switch: str
    port: int
    rate_gbps: float | None
    line: int


def read_ibnetdiscover(path: str, text: str, *, rail: int | None = None,
                       rails: Mapping[str, int] | None = None) -> Topology:
    """The Topology of one ibnetdiscover capture (``text``, read from ``path``): ``rail`` puts the
    whole capture on that rail (every host must have one CA in it); ``rails`` maps HCA names to
    rails (see the module docstring). Raises InputError naming the file and line."""
    nodes, seen = _parse(path, text)
    _check_far_ends(path, nodes, seen)
    names, notes = _switch_names(nodes)
    cables = _cables(path, nodes, seen)
    wires = [Wire(names[a[0]], names[b[0]], Cable(str(a[1]), str(b[1]), item.rate_gbps), Where(path, item.line))
             for (a, b), item in cables.items() if nodes[a[0]].kind == nodes[b[0]].kind == "Switch"]
    nics, skipped = _nics(path, nodes, cables)
    notes += [f"{count} {what} left out" for what, count in sorted(skipped.items())]
    if not nics:
        Where(path).fail("no CA is cabled to a switch: no node is in this capture",
                         "capture the subnet with its nodes' HCAs up (ibnetdiscover from a node)")
    groups, rail_notes = rail_groups(nics, lambda nic: nic.host, lambda nic: nic.hca,
                                     lambda nic: Where(path, nic.line), rail, rails)
    planes, plane_notes = _planes(path, groups, nodes, names, wires, {nic.switch for nic in nics})
    return Topology(source=path, planes=tuple(planes), notes=tuple(notes + plane_notes + rail_notes))


def _planes(path: str, groups: Mapping[int | None, list[_Nic]], nodes: Mapping[str, _Node],
            names: Mapping[str, str], wires: list[Wire], leaves: set[str]) -> tuple[list[Plane], list[str]]:
    """Each rail's plane (one group: every switch; several: the switches its NICs reach), in
    rail order, and notes (switches no CA reaches, rails that share switches)."""
    every_switch = set(names.values())
    reaches = {rail: (_reachable({names[nic.switch] for nic in members}, wires) if len(groups) > 1
                      else every_switch) for rail, members in groups.items()}
    planes, notes = [], []
    for rail, members in sorted(groups.items(), key=lambda item: -1 if item[0] is None else item[0]):
        plane, plane_notes = _plane(path, rail, members, nodes, names, wires, reaches[rail], leaves)
        planes.append(plane)
        notes += plane_notes
    unreached = len(every_switch - set().union(*reaches.values()))
    if unreached:
        notes.append(f"{unreached} switch{'es' if unreached > 1 else ''} that no CA reaches left out")
    return planes, notes + _shared_note(reaches)


def _parse(path: str, text: str) -> tuple[dict[str, _Node], list[_Seen]]:
    """Every block's node by GUID, and every port line. Raises InputError for a line of no known
    form, a port line outside a block, a GUID given two blocks."""
    nodes: dict[str, _Node] = {}
    seen: list[_Seen] = []
    current: _Node | None = None
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line:
            continue
        where = Where(path, number)
        if _IGNORED.match(line):
            current = None if line.startswith("vendid=") else current
            continue
        header = _NODE.fullmatch(line)
        if header:
            current = _node(header, where, nodes)
            continue
        if current is None:
            where.fail(f"a port line outside any Switch or Ca block: {line[:80]!r}", _FIX_CAPTURE)
        seen.append(_port_line(line, current, where))
    return nodes, seen


def _node(header: re.Match[str], where: Where, nodes: dict[str, _Node]) -> _Node:
    kind, ports, letter, guid_text, description, tail = header.groups()
    guid = f"{int(guid_text, 16):016x}"
    if letter != _KIND_LETTER[kind]:
        where.fail(f"a {kind} block named {letter}-{guid_text}", _FIX_CAPTURE)
    lid = None
    if kind == "Switch":
        match = _SWITCH_TAIL.fullmatch(tail)
        if match is None:
            where.fail(f"a Switch line without its 'port 0 lid N lmc N': {tail.strip()[:60]!r}", _FIX_CAPTURE)
        lid = int(match.group(1))
    if guid in nodes:
        first = nodes[guid]
        what = "switch" if kind == "Switch" else "node"
        where.fail(f"duplicate {what}: {letter}-{guid} ({description!r}) has a block at line {first.line} too",
                   "each GUID has one block: remove the second (a capture pasted twice?)")
    if len(nodes) >= 2 * MAX_NODES:
        where.fail(f"more than {2 * MAX_NODES} switches and CAs", "give the capture of one subnet")
    node = _Node(kind, guid, int(ports), description, lid, where.line)
    nodes[guid] = node
    return node


def _port_line(line: str, current: _Node, where: Where) -> _Seen:
    """One port line of ``current``'s block. Raises InputError for a line of no known form."""
    pattern = _SWITCH_PORT if current.kind == "Switch" else _CA_PORT
    match = pattern.fullmatch(line) or (_SWITCH_PORT.fullmatch(line) if current.kind == "Rt" else None)
    if match is None:
        where.fail(f"not a line of ibnetdiscover's output: {line[:80]!r}", _FIX_CAPTURE)
    if pattern is _SWITCH_PORT or match.re is _SWITCH_PORT:
        port, letter, guid, far_port, _, description, width, speed = match.groups()
    else:
        port, _, letter, guid, far_port, description, width, speed = match.groups()
    if not 1 <= int(port) <= max(current.ports, 1):
        where.fail(f"port {port} of a {current.ports}-port {current.kind}", _FIX_CAPTURE)
    return _Seen((current.guid, int(port)), (f"{int(guid, 16):016x}", int(far_port)), letter, description,
                 _rate_gbps(width, speed), where.line)


def _rate_gbps(width: str | None, speed: str | None) -> float | None:
    """``4`` and ``NDR`` -> 400.0; None for an unknown speed or none printed."""
    per_lane = SPEED_GBPS_PER_LANE.get((speed or "").upper())
    return None if per_lane is None or width is None else int(width) * per_lane


def _check_far_ends(path: str, nodes: Mapping[str, _Node], seen: list[_Seen]) -> None:
    """Raise InputError for a port line whose far end has no block, or a block of another kind."""
    for item in seen:
        far = nodes.get(item.far[0])
        what = f"{item.far_letter}-{item.far[0]} ({item.far_description!r})"
        local = nodes[item.local[0]]
        if far is None:
            missing = "switch" if item.far_letter == "S" else "node"
            Where(path, item.line).fail(
                f"port {item.local[1]} of {local.description!r} leads to {what}, which has no "
                f"{_BLOCK_NAME[item.far_letter]} block: a {missing} missing (the capture is cut short or edited)",
                _FIX_CAPTURE)
        if _KIND_LETTER[far.kind] != item.far_letter:
            Where(path, item.line).fail(f"{what} is a {far.kind} (line {far.line})", _FIX_CAPTURE)


def _cables(path: str, nodes: Mapping[str, _Node], seen: list[_Seen]) -> dict[_Ends, _Seen]:
    """Each cable once (its two ends in sorted order), with the first port line that lists it.
    Raises InputError where a port is listed with two different far ends (two on one port)."""
    peer: dict[tuple[str, int], tuple[tuple[str, int], int]] = {}
    cables: dict[_Ends, _Seen] = {}
    for item in seen:
        # the far end first: two CAs that claim one switch port are named by that port
        for end, other in ((item.far, item.local), (item.local, item.far)):
            known = peer.setdefault(end, (other, item.line))
            if known[0] != other:
                Where(path, item.line).fail(
                    f"port {end[1]} of {_label(nodes[end[0]])} is cabled to {_label(nodes[known[0][0]])} port "
                    f"{known[0][1]} at line {known[1]}, and here to {_label(nodes[other[0]])} port {other[1]}",
                    "one port holds one cable: " + _FIX_CAPTURE)
        cables.setdefault((min(item.local, item.far), max(item.local, item.far)), item)
    return cables


_Ends = tuple[tuple[str, int], tuple[str, int]]


def _label(node: _Node) -> str:
    return f"{node.description!r} ({_KIND_LETTER[node.kind]}-{node.guid})"


def _switch_names(nodes: Mapping[str, _Node]) -> tuple[dict[str, str], list[str]]:
    """Each switch's name by GUID: its node description, or ``S-<guid>`` where several share it."""
    counts = Counter(node.description for node in nodes.values() if node.kind == "Switch")
    shared = sorted(description for description, count in counts.items() if count > 1)
    names = {guid: (f"S-{guid}" if counts[node.description] > 1 else node.description)
             for guid, node in nodes.items() if node.kind == "Switch"}
    notes = [f"{counts[description]} switches share the node description {description!r}: each is named by its "
             f"GUID (S-...); set their node descriptions to tell them apart" for description in shared]
    return names, notes


def _nics(path: str, nodes: Mapping[str, _Node], cables: Mapping[_Ends, _Seen]) -> tuple[list[_Nic], Counter[str]]:
    """Every CA port cabled to a switch, and counts of what was left out (routers, cables
    between CAs). Raises InputError for a CA whose node description names no host."""
    found: list[tuple[_Node, int, str, int, _Seen]] = []
    skipped: Counter[str] = Counter()
    for (a, b), item in cables.items():
        kinds = {nodes[a[0]].kind, nodes[b[0]].kind}
        if "Rt" in kinds:
            skipped["cables to routers"] += 1
        elif kinds == {"Ca"}:
            skipped["cables between two CAs"] += 1
        elif kinds == {"Ca", "Switch"}:
            ca_end, switch_end = (a, b) if nodes[a[0]].kind == "Ca" else (b, a)
            found.append((nodes[ca_end[0]], ca_end[1], switch_end[0], switch_end[1], item))
    first_port: dict[str, int] = {}
    for ca, ca_port, *_ in found:
        first_port[ca.guid] = min(ca_port, first_port.get(ca.guid, ca_port))
    nics = []
    for ca, ca_port, switch, switch_port, item in found:
        if ca_port != first_port[ca.guid]:
            # a rail is one port of each HCA: the pair tests run on the device's first port, so the
            # other ports of a multi-port CA are no rail of their own (and no second NIC of the host)
            skipped["further ports of multi-port CAs"] += 1
            continue
        words = ca.description.split()
        if not words or _VENDOR_DEFAULT.match(words[0]):
            Where(path, ca.line).fail(f"the CA H-{ca.guid} has the node description {ca.description!r}, which names "
                                      "no host", "set each HCA's node description to 'HOST HCA' (rdma-ndd does: "
                                                 "node01 mlx5_0), then capture again")
        hca = words[1] if len(words) > 1 else None
        nic = hca if ca_port == 1 else f"{hca or 'HCA'} port {ca_port}"
        nics.append(_Nic(words[0], hca, nic, switch, switch_port, item.rate_gbps, ca.line))
    return nics, skipped


def _plane(path: str, rail: int | None, members: list[_Nic], nodes: Mapping[str, _Node], names: Mapping[str, str],
           wires: list[Wire], reach: set[str], leaves: set[str]) -> tuple[Plane, list[str]]:
    """The plane of ``rail``: the switches named in ``reach`` (``leaves``: the GUIDs of every
    switch with a CA, of any rail), the cables between them, its NICs on their leaves."""
    builder = PlaneBuilder(rail, path)
    for guid, node in nodes.items():
        if node.kind == "Switch" and names[guid] in reach:
            builder.add_switch(Switch(names[guid], LEAF if guid in leaves else 0, lid=node.lid, guid=f"0x{guid}"),
                               Where(path, node.line))
    for wire in wires:
        if wire.a in reach and wire.b in reach:
            builder.add_wire(wire, both_ends=True)
    for nic in members:
        builder.attach(Attachment(nic.host, names[nic.switch], str(nic.port), nic.rate_gbps, nic.nic),
                       Where(path, nic.line))
    return builder.build(drop_unplaced=True)


def _shared_note(reaches: Mapping[int | None, set[str]]) -> list[str]:
    """A note where rails' planes share switches (a fabric that is not rail-optimised)."""
    rails = sorted(rail for rail in reaches if rail is not None)
    sharing = sorted({rail for rail in rails for other in rails if other != rail and reaches[rail] & reaches[other]})
    if not sharing:
        return []
    return [f"rails {', '.join(map(str, sharing))} share switches (not rail-optimised): each rail's plane holds the "
            "switches its HCAs reach, and a leaf's oversubscription counts only that rail's nodes"]


def _reachable(start: set[str], wires: list[Wire]) -> set[str]:
    """The switches joined to ``start`` by cables."""
    neighbours: dict[str, set[str]] = defaultdict(set)
    for wire in wires:
        neighbours[wire.a].add(wire.b)
        neighbours[wire.b].add(wire.a)
    found, stack = set(start), list(start)
    while stack:
        for other in neighbours[stack.pop()]:
            if other not in found:
                found.add(other)
                stack.append(other)
    return found
