"""lldpd's neighbour table as ``lldpctl -f json`` prints it, taken on a switch or on a node:
the cables of that one system, to be merged with the captures of the others into a plane.

lldpd prints ``{"lldp": {"interface": {...}}}``: "interface" is an object keyed by the local
interface's name where there is one neighbour, a list of one-key objects where there are
several. Each names the neighbour's system in its "chassis" (an object keyed by that name,
holding "id", "descr", "mgmt-ip" and "capability") and the neighbour's port in its "port"
(``"id": {"type": "ifname" | "mac" | "local", "value": ...}``, "descr")::

    {"lldp": {"interface": {"swp31": {"via": "LLDP", "chassis": {"spine01": {"mgmt-ip": "10.0.0.11",
      "capability": [{"type": "Bridge", "enabled": true}]}}, "port": {"id": {"type": "ifname",
      "value": "swp1"}, "descr": "to leaf01"}}}}}

A capture taken on switch S: a neighbour that says it is a bridge (or says nothing of its
capabilities) is a switch, cabled from S's local interface to its port (the port id where it is
an interface name or a local name, else its description); its management addresses are kept.
Any other neighbour is a node on S (S is then a leaf), its NIC the neighbour's port. A capture
taken on node H: every neighbour is the leaf of the local interface's NIC, on the ``rail`` given,
else the one the ``rails`` map gives the interface (interfaces it does not name, such as the
management NIC's, are left out); a capture of one neighbour with neither is rail None. A node's
capture of several neighbours needs the map: its management switch is a neighbour too, so no
order of the interface names can tell the rails.

lldpd does not say which system it ran on: a gpudiag.topology/1 file's include entry says so
(``"switch": NAME`` or ``"host": NAME``), or a top-level "local-chassis" (``lldpcli -f json
show chassis``) in the same object.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model import Attachment, Cable, Switch, Topology
from .draft import PlaneBuilder, Wire, rail_groups
from .source import MAX_NODES, Where, line_of

_FIX_CAPTURE = "capture it again with lldpctl -f json"
_WRAP_HINT = ('it does not say which switch or host it was taken on: include it from a gpudiag.topology/1 file, '
              '{"schema": "gpudiag.topology/1", "include": [{"file": "leaf01.lldp.json", "switch": "leaf01"}]}')


@dataclass(frozen=True)
class _Neighbour:
    """One neighbour: the local interface it is on, its system name, its port, whether it says
    it is a bridge (None: it says nothing of its capabilities), its management addresses."""

    interface: str
    name: str
    port: str | None
    bridge: bool | None
    addresses: tuple[str, ...]
    line: int


def local_system(value: Mapping[str, Any]) -> tuple[str, bool] | None:
    """(name, is a bridge) of the "local-chassis" a capture holds beside its "lldp"; None without."""
    local = value.get("local-chassis")
    chassis = local.get("chassis") if isinstance(local, Mapping) else None
    if not isinstance(chassis, Mapping) or len(chassis) != 1:
        return None
    name, details = next(iter(chassis.items()))
    return name, _bridge(details) is not False


def read_lldp(path: str, value: Mapping[str, Any], *, rails: Mapping[str, int] | None = None) -> Topology:
    """The Topology of one capture that names its own system (a "local-chassis" beside "lldp").
    Raises InputError (with the fix) for one that does not, or that is no lldpd capture."""
    local = local_system(value)
    if local is None:
        Where(path, line_of(value)).fail("an lldpctl capture on its own", _WRAP_HINT)
    name, is_switch = local
    builders, notes = lldp_fragments(path, value, switch=name if is_switch else None,
                                     host=None if is_switch else name, rails=rails)
    planes = []
    for builder in builders:
        plane, plane_notes = builder.build()
        planes.append(plane)
        notes += plane_notes
    return Topology(source=path, planes=tuple(planes), notes=tuple(notes))


def lldp_fragments(path: str, value: Any, *, switch: str | None = None, host: str | None = None,
                   rail: int | None = None,
                   rails: Mapping[str, int] | None = None) -> tuple[list[PlaneBuilder], list[str]]:
    """What a capture taken on ``switch`` (or on node ``host``) says, as one part-plane per rail
    (see the module docstring) to be merged with the other captures of that rail, and notes on
    what was left out. Raises InputError naming the file and line."""
    neighbours = _neighbours(path, value)
    if switch is not None:
        return [_switch_fragment(path, switch, neighbours, rail)], []
    if host is None:
        Where(path).fail("an lldpctl capture on its own", _WRAP_HINT)
    return _host_fragments(path, host, neighbours, rail, rails)


def _switch_fragment(path: str, switch: str, neighbours: list[_Neighbour], rail: int | None) -> PlaneBuilder:
    builder = PlaneBuilder(rail, path)
    builder.add_switch(Switch(switch, 0), Where(path), again=True)
    for neighbour in neighbours:
        where = Where(path, neighbour.line)
        if neighbour.bridge is False:
            builder.attach(Attachment(neighbour.name, switch, neighbour.interface, nic=neighbour.port), where)
            continue
        builder.add_switch(Switch(neighbour.name, 0, addresses=neighbour.addresses), where, again=True)
        builder.add_wire(Wire(switch, neighbour.name, Cable(neighbour.interface, neighbour.port), where,
                              far_named=True), both_ends=True)
    return builder


def _host_fragments(path: str, host: str, neighbours: list[_Neighbour], rail: int | None,
                    rails: Mapping[str, int] | None) -> tuple[list[PlaneBuilder], list[str]]:
    if rail is None and rails is None and len(neighbours) > 1:
        # a node's capture holds its management NIC's switch too: no order of names tells the rails
        Where(path, neighbours[1].line).fail(
            f"host {host} has {len(neighbours)} neighbours ({', '.join(n.interface for n in neighbours)}), and "
            "nothing says which interface is on which rail", 'give "rails" mapping its interfaces to rails '
            '({"ens1f0np0": 0, ...}: the others are left out)')
    groups, notes = rail_groups(neighbours, lambda n: host, lambda n: n.interface, lambda n: Where(path, n.line),
                                rail, rails)
    builders = []
    for group_rail, members in sorted(groups.items(), key=lambda item: -1 if item[0] is None else item[0]):
        builder = PlaneBuilder(group_rail, path)
        for neighbour in members:
            where = Where(path, neighbour.line)
            builder.add_switch(Switch(neighbour.name, 0, addresses=neighbour.addresses), where, again=True)
            builder.attach(Attachment(host, neighbour.name, neighbour.port, nic=neighbour.interface), where)
        builders.append(builder)
    return builders, [f"{host}: {note}" for note in notes]


def _neighbours(path: str, value: Any) -> list[_Neighbour]:
    """Every neighbour of the capture, in its order. Raises InputError for a capture of another
    shape, a neighbour without a system name, two neighbours on one interface."""
    lldp = value.get("lldp") if isinstance(value, Mapping) else None
    if isinstance(lldp, list):
        Where(path, line_of(value)).fail("lldpctl's json0 format", "capture it with lldpctl -f json")
    if not isinstance(lldp, Mapping):
        Where(path, line_of(value)).fail('no "lldp" object: this is no lldpctl -f json capture', _FIX_CAPTURE)
    seen: dict[str, _Neighbour] = {}
    found = []
    for interface, entry in _interfaces(path, lldp):
        neighbour = _neighbour(path, interface, entry)
        first = seen.get(interface)
        if first is not None:
            Where(path, neighbour.line).fail(f"two neighbours on {interface}: {first.name} (line {first.line}) and "
                                             f"{neighbour.name}", "one port holds one cable: check the cabling")
        seen[interface] = neighbour
        found.append(neighbour)
        if len(found) > MAX_NODES:
            Where(path, neighbour.line).fail(f"more than {MAX_NODES} neighbours", _FIX_CAPTURE)
    return found


def _interfaces(path: str, lldp: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(local interface, its entry) of each neighbour: "interface" is an object keyed by name,
    or a list of such one-key objects (or, from older lldpd, of objects with a "name")."""
    interfaces = lldp.get("interface", {})
    where = Where(path, line_of(lldp))
    if isinstance(interfaces, Mapping):
        return list(interfaces.items())
    if not isinstance(interfaces, list):
        where.fail('"interface" is neither an object nor a list', _FIX_CAPTURE)
    found = []
    for item in interfaces:
        if isinstance(item, Mapping) and isinstance(item.get("name"), str):
            found.append((item["name"], item))
        elif isinstance(item, Mapping) and len(item) == 1:
            found.append(next(iter(item.items())))
        else:
            Where(path, line_of(item, where.line)).fail("an interface entry of no known shape", _FIX_CAPTURE)
    return found


