"""A fleet file as the run sees a stand-in fleet (gpudiag.run.standin.StandInFleet): read when
the run first asks for its hosts or a connector, so a bad file is refused where a bad hosts file
would be."""

from __future__ import annotations

from ..fabric.model import Topology
from ..hosts import HostSpec
from .connector import SimulatedConnector
from .fleetfile import Fleet, load_fleet


class FleetFile:
    """The simulated fleet of the file ``source`` (``--simulate FLEET.json``)."""

    def __init__(self, source: str) -> None:
        self._source = source
        self._fleet: Fleet | None = None

    @property
    def source(self) -> str:
        return self._source

    def fleet(self) -> Fleet:
        """The fleet, read and checked on first use. Raises InputError (file, field path, problem)."""
        if self._fleet is None:
            self._fleet = load_fleet(self._source)
        return self._fleet

    def host_specs(self) -> list[HostSpec]:
        """Every node of the fleet, in order."""
        return self.fleet().host_specs()

    def connector(self) -> SimulatedConnector:
        """A connector of its own, which replays the fleet's figures from the start."""
        return SimulatedConnector(self.fleet())

    def topology(self) -> Topology | None:
        """The fleet file's fabric (its ``fabric`` section), or None."""
        return self.fleet().topology
