"""The pre-flight budget planner: from ``--budget S``, the number of nodes and the probes asked
for (``--probes``; facts, telemetry, gemm and membw by default), which probes run, for how long,
and whether the link screen and the re-test fit.

The plan is a time table of windows that add up to no more than the budget:

    controller (set-up, analysis, store, outputs)  CONTROLLER_S
    node probes: facts, telemetry, gemm, membw     SAFETY x (start-up + telemetry + 2 x (overhead + duration))
    re-test of suspects                            SAFETY x (start-up + overhead + duration), where it fits
    link screen (>= 2 nodes)                       SAFETY x rounds x (pair overhead + 2 x net duration)

What must fit comes first: the node probes at their shortest load, then the link screen (a job of
two or more nodes), then the re-test; the time left lengthens the loads up to their targets. A
budget too short for even the telemetry is an input error. The figures are estimates; the budget
itself is enforced while the run goes (gpudiag.run.budget), so an estimate that was short costs
coverage (``unchecked``), never the deadline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..errors import InputError
from ..links.schedule import full_rounds, screen_rounds

# Seconds of the controller's own work: set-up (host resolution, store), analysis, outputs.
CONTROLLER_S = 5.0
# Seconds a node needs to start Python, import torch and make a CUDA context on every GPU.
NODE_STARTUP_S = 15.0
# Seconds of the facts and telemetry probes (NVML readings, no load).
TELEMETRY_S = 3.0
# The load probes of a pre-flight, each loading every GPU at once for ``duration_s``.
LOAD_PROBES = ("gemm", "membw")
# Seconds a load probe spends besides its timed load: sizing, warm-up, copying results.
LOAD_OVERHEAD_S = 2.0
# Seconds of timed load per probe and GPU: the shortest that still measures, and the most a
# pre-flight asks for (long enough for a clock that cannot hold to show).
MIN_DURATION_S = 0.5
TARGET_DURATION_S = 2.0
# Seconds one pair test spends besides its timed transfer (both ends start, connect, warm up),
# and its timed seconds per direction: shortest and target.
PAIR_OVERHEAD_S = 8.0
MIN_NET_DURATION_S = 0.5
TARGET_NET_DURATION_S = 2.0
# Confirm rounds planned after the screen (a suspect re-paired with a node that passed).
CONFIRM_ROUNDS = 1
# Each window is this much longer than its estimate: a node slower than the estimate still fits.
SAFETY = 1.25
# The node-probe window is at most this many times its estimate.
WINDOW_MAX = 3.0
NO_LOAD_PROBES = ("facts", "telemetry")
# The node probes of a pre-flight where --probes names none.
DEFAULT_PROBES = (*NO_LOAD_PROBES, *LOAD_PROBES)


def load_probes(probes: tuple[str, ...]) -> tuple[str, ...]:
    """The probes of ``probes`` that put a timed load on the GPUs (all but facts and telemetry)."""
    return tuple(name for name in probes if name not in NO_LOAD_PROBES)


@dataclass(frozen=True)
class PreflightPlan:
    """What a pre-flight of ``hosts`` nodes runs within ``budget_s`` seconds.

    ``probes``: the node probes; ``duration_s``: timed load per load probe and GPU (s);
    ``host_timeout_s``: the node-probe window (s), the limit of each host's probes;
    ``deadline_s``: the probe bundle's own deadline on the node (s); ``retest`` and
    ``retest_s``: whether suspects are re-tested, in a window of that many seconds; ``links``:
    whether the link screen runs (``full_links``: a test of every pair), ``link_rounds`` of pairs
    with ``net_duration_s`` timed seconds per direction, in a window of ``links_s`` seconds;
    ``dropped``: what the budget left out, and why."""

    budget_s: float
    hosts: int
    probes: tuple[str, ...]
    duration_s: float
    host_timeout_s: float
    deadline_s: float
    retest: bool
    retest_s: float
    links: bool
    link_rounds: int
    net_duration_s: float
    links_s: float
    dropped: tuple[str, ...] = ()
    full_links: bool = False

    @property
    def planned_s(self) -> float:
        """Seconds the plan's windows add up to (never more than the budget)."""
        return CONTROLLER_S + self.host_timeout_s + (self.retest_s if self.retest else 0.0) + \
            (self.links_s if self.links else 0.0)

    def lines(self) -> list[str]:
        """The plan in plain words, one line each (what ``gpudiag preflight`` prints first)."""
        nodes = f"{self.hosts} node{'s' if self.hosts != 1 else ''}"
        lines = [f"pre-flight plan: {nodes} within a budget of {self.budget_s:g} s "
                 f"({self.planned_s:.0f} s planned)"]
        load_text = f", {self.duration_s:.1f} s of load per probe and GPU" if load_probes(self.probes) else ""
        lines.append(f"  node probes: {', '.join(self.probes)}{load_text}; at most {self.host_timeout_s:.0f} s "
                     f"a node")
        if self.retest:
            lines.append(f"  re-test of suspects: at most {self.retest_s:.0f} s")
        if self.links:
            what = "link tests of every pair" if self.full_links else "link screen"
            lines.append(f"  {what}: {self.link_rounds} round{'s' if self.link_rounds != 1 else ''} of pair "
                         f"tests, {self.net_duration_s:.1f} s each way; at most {self.links_s:.0f} s")
        lines += [f"  not planned: {reason}" for reason in self.dropped]
        lines.append("  what does not finish within the budget is unchecked (exit 3), never passed")
        return lines

    def to_dict(self) -> dict[str, object]:
        return {"budget_s": self.budget_s, "hosts": self.hosts, "probes": list(self.probes),
                "duration_s": self.duration_s, "host_timeout_s": self.host_timeout_s, "deadline_s": self.deadline_s,
                "retest": self.retest, "retest_s": self.retest_s if self.retest else 0.0, "links": self.links,
                "link_rounds": self.link_rounds if self.links else 0,
                "net_duration_s": self.net_duration_s if self.links else 0.0,
                "links_s": self.links_s if self.links else 0.0, "planned_s": round(self.planned_s, 1),
                "dropped": list(self.dropped)}