def _neighbour(path: str, interface: str, entry: Any) -> _Neighbour:
    where = Where(path, line_of(entry))
    if not isinstance(entry, Mapping) or not _is_name(interface):
        where.fail(f"the entry of interface {str(interface)[:40]!r} is no neighbour", _FIX_CAPTURE)
    chassis = entry.get("chassis")
    if not isinstance(chassis, Mapping) or not chassis:
        where.fail(f"the neighbour on {interface} has no chassis", _FIX_CAPTURE)
    if "id" in chassis and isinstance(chassis.get("id"), Mapping):
        where.fail(f"the neighbour on {interface} sends no system name (chassis id "
                   f"{str(chassis['id'].get('value'))[:40]})", "enable the system name TLV on it")
    if len(chassis) != 1:
        where.fail(f"the neighbour on {interface} has {len(chassis)} chassis", _FIX_CAPTURE)
    name, details = next(iter(chassis.items()))
    if not isinstance(details, Mapping) or not _is_name(name):
        where.fail(f"the neighbour on {interface} has a chassis of no known shape", _FIX_CAPTURE)
    return _Neighbour(interface, name, _port(entry.get("port"), interface, where), _bridge(details),
                      _addresses(details.get("mgmt-ip"), interface, where), where.line)


def _is_name(text: Any) -> bool:
    return isinstance(text, str) and 0 < len(text) <= 256 and text.isprintable()


