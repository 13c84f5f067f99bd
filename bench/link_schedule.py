"""Link schedule benchmark: how many rounds and pair tests the screen needs, and how often it
names exactly the planted faults, against the full round-robin.

Every trial plants 1–3 slow NICs (every pair with that node runs at its factor) and 0–2 slow
links (one pair, between nodes whose NICs are healthy) at random, with factors drawn from
``--factors`` (e.g. 0.5–0.85 of the healthy figure). A healthy pair measures
``--efficiency`` × the line rate with Gaussian noise of ``--cv``; every run of a pair draws its
own noise. Pipelines:

- screen: ``screen_rounds`` → ``attribute_links`` → while suspects remain (at most
  ``--confirm-phases`` times): ``confirm_rounds`` → ``attribute_links``;
- full: ``full_rounds`` → ``attribute_links`` → the same confirm phases, on ``--full-trials``
  trials, fewer where they would measure more than ``--full-pair-budget`` pairs in all (a
  1,024-host full schedule is half a million pairs; 4,096 hosts, 8.4 million, are not simulated
  by default: only their rounds and pair tests are printed).

A third table follows a fleet over successive sweeps whose screens move their stride (1, 2,
3, …: ``next_stride``), the faults staying where they are and slow links on any pair: the share
of trials in which every planted fault has been named after 1, 2, 4, … sweeps, and in which
some sweep named something not planted. A slow link ``d`` places apart in the host list is
screened by the sweep of stride ``d`` only, so a fleet of N hosts needs up to N/2 sweeps (or
``--links full``) to reach every pair.

A trial is *exact* when the slow_nic hosts are exactly the planted NICs, the slow_link pairs
exactly the planted links, and nothing else is named (no undecided pair, no error, no shift);
*confirmed* when, besides, every verdict is confirmed. Printed, not asserted. Target: exact in
≥ 99 % of trials with ≤ 3 rounds plus confirm rounds.

Usage: python bench/link_schedule.py [--sizes 8 64 1024 4096] [--trials 200] [--seed 1]
       python bench/link_schedule.py --smoke      (seconds: small fleets, few trials)
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpudiag.links import (  # noqa: E402
    LinkAttribution,
    LinkResult,
    Pair,
    Round,
    attribute_links,
    confirm_rounds,
    full_rounds,
    pair_key,
    screen_rounds,
)
from gpudiag.links.schedule import next_stride  # noqa: E402

LINE_RATE_GBPS = 400.0
BACKEND = "perftest"
RAIL = 0


@dataclass(frozen=True)
class Fleet:
    """Planted faults: slow NICs (host → factor) and slow links (pair → factor)."""

    hosts: tuple[str, ...]
    nics: dict[str, float]
    links: dict[Pair, float]


@dataclass(frozen=True)
class Settings:
    cv: float
    efficiency: float
    factors: tuple[float, float]
    confirm_phases: int
    links_on: str = "any"


@dataclass(frozen=True)
class Outcome:
    """One pipeline run on one fleet: rounds and pair tests by phase, and how it scored."""

    screen_rounds: int
    confirm_rounds: int
    confirm_phases: int
    pair_tests: int
    exact: bool
    confirmed: bool
    exact_tested: bool


def plant(size: int, rng: random.Random, settings: Settings) -> Fleet:
    """1–3 slow NICs; 0–2 slow links between healthy NICs, on any pair or (``links_on``
    ``screen``) on a pair the screen tests."""
    hosts = tuple(f"node{i:04d}" for i in range(1, size + 1))
    low, high = settings.factors
    nics = {host: rng.uniform(low, high) for host in rng.sample(hosts, min(size, rng.randint(1, 3)))}
    healthy = [host for host in hosts if host not in nics]
    screened = sorted(pair for round_ in screen_rounds(hosts) for pair in round_.pairs
                      if not set(pair) & set(nics))
    links: dict[Pair, float] = {}
    wanted = rng.randint(0, 2)
    if settings.links_on == "screen":
        for pair in rng.sample(screened, min(wanted, len(screened))):
            links[pair] = rng.uniform(low, high)
    elif len(healthy) >= 2:
        while len(links) < wanted:
            links.setdefault(pair_key(*rng.sample(healthy, 2)), rng.uniform(low, high))
    return Fleet(hosts, nics, links)


def measure(fleet: Fleet, rounds: Sequence[Round], rng: random.Random, settings: Settings) -> list[LinkResult]:
    healthy = LINE_RATE_GBPS * settings.efficiency
    results = []
    for round_ in rounds:
        for a, b in round_.pairs:
            factor = min(fleet.nics.get(a, 1.0), fleet.nics.get(b, 1.0), fleet.links.get((a, b), 1.0))
            gbps = max(0.0, healthy * factor * (1 + rng.gauss(0.0, settings.cv)))
            results.append(LinkResult(a, b, BACKEND, RAIL, gbps, LINE_RATE_GBPS))
    return results


def score(fleet: Fleet, attribution: LinkAttribution, tested: set[Pair]) -> tuple[bool, bool, bool]:
    """(exact, exact and every verdict confirmed, exact on the planted links it tested)."""
    named_nics = {v.host for v in attribution.nics}
    named_links = {(v.a, v.b) for v in attribution.links}
    clean = (named_nics == set(fleet.nics) and all(not v.undecided for v in attribution.links)
             and not attribution.errors and not attribution.shifts)
    exact = clean and named_links == set(fleet.links)
    confirmed = exact and all(v.confirmed for v in (*attribution.nics, *attribution.links))
    return exact, confirmed, clean and named_links == set(fleet.links) & tested


def run_schedule(fleet: Fleet, first: Sequence[Round], rng: random.Random, settings: Settings) -> Outcome:
    """``first`` (the screen or full rounds), then confirm phases while suspects remain."""
    results = measure(fleet, first, rng, settings)
    attribution = attribute_links(results)
    confirm_total = phases = 0
    while attribution.suspects and phases < settings.confirm_phases:
        rounds = confirm_rounds(attribution.suspects, attribution.passed, [r.pair for r in results])
        if not rounds:
            break
        results += measure(fleet, rounds, rng, settings)
        attribution = attribute_links(results)
        confirm_total += len(rounds)
        phases += 1
    exact, confirmed, exact_tested = score(fleet, attribution, {r.pair for r in results})
    return Outcome(len(first), confirm_total, phases, len(results), exact, confirmed, exact_tested)


def bench_size(size: int, trials: int, full_trials: int, seed: int, settings: Settings) -> dict[str, str]:
    started = time.perf_counter()
    screens = []
    for trial in range(trials):
        rng = random.Random(f"{seed}:{size}:{trial}")
        fleet = plant(size, rng, settings)
        screens.append(run_schedule(fleet, screen_rounds(fleet.hosts), rng, settings))
    screen_s = (time.perf_counter() - started) / max(1, trials)
    fulls = []
    for trial in range(full_trials):
        rng = random.Random(f"{seed}:{size}:{trial}:full")
        fleet = plant(size, rng, settings)
        fulls.append(run_schedule(fleet, full_rounds(fleet.hosts), rng, settings))
    confirm = [o.confirm_rounds for o in screens]
    total = [o.screen_rounds + o.confirm_rounds for o in screens]
    return {
        "hosts": str(size), "trials": str(trials),
        "screen rnd": str(screens[0].screen_rounds),
        "confirm rnd mean/max": f"{statistics.fmean(confirm):.2f}/{max(confirm)}",
        "phases max": str(max(o.confirm_phases for o in screens)),
        "total rnd max": str(max(total)),
        "pair tests mean": f"{statistics.fmean(o.pair_tests for o in screens):.1f}",
        "exact %": _share(o.exact for o in screens),
        "exact tested %": _share(o.exact_tested for o in screens),
        "confirmed %": _share(o.confirmed for o in screens),
        "full rnd": str(max(0, size - 1 + size % 2)),
        "full tests": str(size * (size - 1) // 2),
        "full+confirm rnd max": str(max(o.screen_rounds + o.confirm_rounds for o in fulls)) if fulls else "-",
        "full exact %": f"{_share(o.exact for o in fulls)} ({full_trials})" if fulls else "- (0)",
        "ms/trial": f"{1000 * screen_s:.0f}",
    }


def bench_rotation(size: int, trials: int, sweeps: int, seed: int, settings: Settings) -> dict[str, str]:
    """Successive screens of one fleet, stride 1, 2, …: when is every planted fault named?"""
    checkpoints = [k for k in (1, 2, 4, 8, 16, 32) if k <= sweeps]
    found_by: dict[int, int] = dict.fromkeys(checkpoints, 0)
    false_alarms = 0
    for trial in range(trials):
        rng = random.Random(f"{seed}:{size}:{trial}:rotate")
        fleet = plant(size, rng, settings)
        named: set[object] = set()
        stride = None
        false_alarm = False
        for sweep in range(1, sweeps + 1):
            stride = next_stride(stride, size)
            attribution = run_attribution(fleet, screen_rounds(fleet.hosts, stride), rng, settings)
            nics = {v.host for v in attribution.nics}
            links = {(v.a, v.b) for v in attribution.links}
            false_alarm |= bool(nics - set(fleet.nics) or links - set(fleet.links) or attribution.shifts)
            named |= nics | links
            if sweep in found_by and named >= set(fleet.nics) | set(fleet.links):
                found_by[sweep] += 1
        false_alarms += false_alarm
    row = {"hosts": str(size), "trials": str(trials)}
    row.update({f"all named by sweep {k} %": f"{100 * found_by[k] / trials:.1f}" for k in checkpoints})
    row["any false name %"] = f"{100 * false_alarms / trials:.1f}"
    row["sweeps to reach every pair"] = str(max(1, size // 2))
    return row


def run_attribution(fleet: Fleet, first: Sequence[Round], rng: random.Random, settings: Settings) -> LinkAttribution:
    results = measure(fleet, first, rng, settings)
    attribution = attribute_links(results)
    for _ in range(settings.confirm_phases):
        rounds = confirm_rounds(attribution.suspects, attribution.passed, [r.pair for r in results])
        if not attribution.suspects or not rounds:
            break
        results += measure(fleet, rounds, rng, settings)
        attribution = attribute_links(results)
    return attribution


def _share(flags: object) -> str:
    values = list(flags)  # type: ignore[call-overload]
    return f"{100 * sum(values) / len(values):.1f}" if values else "-"


def print_table(rows: Sequence[dict[str, str]]) -> None:
    columns = list(rows[0])
    widths = {c: max(len(c), *(len(row[c]) for row in rows)) for c in columns}
    print("  ".join(c.rjust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(row[c].rjust(widths[c]) for c in columns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 64, 1024, 4096])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--full-trials", type=int, default=200, help="trials of the full schedule per size")
    parser.add_argument("--full-pair-budget", type=int, default=3_000_000,
                        help="simulate the full schedule on at most this many pairs per size (fewer trials)")
    parser.add_argument("--cv", type=float, default=0.02, help="noise of a healthy pair (coefficient of variation)")
    parser.add_argument("--efficiency", type=float, default=0.97, help="healthy figure as a share of line rate")
    parser.add_argument("--factors", type=float, nargs=2, default=[0.5, 0.85], metavar=("LOW", "HIGH"),
                        help="a slow NIC or link runs at this share of the healthy figure")
    parser.add_argument("--confirm-phases", type=int, default=3, help="confirm phases at most while suspects remain")
    parser.add_argument("--links-on", choices=("screen", "any", "both"), default="both",
                        help="plant slow links on pairs the screen tests, on any pair, or run both")
    parser.add_argument("--rotation-sweeps", type=int, default=8, help="successive sweeps in the rotating-screen table")
    parser.add_argument("--rotation-trials", type=int, default=50, help="trials of the rotating-screen table per size")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="small fleets, few trials: seconds")
    arguments = parser.parse_args()
    least = {"trials": 1, "full_trials": 0, "rotation_trials": 1, "rotation_sweeps": 1, "confirm_phases": 0}
    for name, smallest in least.items():  # a share of no trials is no figure
        if getattr(arguments, name) < smallest:
            parser.error(f"--{name.replace('_', '-')} must be at least {smallest}")
    if arguments.smoke:
        arguments.sizes, arguments.trials, arguments.full_trials = [8, 64, 256], 20, 5
        arguments.rotation_trials, arguments.rotation_sweeps = 10, 4
        arguments.full_pair_budget = 50_000
    print(f"line rate {LINE_RATE_GBPS:g} Gb/s, healthy {arguments.efficiency:g} of it, noise CV {arguments.cv:g}, "
          f"slow factors {arguments.factors[0]:g}–{arguments.factors[1]:g}, 1–3 slow NICs, 0–2 slow links, "
          f"at most {arguments.confirm_phases} confirm phases")
    placements = ("screen", "any") if arguments.links_on == "both" else (arguments.links_on,)
    for placement in placements:
        settings = Settings(arguments.cv, arguments.efficiency, tuple(arguments.factors), arguments.confirm_phases,
                            placement)
        print(f"\nslow links on {'pairs the screen tests' if placement == 'screen' else 'any pair'}:")
        rows = []
        for size in arguments.sizes:
            full_trials = min(arguments.full_trials, arguments.full_pair_budget // max(1, size * (size - 1) // 2))
            rows.append(bench_size(size, arguments.trials, full_trials, arguments.seed, settings))
        print_table(rows)
    settings = Settings(arguments.cv, arguments.efficiency, tuple(arguments.factors), arguments.confirm_phases, "any")
    print("\nrotating screen (stride 1, 2, ... one per sweep), faults kept, slow links on any pair:")
    print_table([bench_rotation(size, arguments.rotation_trials, arguments.rotation_sweeps, arguments.seed, settings)
                 for size in arguments.sizes])
    print("\ntarget: exact in >= 99 % of trials with <= 3 rounds plus confirm rounds")


if __name__ == "__main__":
    main()
