"""Fleet comparison: from measurements to findings, with evidence, an action, and job impact.

1. Every ok result of a compared probe gets its baseline key (gpudiag.analysis.keys); keys never pool,
   and a host without facts has no keys (its results are ``unchecked``, never pooled).
2. Every key's references (gpudiag.analysis.reference): the fleet's healthy level when ``min_peers``
   distinct hosts have it, the stored baseline, and the SKU figure. A result is judged against
   each of them, so neither a regression the whole fleet shares nor a 2-node job escapes.
3. A suspect needs robust z <= ``robust_z`` AND a deficit >= ``deficit_warn`` against one
   reference. It is re-tested on its host in the first pass's mode; only a repeat is
   ``confirmed``, and only a confirmed ``deficit_fail`` is a ``fail``. A suspect whose re-test
   could not measure it stays, unconfirmed, with the reason. On a key too noisy for one run to
   show a ``deficit_fail`` deficit the screen is wider and the re-test takes several runs
   (gpudiag.analysis.noisy).
4. Suspects become findings by what else is known: NVML reasons seen in enough loaded samples
   make ``throttled`` (a software power cap: a warning unless it costs ``deficit_fail`` against
   the SKU), a narrow or slow-generation PCIe link ``degraded_pcie``, a link down
   ``nvlink_down`` (only a link the SKU wires, or most peers of an unknown model have up:
   gpudiag.analysis.nvlinks); a GPU slow with most of its NVLink partners is the culprit of its pairs, a
   pair slow while both GPUs are fine elsewhere a ``slow_link``; a starved host (its facts) or
   most GPUs of a host slow on one metric make one ``slow_node``; otherwise ``slow_gpu``.
   Telemetry rules add findings of their own (gpudiag.analysis.rules), and so do error counters far
   above their peers' (PCIe replays, NVLink CRC/replay/recovery errors: gpudiag.analysis.counters);
   NIC ports that are down, trained below their peers' rate or erroring far above them add
   ``nic_port`` (gpudiag.analysis.ports); the xid probe's pending NVML recovery actions and
   logged Xids add ``xid`` (gpudiag.analysis.xid);
   gaps add ``unchecked`` and ``missing_gpu`` (gpudiag.analysis.coverage); a metric slow on
   ``fleet_shift_share`` of the hosts adds one ``fleet_shift``.
5. Job impact: a synchronous job runs at the pace of its slowest GPU, measured against the same
   reference that judges it.

Pure functions of the measurements: the same input gives byte-identical findings. The parts:
``suspects`` (reading, references, suspects, re-test), ``reference`` (the three references),
``pairs`` (P2P attribution), ``speed`` (causes, nodes, telemetry rules), ``nvlinks`` (which links
are wired), ``counters`` (error counters against peers), ``coverage`` (what could not be checked),
``fleet`` (fleet-wide shifts, job impact).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..findings import Finding, FindingView, sort_by_cost, unchecked
from ..records import HostRecords, host_records
from . import coverage
from .clocks import typical_clock_costs
from .collector import collector_paused
from .counters import PriorCounts, counter_findings
from .fleet import Impact, fleet_shifts, job_impact
from .groups import group_shifts, judging_references, shift_findings
from .identity import HostGpus
from .measurements import by_key
from .nodes import no_figures
from .nvlinks import WiredLookup, with_wiring
from .ports import add_prior, port_findings
from .reference import reference_entries
from .sku import wired_nvlinks
from .speed import (
    Context,
    finding_order,
    hosts_by_metric,
    merge,
    rule_findings,
    speed_findings,
    starved_hosts,
    unkeyed,
    unmeasured_retest,
)
from .suspects import (
    BaselineLookup,
    HostReading,
    Measurement,
    SkuFigures,
    Suspect,
    SweepReader,
    confirm,
    find_suspects,
    floors_for,
    measurements,
    read_sweep,
    references,
)
from .thresholds import Thresholds
from .xid import xid_findings

__all__ = ["Analysis", "HostReading", "Impact", "Measurement", "PriorCounts", "Suspect", "SweepReader", "analyse",
           "confirm", "find_suspects", "finding_order", "measurements", "prior_counts", "references"]


@dataclass(frozen=True)
class Analysis:
    """Findings (most costly first), the suspects behind the speed findings, job impact, and how
    many results were compared with a reference and how many had none."""

    findings: tuple[Finding, ...]
    suspects: tuple[Suspect, ...]
    impact: Impact
    results_compared: int = 0
    results_not_compared: int = 0
    suspects_not_retested: int = 0
    # what each key was judged against (gpudiag.analysis.reference.reference_entries)
    references: tuple[dict[str, Any], ...] = ()

    def comparison_counts(self) -> dict[str, int]:
        counts = {"results_compared": self.results_compared, "results_not_compared": self.results_not_compared}
        if self.suspects_not_retested:
            counts["suspects_not_retested"] = self.suspects_not_retested
        return counts



def prior_counts(previous_hosts: Iterable[HostRecords | dict[str, Any]]) -> PriorCounts:
    """The error counters of the previous sweep's hosts (one host's records in memory at a
    time), for counters judged on their growth (gpudiag.analysis.counters)."""
    prior = PriorCounts()
    for host in previous_hosts:
        records = host_records(host)
        readings = read_sweep([records], True)
        prior.add(readings.telemetry)
        add_prior(prior, readings.ports)
        coverage.add_gpu_count(prior.gpu_counts, records)
    return prior


def _identified(suspect: Suspect, identities: Mapping[str, HostGpus]) -> Suspect:
    """``suspect`` with the GPU it was measured on, by NVML's index (gpudiag.analysis.identity)."""
    m = suspect.measurement
    gpus = identities.get(m.host)
    if gpus is None:
        return suspect
    return dataclasses.replace(suspect, identity=gpus.of(m.device, m.gpu_uuid))


