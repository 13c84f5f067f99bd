"""A simulated fleet's pair tests as the request asked for them: ``--net-backend`` and
``--net-line-rate`` (gpudiag.links.remote.PairTestOptions) applied to the figures of
gpudiag.sim.pairs, as the real runners apply them.

``auto`` stays perftest at the port's line rate; ``tcp`` (or ``nccl``) relabels every result,
so a tcp fleet is judged as tcp is — against a line rate only where the operator gave one —
and ``--net-line-rate`` replaces the port's line rate, as RemotePairRunner does. This is how a
small job is simulated with and without a line rate to judge it against.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..links.attribution import LinkResult
from ..links.remote import AUTO, PairTestOptions
from ..links.rounds import PairRunner
from ..links.schedule import Pair
from .fleet import SimulatedFleet
from .pairs import SimulatedPairRunner


class RequestedBackendRunner:
    """A PairRunner whose results carry ``options``' backend (unless auto) and line rate (where
    given) in place of the inner runner's."""

    def __init__(self, inner: PairRunner, options: PairTestOptions) -> None:
        self._inner = inner
        self._backend = None if options.backend == AUTO else options.backend
        self._line_rate_gbps = options.line_rate_gbps

    def run_pair(self, a: str, b: str) -> list[LinkResult]:
        """The inner runner's results for ``a``–``b``, relabelled."""
        return [self._relabel(result) for result in self._inner.run_pair(a, b)]

    def round_started(self, pairs: Sequence[Pair]) -> None:
        """Tell the inner runner which pairs run at once from now."""
        self._inner.round_started(pairs)

    def cancel(self) -> None:
        """End the inner runner's pair tests in flight."""
        self._inner.cancel()

    def _relabel(self, result: LinkResult) -> LinkResult:
        changes: dict[str, object] = {}
        if self._backend is not None:
            changes["backend"] = self._backend
        if self._line_rate_gbps is not None:
            changes["line_rate_gbps"] = self._line_rate_gbps
        return dataclasses.replace(result, **changes) if changes else result


def simulated_pair_runner(fleet: SimulatedFleet, options: PairTestOptions) -> PairRunner:
    """The pair tests of a simulated ``fleet`` over the backend and line rate ``options`` ask for."""
    return RequestedBackendRunner(SimulatedPairRunner(fleet, options.streams), options)
