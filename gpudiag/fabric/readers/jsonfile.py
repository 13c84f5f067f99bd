"""gpudiag's own topology file (``"schema": "gpudiag.topology/1"``): planes written out, and
captures in the other formats included and merged.

::

    {"schema": "gpudiag.topology/1",
     "rails": {"mlx5_0": 0, "mlx5_3": 1},
     "planes": [{"rail": 0,
                 "switches": [{"name": "leaf01", "tier": 1, "lid": 3, "guid": "0x...", "addresses": ["10.0.0.1"]}],
                 "links": [{"a": "leaf01", "b": "spine01", "cables": [{"ports": ["49", "1"], "rate_gbps": 400}]},
                           {"a": "leaf02", "b": "spine01", "count": 2, "rate_gbps": 400}],
                 "nodes": [{"host": "gpu01", "switch": "leaf01", "port": "1", "rate_gbps": 400, "nic": "mlx5_0"}]}],
     "include": [{"file": "rail1.txt", "rail": 1}, {"file": "topology.conf", "rails": [2, 3]},
                 {"file": "leaf01.lldp.json", "switch": "leaf01", "rail": 0}]}

A plane's ``rail`` is a rail number or null (every rail); a switch's ``tier`` where absent is
derived (a switch with nodes is a leaf; the others breadth first above). Include paths are
relative to this file. An ibnetdiscover capture or a topology.conf gives whole planes: ``rail``
puts it on one rail, ``rails`` copies a one-plane file to each rail listed. An lldpctl capture
says what one switch (``switch``) or node (``host``) sees: its cables merge into the plane of
its ``rail`` (this file's own, or the other captures'). A rail that two sources give whole is an
error; ``rails`` maps HCA names to rails for the ibnetdiscover captures included.

Keys this file does not know are refused (a misspelt "swtiches" would otherwise drop every
switch), but the figures gpudiag itself writes beside them (gpudiag.fabric.render's document:
"source", "notes", a plane's "leaves", a link's "capacity_gbps") are read past, so the JSON
that ``gpudiag topology --json`` writes reads back as the same topology.
"""

from __future__ import annotations

import ipaddress
import math
import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..model import MAX_TIER, Attachment, Cable, Plane, Switch, Topology
from .draft import PlaneBuilder, Wire
from .ibnetdiscover import read_ibnetdiscover
from .lldp import lldp_fragments
from .slurm import read_slurm
from .source import (
    IBNETDISCOVER,
    LLDP,
    SLURM,
    TOPOLOGY_SCHEMA,
    Where,
    detect,
    is_rail,
    rails_from_json,
    read_text,
)

MAX_INCLUDES = 10_000
MAX_RATE_GBPS = 1_000_000.0
MAX_LID = 0xFFFF
_TOP = ("schema", "planes", "include", "rails")
_PLANE = ("rail", "switches", "links", "nodes")
_SWITCH = ("name", "tier", "lid", "guid", "addresses")
_LINK = ("a", "b", "cables", "count", "rate_gbps")
_CABLE = ("ports", "rate_gbps")
_NODE = ("host", "switch", "port", "rate_gbps", "nic")
_INCLUDE = ("file", "rail", "rails", "switch", "host")
# What gpudiag's own document adds (derived figures), read past.
_WRITTEN = {"top": ("source", "notes"), "plane": ("leaves",), "link": ("capacity_gbps",)}