@collector_paused
def analyse(hosts: Sequence[HostRecords | dict[str, Any]], thresholds: Thresholds, *,
            baseline: BaselineLookup | None = None, skus: SkuFigures = floors_for,
            retest_hosts: Sequence[HostRecords | dict[str, Any]] | None = None, retested: bool = False,
            extra: Sequence[Finding] = (), wired: WiredLookup = wired_nvlinks,
            previous_hosts: Sequence[HostRecords | dict[str, Any]] | PriorCounts | None = None,
            interrupted: bool = False) -> Analysis:
    """Findings, suspects and job impact of one sweep. ``hosts``: each host's typed records (a
    sweep's HostOutcomes; a host entry of a document read back as JSON is converted here, at that
    boundary: gpudiag.records.host_records). ``retest_hosts``: the re-test's hosts, every status
    (``retested`` with None: a re-test was wanted but none ran). ``extra``: findings made
    elsewhere (the link phase), ordered and excluded with the rest. ``wired``: how many NVLinks a
    GPU model wires (None: unknown, peers decide). ``previous_hosts``: the hosts of the previous
    sweep of these hosts (the store's), so that error counters are judged on their growth since
    then (gpudiag.analysis.counters), and a GPU gone since is missing (gpudiag.analysis.coverage);
    a PriorCounts may also hold the GPUs Slurm is configured to give each host.
    ``interrupted``: the sweep was cut short before its re-test could run, so a dip seen once is
    no finding (a sweep that finished would have dropped it unless it repeated); those suspects
    are only counted."""
    hosts = [host_records(host) for host in hosts]
    readings = read_sweep(hosts, True)
    found = readings.found
    telemetry = with_wiring(readings.telemetry, wired)
    previous = previous_hosts if isinstance(previous_hosts, PriorCounts) else prior_counts(previous_hosts or ())
    grouped = by_key(found)
    refs = references(grouped, thresholds, baseline, skus, readings.values)
    shifts = group_shifts(grouped, refs, thresholds, baseline)  # a group's level judges its parts
    judging = judging_references(refs, shifts, thresholds)
    by_host = readings.by_host
    suspects = [_identified(s, readings.identities) for s in find_suspects(found, judging, thresholds, by_host)]
    # Each node as one: its GPUs' median against the fleet's node medians (gpudiag.analysis.nodes).
    medians = [m for m, gpus in readings.medians if gpus >= thresholds.sibling_min_gpus]  # read host by host
    suspects += find_suspects(medians, references(by_key(medians), thresholds, None, no_figures), thresholds)
    if retest_hosts is not None or retested:
        suspects = confirm(suspects, None if retest_hosts is None else [host_records(h) for h in retest_hosts],
                           thresholds, judging, found)
        suspects = [_identified(s, readings.identities) if s.identity is None else s for s in suspects]
    not_retested = 0
    if interrupted:
        kept = [s for s in suspects if s.confirmed or s.retest_failed]
        suspects, not_retested = kept, len(suspects) - len(kept)
    # A noisy key's wide screen alone says nothing until the re-test confirms (gpudiag.analysis.noisy).
    judged = [s for s in suspects if s.confirmed or not s.screened]
    facts = {h.host: h.facts for h in hosts if h.status == "ok"}
    context = Context(thresholds, telemetry, facts, refs, found, by_host, readings.identities,
                      clock_costs=typical_clock_costs(grouped, readings.clock_costs))
    findings = (speed_findings(judged, context) + rule_findings(telemetry, thresholds, readings.quiet)
                + counter_findings(telemetry, thresholds, previous) + starved_hosts(judged, context))
    findings = merge(findings)
    findings += coverage.below_the_sku_alone(medians, refs, {host for shift in shifts.values()
                                                             for host in shift.group.by_host}, findings, thresholds)
    findings += shift_findings(shifts, grouped, telemetry, context.clock_costs, thresholds)
    findings += fleet_shifts(judged, grouped, thresholds) + port_findings(readings.ports, thresholds, previous)
    findings += xid_findings([h for h in hosts if h.host in readings.xid_hosts])  # read again: only these
    findings += readings.gaps + coverage.missing_gpus(hosts, readings.not_ok, previous.gpu_counts,
                                                      previous.slurm_gpus)
    findings += unkeyed(readings.unkeyed)
    findings += [unmeasured_retest(s) for s in suspects if s.retest_failed]
    not_compared = [m for key, same in grouped.items() if key not in refs for m in same]  # (order: any)
    findings += coverage.not_compared(hosts_by_metric(not_compared), thresholds)
    findings += [unchecked(h.host, h.status, h.error) for h in hosts if h.status != "ok"]
    findings += extra
    ordered = tuple(sort_by_cost(findings, FindingView))
    impact = job_impact(grouped, refs, ordered, hosts, readings.identities, judged)
    return Analysis(ordered, tuple(suspects), impact, len(found) - len(not_compared),
                    len(not_compared) + sum(readings.unkeyed.values()), not_retested, reference_entries(grouped, refs))
