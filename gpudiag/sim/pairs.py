"""Pair tests on a simulated fleet (demos, tests, benchmarks): each rail of a pair measured
through the fleet's own network model, with fresh noise on every attempt. The attribution sees
only these figures, never the fleet's faults."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

from ..links.attribution import LinkResult
from ..links.schedule import Pair, pair_key
from .fleet import SimulatedFleet

BACKEND = "perftest"


class SimulatedPairRunner:
    """The PairRunner of gpudiag.links.rounds for a simulated fleet: the rails both ends have, at
    the lower end's line rate (as a real probe reports a pair between a 400 and a 200 Gbit/s
    node at 200); an unreachable or hung end gives an error per rail."""

    def __init__(self, fleet: SimulatedFleet, streams: int = 4) -> None:
        self._fleet = fleet
        self._streams = streams
        self._lock = threading.Lock()
        self._attempts: dict[tuple[str, str], int] = {}

    def round_started(self, pairs: Sequence[Pair]) -> None:
        """The pairs that run at once from now: what they load the fabric with (gpudiag/sim/fabric.py)."""
        if self._fleet.fabric is not None:
            self._fleet.fabric.round_started(pairs)

    def run_pair(self, a: str, b: str) -> list[LinkResult]:
        """One result per rail of the pair ``a``–``b`` (Gbit/s, or an error)."""
        attempt = self._next_attempt(a, b)
        # Each end's rate, not the first end's: a pair is as fast as its slower end, so a pair
        # between two models judged at the faster one's line rate made every boundary node a slow_nic.
        ends = (self._fleet.sku(a).network, self._fleet.sku(b).network)
        rails = min(network.rails for network in ends)
        if self._fleet.fabric is not None and self._fleet.fabric.spec.rails is not None:
            rails = min(rails, self._fleet.fabric.spec.rails)  # the rails its fabric carries
        end_rates = (ends[0].rail_line_rate_gbps, ends[1].rail_line_rate_gbps)
        line_rate_gbps = min(end_rates)
        down = [host for host in (a, b) if self._fleet.is_unreachable(host) or self._fleet.is_hung(host)]
        results = []
        for rail in range(rails):
            if down:
                results.append(LinkResult(a, b, BACKEND, rail, line_rate_gbps=line_rate_gbps,
                                          error=f"{down[0]}: the pair server did not answer (simulated)",
                                          end_rates_gbps=end_rates))
                continue
            gbps = max(0.0, self._fleet.link_gbps(a, b, rail, self._fleet.link_rng(a, b, rail, attempt)))
            fabric = self._fleet.fabric
            streams = fabric.streams(a, b, rail, gbps, self._streams, attempt) if fabric is not None else None
            if streams is None:
                results.append(LinkResult(a, b, BACKEND, rail, gbps, line_rate_gbps, end_rates_gbps=end_rates))
                continue
            forward, backward = streams
            slower = min(math.fsum(s.gbps for s in forward), math.fsum(s.gbps for s in backward))
            results.append(LinkResult(a, b, BACKEND, rail, slower, line_rate_gbps, streams=forward,
                                      back_streams=backward, end_rates_gbps=end_rates))
        return results

    def cancel(self) -> None:
        """Nothing to end: a simulated pair test returns at once."""
        return None

    def _next_attempt(self, a: str, b: str) -> int:
        pair = pair_key(a, b)
        with self._lock:
            attempt = self._attempts.get(pair, 0)
            self._attempts[pair] = attempt + 1
            return attempt
