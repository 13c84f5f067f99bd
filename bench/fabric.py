"""Fabric benchmark: how often the link phase with a topology names a slow switch link or switch
exactly, what else it blames, and the rounds and time it takes (issue 28).

Each trial builds a simulated fleet with a ``fabric`` section (gpudiag/sim/fabric.py: leaves,
spines, cores, rails, ECMP, traced streams), plants its faults at random, and runs the link phase
a sweep runs with ``--topology`` (gpudiag.links.rounds.run_links with gpudiag.fabric.plan.FabricPlan)
and the findings it makes (gpudiag.fabric.findings, gpudiag.links.linkfindings). Scenarios:

- ``uplink``: one leaf–spine (or spine–core) link slow; ``two``: two such links at once;
  ``spine``: one spine slow as a whole; ``nic``: one slow uplink and one slow NIC elsewhere;
  ``healthy``: no fault. Slow by ``--slowdowns`` percent, at ``--cvs`` link noise (each stream
  draws a further half of it).

Per row: ``exact`` (the planted part named by one confirmed ``fail`` finding of its own kind —
``slow_fabric_link`` naming the link, ``slow_switch`` naming the spine — and, for ``two``, both),
``fabric false`` (fabric findings that name an unplanted part, or a set), ``node false`` (node
findings on healthy nodes: a slow_nic, slow_link, drain or exclusion), ``nic`` (the planted NIC
named as its host's slow_nic), the screen rounds, the confirm rounds that re-tested a fabric
suspect (``fab``) and all confirm rounds (``cnf``: NIC suspects' too), most in a trial, and the seconds
a trial takes (the simulated pair tests and the analysis; no real transfer). The healthy rows
count fabric ``fail`` and ``warn`` findings over their trials. Printed, not asserted. Targets: one
slow uplink at ≥ 20 % exact in ≥ 95 % of trials at 256–4,096 nodes, ≤ 3 screen and ≤ 2 confirm
rounds, at 10 % in ≥ 80 %; two uplinks ≥ 90 %; a slow spine named as the switch; healthy fabrics
at CV ≤ 4 %: no fabric fail in 200 sweeps; NIC faults named as NICs, no node drained for a fabric
fault.

A last table runs jobs of 2 to 64 nodes whose network runs at 58 % of the line rate through the
command line (``gpudiag sweep --simulate``): its exit code, whether the network's ``fail`` was
found, what was drained and excluded; and the pre-flight planner's figure for 1,024 nodes with a
topology within its 90 s budget.

Usage: python bench/fabric.py [--nodes 256 1024 4096] [--rails 1 8] [--spines 4 16] [--tiers 2 3]
                              [--cvs 0.01 0.04] [--slowdowns 10 20 40 60] [--trials 20] [--healthy 200]
       python bench/fabric.py --smoke      (seconds: small fabrics, few trials)
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from click.testing import CliRunner  # noqa: E402

from gpudiag.analysis.thresholds import load_thresholds  # noqa: E402
from gpudiag.cli.main import main  # noqa: E402
from gpudiag.fabric.findings import fabric_findings  # noqa: E402
from gpudiag.fabric.plan import FabricPlan  # noqa: E402
from gpudiag.fabric.schedule import fabric_screen_rounds, stream_count  # noqa: E402
from gpudiag.findings import Finding, Kind, Severity  # noqa: E402
from gpudiag.links.attribution import link_thresholds  # noqa: E402
from gpudiag.links.linkfindings import link_findings  # noqa: E402
from gpudiag.links.remote import PairTestOptions  # noqa: E402
from gpudiag.links.rounds import run_links  # noqa: E402
from gpudiag.links.schedule import SCREEN  # noqa: E402
from gpudiag.preflight.planner import plan_preflight  # noqa: E402
from gpudiag.sim.fleet import SimulatedFleet  # noqa: E402
from gpudiag.sim.fleetfile import parse_fleet  # noqa: E402
from gpudiag.sim.pairoptions import simulated_pair_runner  # noqa: E402

SCENARIOS = ("uplink", "two", "spine", "nic", "healthy")
FABRIC_KINDS = (Kind.SLOW_FABRIC_LINK, Kind.SLOW_SWITCH)
NODE_KINDS = (Kind.SLOW_NIC, Kind.SLOW_LINK)
NODES_PER_LEAF = 32


@dataclass(frozen=True)
class Shape:
    """A fabric: ``tiers`` (2: leaves and spines; 3: pods of them joined by cores), ``nodes``,
    ``rails`` (planes: one per rail), ``spines`` per pod."""

    tiers: int
    nodes: int
    rails: int
    spines: int

    def fabric(self) -> dict:
        leaves = max(4, math.ceil(self.nodes / NODES_PER_LEAF))
        section = {"leaves": leaves, "spines": self.spines, "planes": "per_rail", "rails": self.rails}
        if self.tiers == 3:
            pods = 4 if leaves % 4 == 0 and leaves >= 8 else 2
            leaves += (-leaves) % pods
            section.update(leaves=leaves, pods=pods, cores=self.spines)
        return section

    def describe(self) -> str:
        return f"{self.tiers}t {self.nodes}n {self.rails}r {self.spines}s"


@dataclass(frozen=True)
class Planted:
    """What a trial planted: links (canonical switch pairs), a spine, a NIC host."""

    links: tuple[tuple[str, str], ...] = ()
    spine: str | None = None
    nic: str | None = None


@dataclass(frozen=True)
class Trial:
    exact: bool
    fabric_false: int
    node_false: int
    nic_found: bool | None
    fabric_fails: int
    fabric_warns: int
    screen_rounds: int
    confirm_rounds: int
    fabric_rounds: int
    seconds: float


def plant(scenario: str, shape: Shape, fleet: dict, rng: random.Random, factor: float) -> tuple[list[dict], Planted]:
    """The faults of ``scenario`` at random places of the fleet's fabric."""
    topology = parse_fleet(fleet, "bench").topology
    assert topology is not None
    plane = topology.planes[rng.randrange(len(topology.planes))]
    links = sorted(plane.link_by_key)
    if shape.tiers == 3 and rng.random() < 0.5:  # a spine–core link half the time
        chosen = [key for key in links if plane.switch_by_name[key[0]].tier == 2]
    else:
        chosen = [key for key in links if plane.switch_by_name[key[0]].tier == 1]
    faults: list[dict] = []
    if scenario in ("uplink", "nic"):
        key = rng.choice(chosen)
        faults.append({"kind": "slow_uplink", "a": key[0], "b": key[1], "factor": factor})
        planted = Planted(links=(key,))
    elif scenario == "two":
        first, second = rng.sample(chosen, 2)
        faults += [{"kind": "slow_uplink", "a": k[0], "b": k[1], "factor": factor} for k in (first, second)]
        planted = Planted(links=tuple(sorted((first, second))))
    elif scenario == "spine":
        spine = rng.choice([s.name for s in plane.switches if s.tier == 2])
        faults.append({"kind": "slow_switch", "switch": spine, "factor": factor})
        planted = Planted(spine=spine)
    else:
        planted = Planted()
    if scenario == "nic":
        host = rng.choice(list(topology.hosts))
        faults.append({"kind": "slow_nic", "host": host, "factor": 0.7})
        planted = Planted(links=planted.links, nic=host)
    return faults, planted