def _port(port: Any, interface: str, where: Where) -> str | None:
    """The neighbour's port: its id where that is an interface or local name, else its description."""
    if port is None:
        return None
    if not isinstance(port, Mapping):
        where.fail(f"the port of the neighbour on {interface} is no object", _FIX_CAPTURE)
    identity = port.get("id")
    kind = identity.get("type") if isinstance(identity, Mapping) else None
    value = identity.get("value") if isinstance(identity, Mapping) else None
    chosen = value if kind in ("ifname", "local") else port.get("descr", value)
    return chosen if _is_name(chosen) else None


def _bridge(details: Any) -> bool | None:
    """Whether the chassis says it is an enabled bridge; None where it lists no capabilities."""
    capabilities = details.get("capability") if isinstance(details, Mapping) else None
    if isinstance(capabilities, Mapping):
        capabilities = [capabilities]
    if not isinstance(capabilities, list) or not capabilities:
        return None
    return any(isinstance(c, Mapping) and c.get("type") == "Bridge" and c.get("enabled") is True
               for c in capabilities)


def _addresses(value: Any, interface: str, where: Where) -> tuple[str, ...]:
    """The management addresses (one string or a list), as IP literals."""
    items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    addresses = []
    for item in items:
        try:
            addresses.append(str(ipaddress.ip_address(item if isinstance(item, str) else "")))
        except ValueError:
            where.fail(f"the neighbour on {interface} has the management address {str(item)[:60]!r}, no IP address",
                       _FIX_CAPTURE)
    return tuple(addresses)
