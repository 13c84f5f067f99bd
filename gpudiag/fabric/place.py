"""Where one node sits in the fabric, in words for the engineer on call (``gpudiag triage
--topology``): per plane, its leaf and port, that leaf's uplinks and oversubscription and the
nodes it shares the leaf with; and where the node's own LLDP says otherwise."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..hosts import fold_hosts
from ..words import plural
from .model import Topology


def place_lines(host: str, topology: Topology, facts: Mapping[str, Any] | None = None) -> list[str]:
    """One line per plane of ``topology`` for ``host``, then one per LLDP neighbour of its
    ``facts`` that names another leaf than the topology does."""
    lines = []
    for plane in topology.planes:
        where = plane.describe()
        attachment = plane.attachment_of.get(host)
        if attachment is None:
            lines.append(f"{where}: {host} is not in the topology {topology.source} (its paths are not placed)")
            continue
        leaf = attachment.switch
        port = f" port {attachment.port}" if attachment.port else ""
        uplinks = plane.uplinks(leaf)
        over = plane.oversubscription(leaf)
        ratio = f", {over:.2g}:1" if over is not None else ""
        neighbours = [other for other in plane.hosts_under.get(leaf, ()) if other != host]
        lines.append(f"{where}: {leaf}{port}; {leaf} has {plural(len(uplinks), 'uplink')} to "
                     f"{', '.join(sorted({link.b if link.a == leaf else link.a for link in uplinks})) or 'no switch'}"
                     f"{ratio}; under it also {fold_hosts(neighbours) or 'no other node'}")
        for neighbour in (facts or {}).get("lldp") or []:
            if not isinstance(neighbour, Mapping) or neighbour.get("rail") != plane.rail:
                continue
            if isinstance(neighbour.get("switch"), str) and neighbour["switch"] != leaf:
                lines.append(f"{where}: LLDP on {neighbour.get('interface')} names {neighbour['switch']} port "
                             f"{neighbour.get('port')}, not {leaf}: the cabling or the topology file is wrong")
    return lines