class _Planes:
    """The planes read so far: whole ones (from included captures) and those still being built
    (this file's own, and the lldpctl captures' parts), by rail, each with what gave it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.whole: dict[int | None, tuple[Plane, str]] = {}
        self.building: dict[int | None, tuple[PlaneBuilder, str]] = {}

    def _check_new(self, rail: int | None, origin: str, where: Where) -> None:
        known = self.whole.get(rail) or self.building.get(rail)
        if known is not None:
            which = "the shared plane (rail null)" if rail is None else f"rail {rail}"
            where.fail(f"{which} is given twice: by {origin} and by {known[1]}",
                       "give each rail once (an lldpctl capture adds to a plane; an ibnetdiscover capture or "
                       "topology.conf is a whole one)")

    def add_whole(self, plane: Plane, origin: str, where: Where) -> None:
        self._check_new(plane.rail, origin, where)
        self.whole[plane.rail] = (plane, origin)

    def add_own(self, builder: PlaneBuilder, origin: str, where: Where) -> None:
        self._check_new(builder.rail, origin, where)
        self.building[builder.rail] = (builder, origin)

    def merge(self, fragment: PlaneBuilder, origin: str, where: Where) -> None:
        if fragment.rail in self.whole:
            self._check_new(fragment.rail, origin, where)
        known = self.building.get(fragment.rail)
        if known is None:
            self.building[fragment.rail] = (fragment, origin)
        else:
            known[0].merge(fragment)

    def topology(self, notes: list[str]) -> Topology:
        planes = [plane for plane, _ in self.whole.values()]
        for builder, _ in self.building.values():
            plane, plane_notes = builder.build()
            planes.append(plane)
            notes += plane_notes
        ordered = sorted(planes, key=lambda plane: -1 if plane.rail is None else plane.rail)
        if not ordered:
            Where(self.path).fail("no plane: neither planes nor include give one", "give planes, or include captures")
        return Topology(source=self.path, planes=tuple(ordered), notes=tuple(notes))


def read_topology_json(path: str, value: Mapping[str, Any], *, rails: Mapping[str, int] | None = None) -> Topology:
    """The Topology of a gpudiag.topology/1 file (``value``, read from ``path``); ``rails`` maps
    HCA names to rails where the file gives no "rails" of its own. Raises InputError naming the
    file, the line and the JSON path of the problem."""
    top = Where(path, 1)
    _check_keys(value, _TOP + _WRITTEN["top"], top)
    if "rails" in value:
        rails = rails_from_json(value["rails"], top.at("rails", value["rails"]))
    planes = _Planes(path)
    for index, plane in enumerate(_list(value, "planes", top)):
        where = top.at("planes", value["planes"]).at(index, plane)
        planes.add_own(_own_plane(plane, where), f"planes[{index}]", where)
    notes: list[str] = []
    includes = _list(value, "include", top)
    if len(includes) > MAX_INCLUDES:
        top.at("include").fail(f"more than {MAX_INCLUDES} files", "include fewer files")
    for index, entry in enumerate(includes):
        where = top.at("include", value["include"]).at(index, entry)
        notes += _include(path, entry, where, f"include[{index}]", rails, planes)
    return planes.topology(notes)


def _include(path: str, entry: Any, where: Where, origin: str, rails: Mapping[str, int] | None,
             planes: _Planes) -> list[str]:
    """Read one include entry into ``planes``; its notes. Raises InputError."""
    _check_keys(entry, _INCLUDE, where)
    name = entry.get("file")
    if not isinstance(name, str) or not name or not name.isprintable():
        where.at("file").fail("no file named", 'give the file: {"file": "rail0.txt", "rail": 0}')
    included = os.path.join(os.path.dirname(path), name)
    rail = _optional_rail(entry, where)
    copies = _rail_list(entry, where)
    system = {key: entry[key] for key in ("switch", "host") if entry.get(key) is not None}
    text = read_text(included)
    kind, value = detect(included, text)
    origin = f"{origin} ({name})"
    if kind == LLDP:
        if len(system) != 1 or not all(isinstance(v, str) and v for v in system.values()) or copies is not None:
            where.fail(f"{name} is an lldpctl capture: say which switch or host it was taken on",
                       f'give "switch" or "host" (and "rail"): {{"file": "{name}", "switch": "leaf01"}}')
        fragments, notes = lldp_fragments(included, value, switch=system.get("switch"), host=system.get("host"),
                                          rail=rail, rails=rails)
        for fragment in fragments:
            planes.merge(fragment, origin, where)
        return notes
    if system:
        where.fail(f"{name} is no lldpctl capture: \"switch\" and \"host\" name where one was taken",
                   'leave them out; give "rail" or "rails"')
    if kind == IBNETDISCOVER:
        topology = read_ibnetdiscover(included, text, rail=rail, rails=rails)
    elif kind == SLURM:
        topology = read_slurm(included, text, rails=None if rail is None else [rail])
    else:
        where.fail(f"{name} is a {TOPOLOGY_SCHEMA} file itself", "list its planes and includes in this file instead")
    for plane in _copies(topology, copies, where, name):
        planes.add_whole(plane, origin, where)
    return list(topology.notes)


def _copies(topology: Topology, rails: list[int] | None, where: Where, name: str) -> list[Plane]:
    """The planes of ``topology``, or its one plane copied to each of ``rails``."""
    if rails is None:
        return list(topology.planes)
    if len(topology.planes) != 1:
        where.fail(f"{name} holds {len(topology.planes)} rails' planes, so it cannot be copied to rails {rails}",
                   'leave out "rails" (each plane keeps its rail)')
    return [replace(topology.planes[0], rail=rail) for rail in rails]


def _optional_rail(entry: Mapping[str, Any], where: Where) -> int | None:
    rail = entry.get("rail")
    if rail is not None and not is_rail(rail):
        where.at("rail").fail(f"{rail!r} is no rail number", "give a whole number from 0, or null for every rail")
    return rail


def _rail_list(entry: Mapping[str, Any], where: Where) -> list[int] | None:
    rails = entry.get("rails")
    if rails is None:
        return None
    if entry.get("rail") is not None:
        where.fail('both "rail" and "rails"', 'give "rail" for one rail, "rails" to copy it to several')
    if not isinstance(rails, list) or not rails or not all(is_rail(r) for r in rails) or len(set(rails)) < len(rails):
        where.at("rails").fail(f"{str(rails)[:60]} is no list of distinct rail numbers", 'write "rails": [0, 1, 2]')
    return sorted(rails)


def _own_plane(plane: Any, where: Where) -> PlaneBuilder:
    """A plane written in the file, as a builder (lldpctl captures of its rail may add to it)."""
    _check_keys(plane, _PLANE + _WRITTEN["plane"], where)
    rail = _optional_rail(plane, where)
    builder = PlaneBuilder(rail, where.path)
    for index, switch in enumerate(_list(plane, "switches", where)):
        spot = where.at("switches", plane["switches"]).at(index, switch)
        builder.add_switch(_switch(switch, spot), spot)
    for index, link in enumerate(_list(plane, "links", where)):
        spot = where.at("links", plane["links"]).at(index, link)
        for cable in _cables(link, spot, builder):
            builder.add_wire(Wire(link["a"], link["b"], cable, spot))
    for index, node in enumerate(_list(plane, "nodes", where)):
        spot = where.at("nodes", plane["nodes"]).at(index, node)
        builder.attach(_node(node, spot, builder), spot)
    return builder


def _switch(switch: Any, where: Where) -> Switch:
    _check_keys(switch, _SWITCH, where)
    name = _text(switch, "name", where, required=True)
    tier = switch.get("tier")
    if tier is not None and not (isinstance(tier, int) and not isinstance(tier, bool) and 1 <= tier <= MAX_TIER):
        where.at("tier").fail(f"{tier!r} is no tier", f"give 1 (leaf), 2 (spine), … up to {MAX_TIER}, or leave it out")
    lid = switch.get("lid")
    if lid is not None and not (isinstance(lid, int) and not isinstance(lid, bool) and 0 <= lid <= MAX_LID):
        where.at("lid").fail(f"{lid!r} is no LID", f"give a whole number from 0 to {MAX_LID}, or null")
    addresses = switch.get("addresses", [])
    if not isinstance(addresses, list):
        where.at("addresses").fail("not a list", 'write "addresses": ["10.0.0.1"]')
    spot = where.at("addresses")
    return Switch(name, tier or 0, lid=lid, guid=_text(switch, "guid", where),
                  addresses=tuple(_address(item, spot.at(index)) for index, item in enumerate(addresses)))


def _address(value: Any, where: Where) -> str:
    try:
        return str(ipaddress.ip_address(value if isinstance(value, str) else ""))
    except ValueError:
        where.fail(f"{str(value)[:60]!r} is no IP address", "give the IP literals the switch answers from")


def _cables(link: Any, where: Where, builder: PlaneBuilder) -> list[Cable]:
    """A link's cables: its "cables", or "count" cables of "rate_gbps". Raises InputError for an
    end that is no switch of the plane."""
    _check_keys(link, _LINK + _WRITTEN["link"], where)
    for end in ("a", "b"):
        name = _text(link, end, where, required=True)
        if name not in builder.switches:
            where.at(end).fail(f"{name!r} is no switch of {builder.describe()}", "define it under switches, or fix it")
    count = link.get("count")
    if count is not None and not (isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= 4096):
        where.at("count").fail(f"{count!r} is no cable count", "give a whole number of cables from 1")
    if "cables" not in link:
        if count is None:
            where.fail('neither "cables" nor "count"', 'give "cables": [{"ports": ["49", "1"]}] or "count": 1')
        return [Cable(rate_gbps=_rate(link, where))] * count
    cables = [_cable(cable, where.at("cables", link["cables"]).at(index, cable))
              for index, cable in enumerate(_list(link, "cables", where))]
    if not cables or (count is not None and count != len(cables)):
        where.fail(f"{len(cables)} cables listed but count {count}", 'list each cable once, or give "count" alone')
    return cables


def _cable(cable: Any, where: Where) -> Cable:
    _check_keys(cable, _CABLE, where)
    ports = cable.get("ports", [None, None])
    if not isinstance(ports, list) or len(ports) != 2:
        where.at("ports").fail(f"{str(ports)[:60]} is no pair of ports", 'write "ports": ["49", "1"] (a\'s, then b\'s)')
    port_a, port_b = (_port(port, where.at("ports").at(index)) for index, port in enumerate(ports))
    return Cable(port_a, port_b, _rate(cable, where))


def _node(node: Any, where: Where, builder: PlaneBuilder) -> Attachment:
    _check_keys(node, _NODE, where)
    host = _text(node, "host", where, required=True)
    switch = _text(node, "switch", where, required=True)
    if switch not in builder.switches:
        where.at("switch").fail(f"{switch!r} is no switch of {builder.describe()}", "define it under switches")
    return Attachment(host, switch, _port(node.get("port"), where.at("port")), _rate(node, where),
                      _text(node, "nic", where))


def _port(value: Any, where: Where) -> str | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1_000_000:
        return str(value)
    if isinstance(value, str) and 0 < len(value) <= 64 and value.isprintable():
        return value
    where.fail(f"{str(value)[:60]!r} is no port", 'give the port as the switch names it ("49", "swp1") or null')


def _rate(item: Mapping[str, Any], where: Where) -> float | None:
    rate = item.get("rate_gbps")
    if rate is None:
        return None
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= MAX_RATE_GBPS:
        where.at("rate_gbps").fail(f"{rate!r} is no rate", "give the line rate in Gb/s (400), or null")
    return float(rate) if math.isfinite(rate) else None


def _text(item: Mapping[str, Any], key: str, where: Where, *, required: bool = False) -> Any:
    value = item.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > 256 or not value.isprintable():
        problem = f'no "{key}"' if value is None else f"{str(value)[:60]!r} is no {key}"
        where.at(key).fail(problem, f'give "{key}" as a printable string')
    return value


def _list(item: Mapping[str, Any], key: str, where: Where) -> list[Any]:
    value = item.get(key, [])
    if not isinstance(value, list):
        where.at(key, value).fail("not a list", f'write "{key}": [...]')
    return value


def _check_keys(item: Any, known: tuple[str, ...], where: Where) -> None:
    if not isinstance(item, Mapping):
        where.fail("not a JSON object", "write it as {...}")
    unknown = sorted(key for key in item if key not in known)
    if unknown:
        where.fail(f"unknown key {unknown[0]!r}", f"the keys here are {', '.join(known)}")