def host_pass_s(duration_s: float, loads: int = len(LOAD_PROBES)) -> float:
    """Estimated seconds of one node-probe pass with ``loads`` load probes of ``duration_s``."""
    return NODE_STARTUP_S + TELEMETRY_S + loads * (LOAD_OVERHEAD_S + duration_s)


def retest_s(duration_s: float) -> float:
    """Estimated seconds of a re-test: the node starts again and runs the suspect's probe (one
    load probe, as a slow GPU or slow memory is; the run checks the time it measured before)."""
    return NODE_STARTUP_S + LOAD_OVERHEAD_S + duration_s


def links_s(rounds: int, net_duration_s: float) -> float:
    """Estimated seconds of ``rounds`` rounds of pair tests (both directions each)."""
    return rounds * (PAIR_OVERHEAD_S + 2 * net_duration_s)


def link_rounds(hosts: int, full: bool = False, screen: int | None = None) -> int:
    """Rounds of the link screen of ``hosts`` nodes (``full``: of every pair; ``screen``: the
    screen's rounds where a topology plans them, gpudiag.fabric.schedule), with the planned
    confirm rounds."""
    names = [f"n{index}" for index in range(hosts)]
    if screen is not None and not full:
        return screen + CONFIRM_ROUNDS
    return len(full_rounds(names) if full else screen_rounds(names)) + CONFIRM_ROUNDS


def plan_preflight(budget_s: float, hosts: int, *, links: bool = True, retest: bool = True,
                   probes: tuple[str, ...] = DEFAULT_PROBES, full_links: bool = False,
                   deadline_s: float | None = None, link_screen_rounds: int | None = None) -> PreflightPlan:
    """The pre-flight of ``hosts`` nodes within ``budget_s`` seconds: the node ``probes`` (each
    but facts and telemetry a load probe), the link screen where ``links`` and there are two
    nodes or more (every pair where ``full_links``; ``link_screen_rounds`` rounds where a topology
    plans the screen), the re-test where ``retest``; the bundle's deadline on a node at most
    ``deadline_s`` seconds where given. Raises InputError when the
    budget is too short for even the telemetry of a node (it names the least that is), or the
    deadline for the planned load."""
    if hosts < 1:
        raise InputError("a pre-flight needs at least one node")
    room = budget_s - CONTROLLER_S
    least = SAFETY * host_pass_s(0.0, loads=0)
    if room < least:
        raise InputError(f"--budget {budget_s:g}: too short for a node to start its probes and read its "
                         f"telemetry; give at least {CONTROLLER_S + least:.0f} s")
    plan = _plan(budget_s, hosts, room, links, retest, probes, full_links, link_screen_rounds)
    return plan if deadline_s is None else _capped(plan, deadline_s)


