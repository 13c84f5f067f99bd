"""A topology as the pair tests' ``PathTracer`` (gpudiag.links.remote): how many switches between
two nodes' leaves each tcp stream's path is traced through, and which switches the traced
routers' addresses belong to (each switch's ``addresses`` in the topology). tcp pair tests have no
rails: they cross the plane every rail shares (rail None), or the only plane there is."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from .model import Plane, Topology
from .paths import PathModel


class TopologyTracer:
    """The ``PathTracer`` of ``topology``'s railless plane (None where it has no such plane and
    more than one plane: then nothing is traced)."""

    def __init__(self, topology: Topology) -> None:
        plane = topology.plane(None) or (topology.planes[0] if len(topology.planes) == 1 else None)
        self._plane: Plane | None = plane
        self._model = PathModel(plane) if plane is not None else None
        self._owners = {_canonical(address): name for address, name in (plane.address_owner.items() if plane else ())
                        if _canonical(address) is not None}

    def hops_to_trace(self, a: str, b: str) -> int:
        """Switches between the leaves of ``a`` and ``b`` (0 under one leaf, or unplaced; 0 too
        where no switch of the plane has an address: a traced hop could name none)."""
        if self._model is None or not self._owners:
            return 0
        paths = self._model.of_pair(a, b)
        return 0 if paths is None else paths.middle_hops

    def switches(self, a: str, b: str, addresses: Sequence[str | None]) -> tuple[str, ...] | None:
        """``a``'s leaf, the switches the addresses name, ``b``'s leaf; None where an address is
        missing, is no IP address, or names no switch of the plane."""
        if self._plane is None:
            return None
        first, last = self._plane.leaf_of(a), self._plane.leaf_of(b)
        names = [self._owners.get(_canonical(address) or "") if isinstance(address, str) else None
                 for address in addresses]
        if first is None or last is None or any(name is None for name in names):
            return None
        return (first, *(name for name in names if name is not None), last)


def _canonical(address: str | None) -> str | None:
    try:
        return str(ipaddress.ip_address((address or "").split("%")[0]))
    except ValueError:
        return None