def run_trial(shape: Shape, scenario: str, cv: float, slowdown_pct: float, seed: int) -> Trial:
    rng = random.Random(f"fabric:{shape}:{scenario}:{cv}:{slowdown_pct}:{seed}")
    fleet = {"nodes": shape.nodes, "name_format": "node{:04d}", "seed": seed, "gpus_per_node": 8,
             "noise": {"gemm_cv": 0.01, "membw_cv": 0.01, "link_cv": cv},
             "fabric": {**shape.fabric(), "stream_cv": cv / 2}}
    faults, planted = plant(scenario, shape, fleet, rng, 1 - slowdown_pct / 100)
    fleet["faults"] = faults
    started = time.perf_counter()
    parsed = parse_fleet(fleet, "bench")
    simulated = SimulatedFleet(parsed)
    topology = parsed.topology
    assert topology is not None
    thresholds = load_thresholds(None)
    links = link_thresholds(thresholds)
    streams = stream_count(topology, 4)
    runner = simulated_pair_runner(simulated, PairTestOptions(streams=streams))
    plan = FabricPlan(topology, SCREEN, links, streams=streams)
    run = run_links(list(parsed.hosts), SCREEN, runner, links, parallel=4, plan=plan)
    assert plan.latest is not None
    findings = [*link_findings(run.attribution, thresholds.deficit_fail_pct),
                *fabric_findings(plan.latest, topology, thresholds.deficit_fail_pct, parsed.hosts)]
    seconds = time.perf_counter() - started
    screen = len(fabric_screen_rounds(list(parsed.hosts), topology))
    return _score(findings, planted, screen, run.rounds - screen, plan.fabric_rounds, seconds)


