"""The transport of a simulated fleet: ``SimulatedConnector`` stands in for SSH, and each
simulated node answers the probe bundle's command line with the JSON lines the real bundle would
print (gpudiag/sim/runner.py), at once and without sleeping, so a 64-node sweep takes seconds."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ..bundle import Bundle
from ..hosts import HostSpec
from ..links.remote import PairTestOptions
from ..links.rounds import PairRunner
from ..transport import CommandResult, Unreachable
from .fleet import SimulatedFleet
from .fleetfile import Fleet
from .pairoptions import simulated_pair_runner
from .runner import BundleUsage, parse_bundle_argv, run_bundle


class SimulatedConnector:
    """The Connector of gpudiag/run/fanout.py for a simulated fleet. Counts calls per host, so each
    connector replays the same sequence of values from the start."""

    def __init__(self, fleet: Fleet | SimulatedFleet) -> None:
        self.fleet = fleet if isinstance(fleet, SimulatedFleet) else SimulatedFleet(fleet)
        self._lock = threading.Lock()
        self._calls: dict[str, int] = {}

    def connect(self, host: HostSpec, within_s: float | None = None) -> SimulatedSession:
        """A session on ``host``. Raises Unreachable for an unreachable node or one not in the fleet."""
        if host.host not in self.fleet:
            raise Unreachable(f"{host.label}: not a node of the simulated fleet {self.fleet.spec.source}")
        if self.fleet.is_unreachable(host.host):
            raise Unreachable("port 22: no answer within 10 s (simulated)")
        return SimulatedSession(self, host.host)

    def pair_runner(self, options: PairTestOptions) -> PairRunner:
        """The pair tests between the fleet's nodes over the backend and line rate ``options`` ask for."""
        return simulated_pair_runner(self.fleet, options)

    def next_call(self, host: str) -> int:
        """The number of this run on ``host`` (0 for the first), counted across sessions."""
        with self._lock:
            call = self._calls.get(host, 0)
            self._calls[host] = call + 1
            return call

    def close(self) -> None:
        return None


class SimulatedSession:
    """One simulated node: answers the bundle's command line with its records, at once."""

    def __init__(self, connector: SimulatedConnector, host: str) -> None:
        self._connector = connector
        self._host = host
        self._cancelled = threading.Event()

    def prepare(self, bundle: Bundle) -> None:
        """Nothing to copy: the simulated node needs no bundle."""
        return None

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        """The bundle's output for ``argv`` on this node; ``duration_s`` is simulated (no sleep)."""
        fleet = self._connector.fleet
        if self._cancelled.is_set():
            return CommandResult(exit_status=None, stdout="", stderr="killed", timed_out=False, duration_s=0.0)
        if fleet.is_hung(self._host):
            return CommandResult(exit_status=None, stdout="", stderr="", timed_out=True, duration_s=timeout_s)
        try:
            call = parse_bundle_argv(argv)
        except BundleUsage as usage:
            return CommandResult(exit_status=2, stdout="", stderr=f"python -m probes: error: {usage}\n",
                                 timed_out=False, duration_s=0.5)
        number = self._connector.next_call(self._host)
        node = fleet.node_state(self._host, number)
        return run_bundle(call, node, fleet.draw(self._host, number)).command_result(timeout_s)

    def is_open(self) -> bool:
        return True

    def cancel(self) -> None:
        self._cancelled.set()

    def close(self) -> None:
        return None
