"""What a sweep keeps in its store (gpudiag.store) as it runs: its options and planned hosts at the
start, each host as it finishes, the finished document at the end; and what it reads back from
it: the last screen stride, and the hosts' trends over the latest sweeps."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ..analysis import SweepReader
from ..analysis.thresholds import Thresholds
from ..errors import StoreError
from ..findings import FindingView, sort_by_cost
from ..schema.times import iso_time
from ..store.store import Store
from ..store.sweeptrends import sweep_trend_findings, sweep_trends
from ..store.trend import HostTrends
from .fanout import HostOutcome, SweepOptions, SweepResult
from .request import SweepRequest
from .runtime import Runtime


def stored_options(request: SweepRequest, sweep: SweepOptions, stride: int) -> dict[str, Any]:
    """The options the store keeps with the sweep: the request's, with the first pass's probes and
    fan-out (``sweep``) and the screen's ``stride`` as the run chose them."""
    probe = sweep.probe
    return {"probes": list(probe.names), "duration_s": probe.duration_s, "max_gpu_mem_mib": probe.max_gpu_mem_mib,
            "dtype": probe.dtype, "sequential": probe.sequential, "deadline_s": probe.deadline_s,
            "fanout": sweep.fanout,
            "simulate": request.reach.stand_in.source if request.reach.stand_in else None,
            "retest": request.judging.retest, "links": request.links.mode, "net_address": request.links.net_address,
            "net_backend": request.links.pair.backend,
            "net_duration_s": request.links.pair.duration_s, "net_line_rate_gbps": request.links.pair.line_rate_gbps,
            "screen_stride": stride, "launcher": request.reach.launcher, "pause": probe.pause,
            "suspects": request.focus.suspects if request.focus else None,
            "topology": list(request.links.topology) or None}


def recorder(store: Store | None, sweep_id: str, started_at: datetime, options: dict[str, Any],
             planned: Sequence[str]) -> Callable[[HostOutcome], None]:
    """What each host does as it finishes (in a worker thread, while others still probe): the
    analysis reads it, and the store records it (a StoreError is the sweep's warning). The store
    keeps the ``planned`` hosts from the start: a sweep killed on the way says how far it got."""
    reader = SweepReader()
    if store is not None:
        store.begin_sweep(sweep_id, iso_time(started_at), options, planned)

    def done(outcome: HostOutcome) -> None:
        records = outcome.records()  # unpacked once, for both
        if outcome.ok:
            outcome.reading = reader.read(records)
        if store is not None:
            store.record_host(sweep_id, outcome.unpacked(records.results))

    return done


def last_stride(store: Store | None) -> int | None:
    """The screen stride of the newest stored sweep that had one (None: no such sweep)."""
    if store is None:
        return None
    for sweep in store.list_sweeps(limit=20):
        stride = sweep["options"].get("screen_stride")
        if isinstance(stride, int) and stride > 0:
            return stride
    return None


def with_trends(store: Store | None, thresholds: Thresholds, result: SweepResult, runtime: Runtime,
                judged: Mapping[str, HostTrends] | None = None) -> SweepResult:
    """The sweep with its ``slow_degradation`` watches: each host it measured, over the store's
    latest sweeps (gpudiag.store.sweeptrends; ``judged``: those trends, judged already over the
    same stored figures); unchanged without a store or after an interrupt. A store that cannot be
    read for them is a warning: the sweep's own findings stand."""
    if store is None or result.interrupted:
        return result
    try:
        trends = judged if judged is not None else sweep_trends(store, result.sweep_id,
                                                                [h.host for h in result.hosts if h.ok], thresholds)
        watches = sweep_trend_findings(trends)
    except StoreError as error:
        warning = f"the stored sweeps could not be read for the hosts' trends ({error}): no slow degradation judged"
        runtime.gate.say(f"warning: {warning}")
        return dataclasses.replace(result, warnings=(*result.warnings, warning))
    if not watches:
        return result
    return dataclasses.replace(result, findings=tuple(sort_by_cost((*result.findings, *watches), FindingView)))


def finish(store: Store | None, result: SweepResult, runtime: Runtime) -> SweepResult:
    """Store the finished document (it carries the links, the findings and the impact). A store
    that fails now costs the store its copy, never the document: the failure is a warning."""
    if store is None:
        return result
    if result.interrupted:  # an interrupted sweep says so itself (gate)
        runtime.gate.say(f"writing the sweep to the store {store.path}")
    else:
        runtime.progress.phase(f"storing the sweep in {store.path}")
    try:
        # The hosts as they are (lazy mappings): the store adds only those it has not recorded yet.
        store.finish_sweep(result.sweep_id, result.summary())
    except StoreError as error:
        warning = f"the store could not keep this sweep ({error}); the sweep document and exclude list still hold it"
        runtime.gate.say(f"warning: {warning}")
        return dataclasses.replace(result, warnings=(*result.warnings, warning))
    return result
