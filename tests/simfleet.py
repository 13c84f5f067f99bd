"""Shared helpers of the simulated-fleet tests (tests/unit/test_sim_*.py): run a simulated node's
probe bundle, pick its records, and build a small fleet file."""

from __future__ import annotations

import statistics
from typing import Any

from gpudiag.hosts import HostSpec
from gpudiag.records import ProbeResult, parse_probe_output
from gpudiag.run.hostprobe import ProbeOptions
from gpudiag.sim import SimulatedConnector

GPUS = 8


def run_node(connector: SimulatedConnector, host: str, options: ProbeOptions | None = None) -> list[ProbeResult]:
    """The records ``host`` prints for the bundle's command line, parsed as the controller parses them."""
    result = connector.connect(HostSpec(host)).run((options or ProbeOptions()).bundle_argv(), 600.0)
    assert result.exit_status == 0 and not result.timed_out
    return parse_probe_output(result.stdout, host)


def one(results: list[ProbeResult], probe: str, metric: str, device: str, **params: Any) -> ProbeResult:
    """The one record of that probe, metric and device (and params)."""
    found = [r for r in results if (r.probe, r.metric, r.device) == (probe, metric, device)
             and all(r.params.get(key) == value for key, value in params.items())]
    assert len(found) == 1, (probe, metric, device, params)
    return found[0]


def ratio(results: list[ProbeResult], probe: str, device: str, **params: Any) -> float:
    """The device's value over the median of the node's other devices for the same measurement."""
    same = [r for r in results if r.probe == probe and all(r.params.get(k) == v for k, v in params.items())]
    target = next(r.value for r in same if r.device == device)
    return target / statistics.median(r.value for r in same if r.device != device)


def small_fleet(*faults: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A four-node fleet file with ``faults`` and any other top-level ``fields``."""
    return {"nodes": 4, "faults": list(faults), **fields}
