"""A simulated GPU fleet (``gpudiag sweep --simulate FLEET.json``, ``gpudiag demo``).

A fleet file names the nodes, their GPU model and the faults planted in them. The
``SimulatedConnector`` stands in for SSH: each simulated node answers the probe bundle's command
line with the JSON lines the real bundle would print, at once and without sleeping, so a 64-node
sweep takes seconds. Nothing outside this package sees the fault list: the sweep and the
analysis see only the records, and must find the faults from them.

- the fleet file: ``fleetfile`` (reading and checking it into a ``Fleet``), ``reader`` (its typed
  fields), ``nodespecs`` (per-node settings and overrides), ``faults`` (the planted faults);
- ``fleet``: ``SimulatedFleet``, each node's state from the faults (what each fault does) and the
  network between nodes; ``state``: node and GPU state;
- the records: ``records`` (record shapes and noise), ``nvml`` (what NVML shows), ``probes`` (one
  function per probe), ``runner`` (the bundle's command line and run), ``pause`` (its ``--pause``);
- ``connector``: ``SimulatedConnector`` and ``SimulatedSession``, the transport; ``pairs`` and
  ``pairoptions``: the pair tests between nodes; ``standin``: ``FleetFile``, the fleet as a run
  sees it (gpudiag.run.standin).
"""

from ..analysis.sku import Sku, SkuTable, load_skus
from .connector import SimulatedConnector, SimulatedSession
from .faults import Fault
from .fleet import SimulatedFleet
from .fleetfile import Fleet, demo_fleet_path, load_fleet, parse_fleet
from .nodespecs import NodeSpec
from .standin import FleetFile
from .state import Noise

__all__ = ["Fault", "Fleet", "FleetFile", "NodeSpec", "Noise", "SimulatedConnector", "SimulatedFleet",
           "SimulatedSession", "Sku", "SkuTable", "demo_fleet_path", "load_fleet", "load_skus", "parse_fleet"]
