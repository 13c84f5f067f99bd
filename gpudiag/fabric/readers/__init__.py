"""The readers that build a Topology (gpudiag.fabric.model) from files in their own formats, each
detected by its content: an ibnetdiscover capture (ibnetdiscover.py), a Slurm topology.conf
(slurm.py), gpudiag's own gpudiag.topology/1 JSON, which can include the others (jsonfile.py),
and an lldpctl -f json capture that names its own system (lldp.py).

Every problem is an InputError of one line naming the file, the line and the fix; a file too
large, a line too long or bytes that are no text are refused before they are parsed
(source.py). Several files merge into one Topology, plane by plane: a rail two files give is an
error (a gpudiag.topology/1 file can include them with the rails they are meant for).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...errors import InputError
from ..model import Topology, TopologyError
from .ibnetdiscover import read_ibnetdiscover
from .jsonfile import read_topology_json
from .lldp import read_lldp
from .slurm import read_slurm
from .source import FORMATS, IBNETDISCOVER, LLDP, TOPOLOGY_JSON, detect, load_rails_map, read_text

__all__ = ["FORMATS", "NO_TOPOLOGY", "chosen_topology", "load_rails_map", "load_topology", "read_topology"]

# --topology none: no topology, even where the site or a simulated fleet gives one.
NO_TOPOLOGY = "none"


def chosen_topology(paths: Sequence[str], fallback: Topology | None = None) -> Topology | None:
    """The topology a run plans and judges with: the files at ``paths`` (``--topology``, or the
    site's $GPUDIAG_TOPOLOGY), else ``fallback`` (a simulated fleet's own fabric); None for
    (NO_TOPOLOGY,). Raises InputError for a file that cannot be read."""
    if tuple(paths) == (NO_TOPOLOGY,):
        return None
    return load_topology(paths) if paths else fallback


def load_topology(paths: Sequence[str], *, rails: Mapping[str, int] | None = None) -> Topology:
    """The Topology of the files at ``paths``, merged (``source``: the paths, comma-separated).
    ``rails`` maps HCA (or interface) names to rails, for captures that hold several rails, and
    gives a topology.conf a copy of its plane per rail. Raises InputError naming the file, the
    line and the fix."""
    if not paths:
        raise InputError("no topology file given; give an ibnetdiscover capture, a topology.conf or a "
                         "gpudiag.topology/1 file")
    topologies = [read_topology(path, rails=rails) for path in paths]
    return topologies[0] if len(topologies) == 1 else _merged(topologies)


def read_topology(path: str, *, rails: Mapping[str, int] | None = None) -> Topology:
    """The Topology of one file, in whichever of the formats (FORMATS) its content shows.
    Raises InputError."""
    text = read_text(path)
    kind, value = detect(path, text)
    try:
        if kind == TOPOLOGY_JSON:
            return read_topology_json(path, value, rails=rails)
        if kind == LLDP:
            return read_lldp(path, value, rails=rails)
        if kind == IBNETDISCOVER:
            return read_ibnetdiscover(path, text, rails=rails)
        return read_slurm(path, text, rails=sorted(set(rails.values())) if rails else None)
    except TopologyError as error:  # the model's own check, where a reader's did not come first
        where = f"{path}:{error.line}" if error.line else path
        raise InputError(f"{where}: {error}; fix the topology") from None


def _merged(topologies: list[Topology]) -> Topology:
    """One Topology of the planes of several; raises InputError for a rail two of them give."""
    given: dict[int | None, tuple[int, str]] = {}
    for index, topology in enumerate(topologies):
        for plane in topology.planes:
            place, first = given.setdefault(plane.rail, (index, topology.source))
            if place != index:
                which = "the shared plane (every rail)" if plane.rail is None else f"rail {plane.rail}"
                raise InputError(f"{topology.source}: {which} is given by {first} too; give each rail by one file, "
                                 "or write a gpudiag.topology/1 file that includes each with its rail")
    planes = sorted((plane for topology in topologies for plane in topology.planes),
                    key=lambda plane: -1 if plane.rail is None else plane.rail)
    notes = tuple(f"{topology.source}: {note}" for topology in topologies for note in topology.notes)
    return Topology(source=", ".join(topology.source for topology in topologies), planes=tuple(planes), notes=notes)