def _score(findings: Sequence[Finding], planted: Planted, screen: int, confirm: int, fabric_rounds: int,
           seconds: float) -> Trial:
    fabric = [f for f in findings if f.kind in FABRIC_KINDS]
    named = []
    for finding in fabric:
        if len(finding.fabric) != 1:
            named.append(None)  # a set: not located
        elif finding.fabric[0].switch is not None:
            named.append(("switch", finding.fabric[0].switch))
        else:
            named.append(("link", tuple(finding.fabric[0].switches)))
    wanted = {("link", key) for key in planted.links} | ({("switch", planted.spine)} if planted.spine else set())
    located = {n for n, f in zip(named, fabric, strict=True)
               if f.confirmed and f.severity == Severity.FAIL and n is not None}
    exact = bool(wanted) and wanted <= located
    fabric_false = sum(1 for n in named if n is None or n not in wanted)
    blamed = {f.host for f in findings if f.kind in NODE_KINDS or f.action == "drain"}
    blamed |= {f.peer for f in findings if f.kind == Kind.SLOW_LINK and f.peer}
    node_false = len({h for h in blamed if h and h != planted.nic})
    nic_found = None if planted.nic is None else any(
        f.kind == Kind.SLOW_NIC and f.host == planted.nic for f in findings)
    return Trial(exact, fabric_false, node_false, nic_found,
                 sum(1 for f in fabric if f.severity == Severity.FAIL),
                 sum(1 for f in fabric if f.severity == Severity.WARN), screen, confirm, fabric_rounds, seconds)


def _row(shape: Shape, scenario: str, cv: float, slowdown: float, trials: Sequence[Trial]) -> str:
    count = len(trials)
    if scenario == "healthy":
        found = (f"fail {sum(t.fabric_fails for t in trials)}/{count}  warn {sum(t.fabric_warns for t in trials)}"
                 f"/{count}")
    else:
        found = f"exact {sum(t.exact for t in trials)}/{count} ({100 * sum(t.exact for t in trials) / count:.0f} %)"
    nics = [t.nic_found for t in trials if t.nic_found is not None]
    nic = f"{sum(nics)}/{len(nics)}" if nics else "-"
    return (f"{shape.describe():<18} {scenario:<8} {100 * cv:>4.1f} {slowdown:>5.0f}  {found:<22} "
            f"{sum(t.fabric_false for t in trials):>5} {sum(t.node_false for t in trials):>5} {nic:>6} "
            f"{max(t.screen_rounds for t in trials):>3} {max(t.fabric_rounds for t in trials):>3} "
            f"{max(t.confirm_rounds for t in trials):>3} "
            f"{statistics.mean(t.seconds for t in trials):>7.2f}")


