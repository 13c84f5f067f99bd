"""A Topology shown to a person (``topology_text``) and to a script (``topology_document``): per
plane (rail), the switches by tier from the top, the links between switches with their cables'
ports and rates, each leaf's nodes (folded: gpu[01-08]) and its oversubscription where the rates
are known.

The document is a gpudiag.topology/1 file itself, with what was derived written beside it
("source", "notes", each plane's "leaves" and each link's "capacity_gbps", which the reader
reads past): saved, it reads back as the same topology.
"""

from __future__ import annotations

from typing import Any

from ..hosts import fold_hosts
from ..words import plural
from .model import LEAF, Cable, FabricLink, Plane, Topology, sorted_switches
from .readers.source import TOPOLOGY_SCHEMA, natural_key


def topology_text(topology: Topology) -> str:
    """The topology in plain text, one block per plane, ending in a newline."""
    switches = {switch.name for plane in topology.planes for switch in plane.switches}
    lines = [f"{topology.source}: {plural(len(topology.planes), 'plane')} ({_rails(topology)}), "
             f"{_switches(len(switches))}, "
             f"{plural(len(topology.hosts), 'node')}"]
    lines += [f"note: {note}" for note in topology.notes]
    for plane in topology.planes:
        lines += ["", *_plane_lines(plane)]
    return "\n".join(lines) + "\n"


def _switches(count: int) -> str:
    return f"{count} switch{'' if count == 1 else 'es'}"


def _rails(topology: Topology) -> str:
    rails = [plane.rail for plane in topology.planes]
    numbers = ", ".join(str(rail) for rail in rails if rail is not None)
    shared = "one for every rail" if None in rails else ""
    return "; ".join(part for part in (f"rail{'s' if len(rails) - rails.count(None) > 1 else ''} {numbers}"
                                       if numbers else "", shared) if part)


def _plane_lines(plane: Plane) -> list[str]:
    title = "every rail" if plane.rail is None else f"rail {plane.rail}"
    lines = [f"{title}: {_switches(len(plane.switches))}, "
             f"{plural(len(plane.links), 'link')} between switches, {plural(len(plane.attachments), 'node')}"]
    width = max(len(switch.name) for switch in plane.switches)
    for switch in sorted_switches(plane.switches):
        details = [f"lid {switch.lid}" if switch.lid is not None else "",
                   f"guid {switch.guid}" if switch.guid else "", " ".join(switch.addresses)]
        lines.append(f"  {switch.tier_name:<6} {switch.name:<{width}}  {'  '.join(d for d in details if d)}".rstrip())
        if switch.tier == LEAF:
            lines.append(f"  {'':<6} {'':<{width}}  {_leaf_words(plane, switch.name)}")
    if plane.links:
        lines.append("  links:")
        lines += [f"    {link.a} – {link.b}: {_cable_words(link)}" for link in plane.links]
    return lines


def _leaf_words(plane: Plane, leaf: str) -> str:
    """``nodes gpu[01-02] (2 × 400 Gb/s); oversubscription 0.67:1 (800 / 1200 Gb/s)``."""
    hosts = plane.hosts_under.get(leaf, ())
    if not hosts:
        return "no nodes"
    rates = {plane.attachment_of[host].rate_gbps for host in hosts}
    uniform = len(rates) == 1 and None not in rates
    each = f"{len(hosts)} × {rates.pop():g} Gb/s" if uniform else plural(len(hosts), "node")
    words = f"nodes {fold_hosts(hosts)} ({each})"
    ratio = plane.oversubscription(leaf)
    if ratio is not None:
        words += (f"; oversubscription {ratio:.2f}:1 ({plane.node_gbps(leaf):g} / "
                  f"{plane.uplink_gbps(leaf):g} Gb/s up)")
    return words


def _cable_words(link: FabricLink) -> str:
    """``2 cables × 400 Gb/s = 800 Gb/s; ports 33–1, 34–2``."""
    rates = [cable.rate_gbps for cable in link.cables]
    count = plural(link.count, "cable")
    if link.capacity_gbps is None:
        words = f"{count}, rate unknown"
    elif len(set(rates)) == 1:
        words = f"{count} × {rates[0]:g} Gb/s" + (f" = {link.capacity_gbps:g} Gb/s" if link.count > 1 else "")
    else:
        summed = " + ".join(f"{rate:g}" for rate in rates if rate is not None)
        words = f"{count}, {summed} = {link.capacity_gbps:g} Gb/s"
    ports = [_ports(cable) for cable in link.cables if cable.port_a is not None or cable.port_b is not None]
    return words + (f"; ports {', '.join(ports)}" if ports else "")


def _ports(cable: Cable) -> str:
    return f"{cable.port_a or '?'}–{cable.port_b or '?'}"


def topology_document(topology: Topology) -> dict[str, Any]:
    """The topology as JSON-able data: a gpudiag.topology/1 document (see the module docstring)."""
    return {"schema": TOPOLOGY_SCHEMA, "source": topology.source, "notes": list(topology.notes),
            "planes": [_plane_document(plane) for plane in topology.planes]}


def _plane_document(plane: Plane) -> dict[str, Any]:
    nodes = sorted(plane.attachments, key=lambda a: (a.switch, natural_key(a.host)))
    return {
        "rail": plane.rail,
        "switches": [{"name": s.name, "tier": s.tier, "lid": s.lid, "guid": s.guid, "addresses": list(s.addresses)}
                     for s in sorted_switches(plane.switches)],
        "links": [{"a": link.a, "b": link.b, "count": link.count, "capacity_gbps": link.capacity_gbps,
                   "cables": [{"ports": [cable.port_a, cable.port_b], "rate_gbps": cable.rate_gbps}
                              for cable in link.cables]} for link in plane.links],
        "nodes": [{"host": a.host, "switch": a.switch, "port": a.port, "rate_gbps": a.rate_gbps, "nic": a.nic}
                  for a in nodes],
        "leaves": [{"name": leaf, "nodes": fold_hosts(hosts), "node_count": len(hosts),
                    "node_gbps": plane.node_gbps(leaf), "uplink_gbps": plane.uplink_gbps(leaf),
                    "oversubscription": plane.oversubscription(leaf)}
                   for leaf, hosts in sorted(plane.hosts_under.items())],
    }
