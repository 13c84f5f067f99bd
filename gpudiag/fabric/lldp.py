"""The nodes' own word on where they are cabled: the LLDP neighbours their facts carry (probes/lldp.py:
each link's switch and port, and the rail of the NIC). They fill what the topology file leaves out
(a node it does not place, on a leaf it does name), and nothing more: a node is not trusted, so
where it names another leaf than the file, the file stands and a note says so."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from .model import LEAF, Attachment, Plane, Topology, TopologyError


def with_lldp(topology: Topology, facts: Iterable[tuple[str, Mapping[str, Any] | None]]) -> tuple[Topology, list[str]]:
    """``topology`` with the attachments the nodes' LLDP neighbours (``facts``: (host, its facts))
    give where a plane lacks the node, and notes on what could not be used or disagrees."""
    added: dict[int | None, list[Attachment]] = {}
    notes: list[str] = []
    for host, fields in facts:
        for neighbour in _neighbours(fields):
            plane = topology.plane(neighbour.get("rail") if isinstance(neighbour.get("rail"), int) else None)
            switch, port = neighbour.get("switch"), neighbour.get("port")
            if plane is None or not isinstance(switch, str):
                continue
            placed = plane.attachment_of.get(host)
            if placed is not None:
                if placed.switch != switch:
                    notes.append(f"{host}: LLDP on {neighbour.get('interface')} names {switch} port {port}, the "
                                 f"topology {placed.switch}: the topology is kept (fix whichever is wrong)")
                continue
            leaf = plane.switch_by_name.get(switch)
            if leaf is None or leaf.tier != LEAF:
                notes.append(f"{host}: LLDP names {switch}, which is no leaf of {plane.describe()} in the topology")
                continue
            added.setdefault(plane.rail, []).append(Attachment(host, switch, port if isinstance(port, str) else None,
                                                               nic=str(neighbour.get("interface") or "") or None))
    if not added:
        return topology, notes
    planes = []
    for plane in topology.planes:
        extra = _first_each(added.get(plane.rail, []))
        planes.append(_extended(plane, extra, notes) if extra else plane)
    return dataclasses.replace(topology, planes=tuple(planes)), notes


def _neighbours(fields: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    found = (fields or {}).get("lldp")
    return [n for n in found if isinstance(n, Mapping)] if isinstance(found, list) else []


def _first_each(attachments: list[Attachment]) -> list[Attachment]:
    """One attachment a host: its first neighbour in the plane (a node has one NIC a plane)."""
    seen: dict[str, Attachment] = {}
    for attachment in attachments:
        seen.setdefault(attachment.host, attachment)
    return list(seen.values())


def _extended(plane: Plane, extra: list[Attachment], notes: list[str]) -> Plane:
    """``plane`` with ``extra`` attachments; those that clash with it (a port already taken) are
    left out with a note."""
    kept = list(plane.attachments)
    for attachment in extra:
        try:
            Plane(plane.rail, plane.switches, plane.links, (*kept, attachment))
        except TopologyError as error:
            notes.append(f"{attachment.host}: its LLDP neighbour cannot be placed: {error}")
            continue
        kept.append(attachment)
    return dataclasses.replace(plane, attachments=tuple(kept))