def job_network_rows(sizes: Sequence[int]) -> list[str]:
    """Jobs whose every NIC runs at 58 % of the line rate, through the command line."""
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for nodes in sizes:
            path = Path(folder) / f"job{nodes}.json"
            faults = [{"kind": "slow_nic", "host": f"n{i:02d}", "factor": 0.58} for i in range(1, nodes + 1)]
            path.write_text(json.dumps({"nodes": nodes, "name_format": "n{:02d}", "seed": nodes, "faults": faults}))
            out = Path(folder) / f"job{nodes}.out.json"
            result = CliRunner().invoke(main, ["sweep", "--simulate", str(path), "--no-store", "-q", "--probes",
                                               "facts", "--json", str(out)])
            document = json.loads(out.read_text())
            network = [f for f in document["findings"] if f["kind"] == Kind.SLOW_NETWORK and f["severity"] == "fail"]
            drains = [f for f in document["findings"] if f["action"] == "drain"]
            rows.append(f"  {nodes:>3} nodes: exit {result.exit_code}, network fail {len(network)}, drained "
                        f"{len(drains)}, excluded {len(document['impact']['exclude'])}, network slowdown "
                        f"{document['impact'].get('network_slowdown_pct')} %")
    return rows


def preflight_row() -> str:
    fleet = parse_fleet({"nodes": 1024, "name_format": "n{:04d}", "fabric": {"leaves": 32, "spines": 8}}, "plan")
    assert fleet.topology is not None
    screen = len(fabric_screen_rounds(list(fleet.hosts), fleet.topology))
    plan = plan_preflight(90, 1024, link_screen_rounds=screen)
    return (f"  1024 nodes with a topology ({screen} screen rounds): {plan.planned_s:.0f} s planned of 90 s; "
            f"link rounds {plan.link_rounds}, re-test {'kept' if plan.retest else 'dropped'}, dropped "
            f"{list(plan.dropped) or 'nothing'}")


def main_bench(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--rails", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--spines", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--tiers", type=int, nargs="+", default=[2, 3], choices=[2, 3])
    parser.add_argument("--cvs", type=float, nargs="+", default=[0.01, 0.04])
    parser.add_argument("--slowdowns", type=float, nargs="+", default=[10, 20, 40, 60])
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--healthy", type=int, default=200, help="trials of each healthy row")
    parser.add_argument("--jobs", type=int, nargs="*", default=[2, 3, 4, 8, 16, 64])
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.nodes, args.rails, args.spines, args.tiers = [64], [1], [4], [2, 3]
        args.cvs, args.slowdowns, args.trials, args.healthy, args.jobs = [0.02], [40], 2, 2, [2, 4]
    if min(args.trials, args.healthy) < 1:
        parser.error("--trials and --healthy must be at least 1")
    print(f"{'fabric':<18} {'scenario':<8} {'cv%':>4} {'slow%':>5}  {'found':<22} {'fabF':>5} {'nodeF':>5} "
          f"{'nic':>6} {'scr':>3} {'fab':>3} {'cnf':>3} {'s/trial':>7}")
    for tiers in args.tiers:
        for nodes in args.nodes:
            for rails in args.rails:
                for spines in args.spines:
                    shape = Shape(tiers, nodes, rails, spines)
                    for cv in args.cvs:
                        for scenario in args.scenarios:
                            slowdowns = [0.0] if scenario == "healthy" else args.slowdowns
                            count = args.healthy if scenario == "healthy" else args.trials
                            for slowdown in slowdowns:
                                trials = [run_trial(shape, scenario, cv, slowdown, seed) for seed in range(count)]
                                print(_row(shape, scenario, cv, slowdown, trials), flush=True)
    print("jobs whose network runs at 58 % of the line rate (gpudiag sweep --simulate, links only):")
    for row in job_network_rows(args.jobs):
        print(row)
    print("pre-flight plan:")
    print(preflight_row())
    return 0


if __name__ == "__main__":
    sys.exit(main_bench())
