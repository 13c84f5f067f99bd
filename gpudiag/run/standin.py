"""A fleet that stands in for real hosts (``--simulate``): its own host list and a connector to
its nodes that also runs the pair tests between them. The command line builds one (gpudiag.sim
does); the run sees only these protocols, the ones the real connectors and pair runners satisfy,
and never what is behind them."""

from __future__ import annotations

from typing import Protocol

from ..fabric.model import Topology
from ..hosts import HostSpec
from ..links.remote import PairTestOptions
from ..links.rounds import PairRunner
from ..transport import Connector


class StandInConnector(Connector, Protocol):
    """Sessions on a stand-in fleet's nodes, and the pair tests between them."""

    def pair_runner(self, options: PairTestOptions) -> PairRunner:
        """The pair tests over the backend and line rate ``options`` ask for."""
        ...


class StandInFleet(Protocol):
    """``source``: the fleet as the operator named it (kept with the sweep's options). Its host
    list and connector raise InputError where the fleet cannot be read."""

    @property
    def source(self) -> str: ...

    def host_specs(self) -> list[HostSpec]:
        """Every node of the fleet, in order."""
        ...

    def connector(self) -> StandInConnector:
        """A connector of its own, which replays the fleet's figures from the start."""
        ...

    def topology(self) -> Topology | None:
        """The fabric between its nodes, where it has one (a site's topology file's stand-in)."""
        ...
