"""Fabrics built for the fabric tests: planes as a topology file would give them, and simulated
fleets with a fabric section (gpudiag/sim/fabric.py) run through the link phase a sweep runs with
``--topology`` (run_links with FabricPlan), its findings made as the sweep makes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpudiag.analysis.thresholds import load_thresholds
from gpudiag.fabric.attribution import FabricAttribution
from gpudiag.fabric.findings import fabric_findings
from gpudiag.fabric.model import Attachment, Cable, FabricLink, Plane, Switch, Topology
from gpudiag.fabric.plan import FabricPlan
from gpudiag.fabric.schedule import stream_count
from gpudiag.findings import Finding
from gpudiag.links.attribution import link_thresholds
from gpudiag.links.linkfindings import link_findings
from gpudiag.links.remote import PairTestOptions
from gpudiag.links.rounds import LinkRun, run_links
from gpudiag.sim.fleet import SimulatedFleet
from gpudiag.sim.fleetfile import parse_fleet
from gpudiag.sim.pairoptions import simulated_pair_runner


def clos_plane(leaves: int = 4, spines: int = 2, hosts_per_leaf: int = 2, *, pods: int = 1, cores: int = 0,
               rail: int | None = None, rate_gbps: float = 400.0, uplink_gbps: float | None = None) -> Plane:
    """A Clos plane: ``leaves`` leaves (``leaf1``..) with ``hosts_per_leaf`` nodes each (``n1``..),
    each leaf cabled once to each of its pod's ``spines`` (``spine1``.. numbered across pods), and
    with ``pods`` > 1 every spine to each of the ``cores``."""
    per_pod = leaves // pods
    up = uplink_gbps if uplink_gbps is not None else rate_gbps * hosts_per_leaf / spines
    switches = [Switch(f"leaf{i}", 1, lid=i) for i in range(1, leaves + 1)]
    switches += [Switch(f"spine{j}", 2, lid=100 + j) for j in range(1, spines * pods + 1)]
    switches += [Switch(f"core{c}", 3, lid=200 + c) for c in range(1, cores + 1)]
    links = []
    for i in range(1, leaves + 1):
        pod = (i - 1) // per_pod
        for s in range(1, spines + 1):
            spine = pod * spines + s
            links.append(FabricLink(f"leaf{i}", f"spine{spine}", (Cable(str(40 + s), str(i), up),)))
    for j in range(1, spines * pods + 1):
        for c in range(1, cores + 1):
            links.append(FabricLink(f"spine{j}", f"core{c}", (Cable(str(80 + c), str(j), up),)))
    attachments = [Attachment(f"n{(i - 1) * hosts_per_leaf + k}", f"leaf{i}", str(k), rate_gbps)
                   for i in range(1, leaves + 1) for k in range(1, hosts_per_leaf + 1)]
    return Plane(rail, tuple(switches), tuple(links), tuple(attachments))


def topology_of(*planes: Plane) -> Topology:
    return Topology("test", tuple(planes))


@dataclass(frozen=True)
class Swept:
    """A simulated fleet's link phase with a topology: the run, its fabric attribution, the
    findings a sweep makes of them, and the rounds of the plan that re-tested fabric suspects."""

    run: LinkRun
    fabric: FabricAttribution
    findings: list[Finding]
    fabric_rounds: int

    def kinds(self, *kinds: str) -> list[Finding]:
        return [f for f in self.findings if f.kind in kinds]


def fabric_fleet(nodes: int, fabric: dict[str, Any], faults: Sequence[dict[str, Any]] = (), *, seed: int = 1,
                 link_cv: float = 0.02) -> dict[str, Any]:
    return {"nodes": nodes, "name_format": "node{:03d}", "seed": seed,
            "noise": {"gemm_cv": 0.01, "membw_cv": 0.01, "link_cv": link_cv}, "fabric": fabric,
            "faults": list(faults)}


def sweep_links(fleet: dict[str, Any]) -> Swept:
    """The fleet's link phase as ``gpudiag sweep --topology`` runs it (the fleet's own fabric as
    the topology)."""
    parsed = parse_fleet(fleet, "fleet.json")
    topology = parsed.topology
    assert topology is not None
    thresholds = load_thresholds(None)
    links = link_thresholds(thresholds)
    streams = stream_count(topology, 4)
    plan = FabricPlan(topology, "screen", links, streams=streams)
    runner = simulated_pair_runner(SimulatedFleet(parsed), PairTestOptions(streams=streams))
    run = run_links(list(parsed.hosts), "screen", runner, links, parallel=4, plan=plan)
    assert plan.latest is not None
    findings = [*link_findings(run.attribution, thresholds.deficit_fail_pct),
                *fabric_findings(plan.latest, topology, thresholds.deficit_fail_pct, parsed.hosts)]
    return Swept(run, plan.latest, findings, plan.fabric_rounds)