def _capped(plan: PreflightPlan, deadline_s: float) -> PreflightPlan:
    """``plan`` with the bundle's deadline at most ``deadline_s``; raises InputError when that
    leaves no room for the planned load of one probe."""
    if load_probes(plan.probes) and deadline_s <= plan.duration_s:
        raise InputError(f"--deadline {deadline_s:g} is not longer than the planned {plan.duration_s:g} s of load "
                         f"per probe: no load probe could finish; raise --deadline or leave it out (the plan "
                         f"sets one within --budget)")
    return replace(plan, deadline_s=min(plan.deadline_s, deadline_s))


def _plan(budget_s: float, hosts: int, room: float, links: bool, retest: bool, probes: tuple[str, ...],
          full_links: bool, screen: int | None = None) -> PreflightPlan:
    """plan_preflight's plan once the budget is known to hold a node's telemetry (``room``:
    seconds left besides the controller's)."""
    loaded = load_probes(probes)
    loads = len(loaded)
    dropped: list[str] = []
    if room < SAFETY * host_pass_s(MIN_DURATION_S, loads):
        dropped.append(f"{', '.join(loaded)} (the budget leaves no time for load)")
        if hosts >= 2 and links:
            dropped.append("link screen (the budget leaves no time for it)")
        window = min(room, WINDOW_MAX * host_pass_s(0.0, loads=0))
        kept = tuple(name for name in probes if name in NO_LOAD_PROBES) or NO_LOAD_PROBES
        return PreflightPlan(budget_s, hosts, kept, MIN_DURATION_S, window, _deadline(window), False, 0.0,
                             False, 0, MIN_NET_DURATION_S, 0.0, tuple(dropped))
    wanted = hosts >= 2 and links
    rounds = link_rounds(hosts, full_links, screen) if wanted else 0
    node_min = SAFETY * host_pass_s(MIN_DURATION_S, loads)
    links = wanted and room >= node_min + SAFETY * links_s(rounds, MIN_NET_DURATION_S)
    if wanted and not links:
        dropped.append("link screen (the budget leaves no time for it)")
    link_min = SAFETY * links_s(rounds, MIN_NET_DURATION_S) if links else 0.0
    fits = room >= node_min + SAFETY * retest_s(MIN_DURATION_S) + link_min
    if retest and not fits:
        dropped.append("re-test of suspects (the budget leaves no time for it): it runs only if "
                       "the first pass leaves as much time as it took, else each suspect is unchecked (exit 3)")
    retest = retest and fits
    duration, net_duration = _lengthen(room, retest, rounds if links else 0, loads)
    link_window = SAFETY * links_s(rounds, net_duration) if links else 0.0
    retest_window = SAFETY * retest_s(duration) if retest else 0.0
    # What is left goes to the first pass (a slow node still finishes), up to WINDOW_MAX times
    # its estimate: a hung node should not hold the job's start for the whole budget.
    window = min(room - retest_window - link_window, WINDOW_MAX * host_pass_s(duration, loads))
    return PreflightPlan(budget_s, hosts, probes, duration, window, _deadline(window),
                         retest, retest_window, links, rounds, net_duration, link_window, tuple(dropped), full_links)


def _lengthen(room: float, retest: bool, rounds: int, loads: int) -> tuple[float, float]:
    """The load and net durations (s) that fill ``room``: both grow together from their least
    towards their targets, as far as the time allows."""
    def durations(share: float) -> tuple[float, float]:
        return (MIN_DURATION_S + share * (TARGET_DURATION_S - MIN_DURATION_S),
                MIN_NET_DURATION_S + share * (TARGET_NET_DURATION_S - MIN_NET_DURATION_S))

    def need(share: float) -> float:
        duration, net = durations(share)
        return SAFETY * (host_pass_s(duration, loads) + (retest_s(duration) if retest else 0.0) + links_s(rounds, net))

    low, high = 0.0, 1.0
    if need(high) <= room:
        low = high
    else:
        for _ in range(30):  # bisection: need() grows with the share
            middle = (low + high) / 2
            low, high = (middle, high) if need(middle) <= room else (low, middle)
    duration, net = durations(low)
    return math.floor(duration * 100) / 100, math.floor(net * 100) / 100


def _deadline(window_s: float) -> float:
    """The bundle's own deadline (s) within a node window: the window less the node's start-up,
    so the bundle ends its probes itself, records kept, before the controller kills it."""
    return max(1.0, window_s - NODE_STARTUP_S)
