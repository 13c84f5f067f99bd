"""Detection benchmark: precision and recall of the whole pipeline on simulated fleets.

Every fleet is swept through the real pipeline (plan, runner, analysis with re-tests, store)
over the simulated transport, and the findings are scored against the planted faults. The
analysis never sees the faults: they are only used here, to score.

Scenarios (``--scenarios``):
- ``mix``: 5 % of nodes get one fault each, rotating slow_gpu, throttled, slow_node,
  degraded_pcie and nvlink_down (sizes ``--sizes``);
- ``share25``, ``share40``, ``share50``: that share of the nodes of a 64-node fleet slow on
  every GPU (a node-wide fault: expected ``slow_node`` per host, and one ``fleet_shift``);
- ``shift``: the whole 32-node fleet power-capped (every GPU ``throttled`` by ``sw_power_cap``),
  judged against the SKU figures alone, then also against a stored baseline;
- ``job1``, ``job2``, ``job3``, ``job4``: a 1- to 4-node job with one node slow on every GPU,
  first without a baseline (``sku``: the SKU figures alone; ``peers``: 3 nodes or more are their
  own fleet, and the SKU figures), then against a stored baseline built from a healthy 16-node
  sweep.
- ``xid``: with the xid probe, two Xids with a recovery action pending on one node, a recovered
  Xid 94 and application Xid 13s on others (bench/detection_memory.py).
- ``ecc``: uncorrectable ECC errors, a pending and a failed row remap on three GPUs of 16 nodes,
  found from NVML's readings (bench/detection_memory.py).
- ``history``: a GPU and a whole node losing 1 to 3 % a sweep over 3 to 6 successive sweeps of an
  8-node fleet, watched or failed by ``gpudiag history``'s trend, and flat parts watched or failed
  (bench/detection_history.py; ``hdrain``: parts flagged elsewhere).
- ``lostslow``, ``mixedboards``, ``gone1n``: a lost GPU and a slow one after it on one node (the
  slow one must be named by NVML's index), healthy 4-GPU boards among 8-GPU boards with a GPU gone
  from one board of each, and a GPU gone from the bus of a 1-node job since its stored previous
  sweep: bench/detection_identity.py.
- ``siblings``, ``starved``, ``cv3``: one GPU slow in a 1- or 2-node job (found by its siblings),
  a starved host with a broken GPU (both named), and CV 3 % noise with P2P probed (a 10 %-slow
  GPU, and the share of a healthy fleet's GPUs at ``fail``): bench/detection_siblings.py.
- ``separate``, ``mixedmodels``, ``jobnet``: 2-3 broken GPUs on different nodes of 4- to 16-node
  runs (no group finding), a 48-node H100/H200/A100 fleet with P2P and links (a slow GPU pair and
  a slow link found; a NIC slow on every rail found; healthy sweeps name nothing), and a 2- to
  64-node job whose network runs at 58 % of its line rate (one ``slow_network`` fail; with one
  NIC at 46 %, that NIC's ``slow_nic`` too; at 85 %, just under the line-rate floor, the same
  without the NIC): bench/detection_confirm.py (issue 31).

Printed: precision and recall per scenario, kind and slowdown, whether a ``fleet_shift`` was
reported where one was expected (``shift``), whether the exit code was the one expected (``exit``,
k of n trials), drains on hosts where nothing was planted (``hdrain``), ``watch`` findings there
(``hwatch``: a dip its re-test did not repeat, said and never acted on, so not a false positive in
the precision), and the share of healthy hosts flagged on fault-free fleets.
Targets at noise CV <= 1 %: precision and recall >= 0.99 for slowdowns >= 10 %, >= 0.95 at
5 %, and <= 1 % of healthy hosts flagged.

slow_nic and slow_link act on the pairwise link tests; their detection is scored by
bench/link_schedule.py (screen against full, 8 to 4,096 nodes), so they are left out of this mix;
``smalljobs`` and ``pauseref`` (bench/detection_links.py) score them here, in 2- to 4-node jobs
and paused jobs narrowed to a suspect and its reference peers.

Usage: python bench/detection.py [--scenarios mix share40 ...] [--sizes 64 256 1024]
                                 [--cvs 0.005 0.01 0.02] [--slowdowns 3 5 10 20 50] [--seeds 1]
       python bench/detection.py --smoke      (seconds: one small fleet of each scenario)
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from detection_confirm import CONFIRM_SCENARIOS, confirm_builders, healthy_mixed  # noqa: E402
from detection_history import run_history  # noqa: E402
from detection_identity import IDENTITY_SCENARIOS, identity_builders  # noqa: E402
from detection_links import LINK_SCENARIOS, link_builders  # noqa: E402
from detection_memory import MEMORY_SCENARIOS, memory_builders  # noqa: E402
from detection_siblings import SIBLING_SCENARIOS, healthy_at_fail, scenario_cvs, sibling_builders  # noqa: E402

from gpudiag.run.fanout import SweepOptions  # noqa: E402
from gpudiag.run.hostprobe import ProbeOptions  # noqa: E402
from gpudiag.run.request import Judging, Reach, SweepRequest  # noqa: E402
from gpudiag.run.sweep import run_sweep  # noqa: E402
from gpudiag.sim import FleetFile  # noqa: E402
from gpudiag.store.baselines import baseline_samples, build_baseline, save_baseline  # noqa: E402
from gpudiag.store.store import Store  # noqa: E402

SIZED_KINDS = ("slow_gpu", "throttled", "slow_node")  # faults with a slowdown factor
FIXED_KINDS = ("degraded_pcie", "nvlink_down")  # faults that are a state, not a size
GPU_KINDS = {"slow_gpu", "throttled", "degraded_pcie", "nvlink_down", "xid"}
REASONS = ("hw_thermal", "hw_slowdown", "hw_power_brake")
PROBES = ("facts", "telemetry", "gemm", "membw", "pcie")
# Groups that shift together, power policy and throttles (group_builders).
GROUP_SCENARIOS = ("fleet8", "drivergroup", "modelgroup", "powercap", "sitecap", "partialthrottle")
SCENARIOS = ("mix", "share25", "share40", "share50", "shift", "job1", "job2", "job3", "job4", "history",
             *MEMORY_SCENARIOS, *LINK_SCENARIOS, *GROUP_SCENARIOS)
GPUS = 8
NOT_SCORED = ("fleet_shift", "unchecked")
SCENARIOS = (*SCENARIOS, "ports")  # passive NIC port checks (ports_case)
SCENARIOS = (*SCENARIOS, *IDENTITY_SCENARIOS)  # a lost + a slow GPU; 4-GPU among 8-GPU boards (detection_identity.py)
SCENARIOS = (*SCENARIOS, *SIBLING_SCENARIOS)  # siblings, starved host + broken GPU, CV 3 % (detection_siblings.py)
SCENARIOS = (*SCENARIOS, *CONFIRM_SCENARIOS)  # separate broken GPUs, mixed models, a network (detection_confirm.py)


@dataclass(frozen=True)
class Case:
    """One fleet to sweep: its file, the findings expected as (kind, host, gpu), and whether a
    ``fleet_shift`` must be reported; ``baseline`` sweeps a healthy fleet first for a baseline."""

    fleet: dict
    expected: frozenset[tuple[str, str, int | None]]
    shift_expected: bool = False
    baseline: bool = False
    # The exit code the sweep must end with (a tuple: any of them; None: not scored), and SweepRequest fields beyond the
    # defaults (a --suspects list, a line rate, thresholds ...): each class of fault sets its own.
    exit_expected: int | tuple[int, ...] | None = None
    request: tuple[tuple[str, object], ...] = ()
    # The fleet the baseline is built from (None: a healthy 16-node copy of ``fleet``).
    baseline_fleet: dict | None = None
    # Kinds of NOT_SCORED scored all the same (a group finding where none may be: a false positive).
    scored: tuple[str, ...] = ()


def _fleet(size: int, cv: float, seed: int, faults: list[dict]) -> dict:
    return {"nodes": size, "name_format": "node{:04d}", "gpus_per_node": GPUS, "seed": seed,
            "noise": {"gemm_cv": cv, "membw_cv": cv, "link_cv": 2 * cv}, "faults": faults}


def _names(size: int) -> list[str]:
    return [f"node{i:04d}" for i in range(1, size + 1)]


def mix_case(size: int, cv: float, slowdown_pct: float | None, seed: int, share: float = 0.05) -> Case:
    """``share`` of the nodes get one fault each (none when ``slowdown_pct`` is None)."""
    rng = random.Random(f"{size}:{cv}:{slowdown_pct}:{seed}")
    faults = []
    if slowdown_pct is not None:
        chosen = rng.sample(_names(size), max(1, round(share * size)))
        kinds = SIZED_KINDS + FIXED_KINDS
        for index, host in enumerate(chosen):
            faults.append(_fault(kinds[index % len(kinds)], host, 1 - slowdown_pct / 100, rng))
    return Case(_fleet(size, cv, seed, faults), frozenset(_place(f["kind"], f["host"], f.get("gpu")) for f in faults),
                exit_expected=None if slowdown_pct is None or slowdown_pct < 8 else 1)


def _fault(kind: str, host: str, factor: float, rng: random.Random) -> dict:
    gpu = rng.randrange(GPUS)
    if kind == "slow_gpu":
        return {"kind": kind, "host": host, "gpu": gpu, "factor": factor}
    if kind == "throttled":
        return {"kind": kind, "host": host, "gpu": gpu, "reason": rng.choice(REASONS), "factor": factor}
    if kind == "slow_node":
        return {"kind": kind, "host": host, "factor": factor}
    if kind == "degraded_pcie":
        return {"kind": kind, "host": host, "gpu": gpu, "width": rng.choice((8, 4))}
    return {"kind": kind, "host": host, "gpu": gpu, "link": rng.randrange(18)}


def share_case(share: float, cv: float, slowdown_pct: float, seed: int, size: int = 64) -> Case:
    """``share`` of the nodes slow by ``slowdown_pct`` on every GPU: each a slow_node."""
    rng = random.Random(f"share:{share}:{cv}:{slowdown_pct}:{seed}")
    slow = sorted(rng.sample(_names(size), round(share * size)))
    faults = [{"kind": "slow_gpu", "host": host, "gpu": gpu, "factor": 1 - slowdown_pct / 100}
              for host in slow for gpu in range(GPUS)]
    return Case(_fleet(size, cv, seed, faults), frozenset(("slow_node", host, None) for host in slow),
                shift_expected=True, exit_expected=1 if slowdown_pct >= 8 else None)


def shift_case(cv: float, slowdown_pct: float, seed: int, baseline: bool, size: int = 32) -> Case:
    """The whole fleet power-capped: every GPU throttled by a software power cap, one
    ``fleet_shift`` for the fleet (a cause every node shares drains none)."""
    faults = [{"kind": "throttled", "host": host, "gpu": gpu, "reason": "sw_power_cap",
               "factor": 1 - slowdown_pct / 100} for host in _names(size) for gpu in range(GPUS)]
    expected = frozenset({("fleet_shift", _span(size), None)})
    return Case(_fleet(size, cv, seed, faults), expected, shift_expected=True, baseline=baseline)


def _span(size: int, first: int = 1) -> str:
    """The folded names of nodes ``first``..``size`` (as a group finding names them)."""
    return f"node[{first:04d}-{size:04d}]"


def fleet8_case(cv: float, slowdown_pct: float, seed: int, size: int = 64) -> Case:
    """The whole fleet slow on every GPU with no telemetry cause: one ``fleet_shift``, no drain."""
    faults = [{"kind": "slow_gpu", "host": host, "gpu": gpu, "factor": 1 - slowdown_pct / 100}
              for host in _names(size) for gpu in range(GPUS)]
    return Case(_fleet(size, cv, seed, faults), frozenset({("fleet_shift", _span(size), None)}), shift_expected=True,
                exit_expected=1 if slowdown_pct >= 8 else None)


def driver_group_case(cv: float, slowdown_pct: float, seed: int, baseline: bool, size: int = 64,
                      group: int = 16) -> Case:
    """The last ``group`` nodes on a newer driver, every GPU slow, and one GPU of the group slow
    by as much again: one ``software_regression`` for the group and that GPU's ``slow_gpu``
    (against its group's level). ``baseline``: a baseline built first on the old driver."""
    rng = random.Random(f"drivergroup:{cv}:{slowdown_pct}:{seed}")
    names = _names(size)
    members = names[size - group:]
    factor = 1 - slowdown_pct / 100
    slow_host, slow_gpu = rng.choice(members), rng.randrange(GPUS)
    faults = [{"kind": "slow_gpu", "host": host, "gpu": gpu,
               "factor": factor * factor if (host, gpu) == (slow_host, slow_gpu) else factor}
              for host in members for gpu in range(GPUS)]
    fleet = {**_fleet(size, cv, seed, faults), "overrides": [{"hosts": members, "driver": "560.35.03"}]}
    old = {**_fleet(16, cv, seed + 1000, [])}
    expected = frozenset({("software_regression", _span(size, size - group + 1), None),
                          ("slow_gpu", slow_host, slow_gpu)})
    return Case(fleet, expected, baseline=baseline, baseline_fleet=old,
                exit_expected=1 if slowdown_pct >= 8 else None)


def model_group_case(cv: float, slowdown_pct: float, seed: int, size: int = 32, group: int = 5) -> Case:
    """The last ``group`` nodes another model (H200), every GPU of them slow: one group finding."""
    members = _names(size)[size - group:]
    faults = [{"kind": "slow_gpu", "host": host, "gpu": gpu, "factor": 1 - slowdown_pct / 100}
              for host in members for gpu in range(GPUS)]
    fleet = {**_fleet(size, cv, seed, faults), "overrides": [{"hosts": members, "gpu_model": "NVIDIA H200"}]}
    return Case(fleet, frozenset({("fleet_shift", _span(size, size - group + 1), None)}), shift_expected=True,
                exit_expected=1 if slowdown_pct >= 8 else None)


def power_cap_case(cv: float, slowdown_pct: float, seed: int, size: int = 32) -> Case:
    """Every GPU under a software power cap that costs 3 % of its clock (normal at full load),
    and one GPU slow besides: that GPU's ``slow_gpu`` (the cap explains none of it), no ``throttled``."""
    rng = random.Random(f"powercap:{cv}:{slowdown_pct}:{seed}")
    host, gpu = rng.choice(_names(size)), rng.randrange(GPUS)
    faults = [{"kind": "throttled", "host": name, "gpu": index, "reason": "sw_power_cap", "factor": 0.97}
              for name in _names(size) for index in range(GPUS)]
    faults.append({"kind": "slow_gpu", "host": host, "gpu": gpu, "factor": 1 - slowdown_pct / 100})
    return Case(_fleet(size, cv, seed, faults), frozenset({("slow_gpu", host, gpu)}),
                exit_expected=1 if slowdown_pct >= 8 else None)


def site_cap_case(cv: float, slowdown_pct: float, seed: int, size: int = 8) -> Case:
    """A pre-flight's 8 nodes all under one power cap (a site policy): one ``fleet_shift``
    (inspect), no node drained; a fail (exit 1) where it costs ``deficit_fail`` against the SKU."""
    faults = [{"kind": "throttled", "host": host, "gpu": gpu, "reason": "sw_power_cap",
               "factor": 1 - slowdown_pct / 100} for host in _names(size) for gpu in range(GPUS)]
    return Case(_fleet(size, cv, seed, faults), frozenset({("fleet_shift", _span(size), None)}), shift_expected=True,
                exit_expected=1 if slowdown_pct >= 8 else None)


def partial_throttle_case(cv: float, slowdown_pct: float, seed: int, size: int = 32) -> Case:
    """One GPU under a HW slowdown in a fifth of its loaded samples (below ``throttle_share``;
    more where a fifth cannot cost that much) that costs it ``slowdown_pct`` on average: ``throttled``."""
    rng = random.Random(f"partialthrottle:{cv}:{slowdown_pct}:{seed}")
    host, gpu = rng.choice(_names(size)), rng.randrange(GPUS)
    share = max(0.2, slowdown_pct / 75)
    fault = {"kind": "throttled", "host": host, "gpu": gpu, "reason": "hw_slowdown", "share": round(share, 3),
             "factor": round(1 - slowdown_pct / 100 / share, 4)}
    return Case(_fleet(size, cv, seed, [fault]), frozenset({("throttled", host, gpu)}),
                exit_expected=1 if slowdown_pct >= 8 else None)


def ports_case(cv: float, slowdown_pct: float, seed: int, size: int = 16) -> Case:
    """NIC ports found without traffic: one port trained at half width (2X of 4X: half its rate),
    one DOWN and one whose symbol errors grew since the previous sweep (a healthy sweep of the same
    hosts stored first), each on its own random node and rail: three ``nic_port`` findings, exit 1.
    Port faults are states, not sizes: ``slowdown_pct`` does not change them."""
    rng = random.Random(f"ports:{cv}:{seed}")
    half, down, erroring = rng.sample(_names(size), 3)
    faults = [{"kind": "nic_port", "host": half, "rail": rng.randrange(8), "width": 2},
              {"kind": "nic_port", "host": down, "rail": rng.randrange(8), "state": "DOWN"},
              {"kind": "nic_port", "host": erroring, "rail": rng.randrange(8), "counter": "symbol_error",
               "count": rng.randrange(1000, 100000)}]
    return Case(_fleet(size, cv, seed, faults), frozenset(("nic_port", host, None) for host in (half, down, erroring)),
                baseline=True, exit_expected=1)


def job_case(nodes: int, cv: float, slowdown_pct: float, seed: int, baseline: bool) -> Case:
    """A small job: one of its ``nodes`` slow on every GPU."""
    slow = _names(nodes)[-1]
    faults = [{"kind": "slow_gpu", "host": slow, "gpu": gpu, "factor": 1 - slowdown_pct / 100}
              for gpu in range(GPUS)]
    # 3 nodes or more are their own fleet (their level judges each): 8 % is past deficit_fail. With
    # the SKU figure alone, 8 % is a fail where noise pushed a GPU past it, else not passed (exit 3).
    fails = slowdown_pct >= 10 or (nodes >= 3 or baseline) and slowdown_pct >= 8
    exit_expected = 1 if fails else (1, 3) if slowdown_pct >= 8 else None
    return Case(_fleet(nodes, cv, seed, faults), frozenset({("slow_node", slow, None)}), baseline=baseline,
                exit_expected=exit_expected)


def sweep(case: Case, folder: Path) -> list[dict]:
    """The findings (JSON objects) of one case, through the whole pipeline."""
    return sweep_with_exit(case, folder)[0]


def sweep_with_exit(case: Case, folder: Path) -> tuple[list[dict], int]:
    """The findings (JSON objects) of one case and the sweep's exit code, through the whole pipeline."""
    store = folder / "gpudiag.db"
    if case.baseline:
        healthy = case.baseline_fleet or {**case.fleet, "nodes": 16, "faults": [], "seed": case.fleet["seed"] + 1000}
        _run(healthy, folder, store, None)
        with Store.open(store) as opened:
            sweep_id = opened.latest_sweep_id()
            save_baseline(opened, build_baseline("default", baseline_samples(opened, [sweep_id])))
    result = _run(case.fleet, folder, store if case.baseline else None, "default" if case.baseline else None,
                  dict(case.request))
    return [f.to_dict() for f in result.findings], int(result.exit_code)


def _run(fleet: dict, folder: Path, store: Path | None, baseline: str | None, extra: dict | None = None):
    path = folder / "fleet.json"
    path.write_text(json.dumps(fleet))
    fields = dict(extra or {})
    options = fields.pop("sweep", None) or SweepOptions(probe=ProbeOptions(names=PROBES), fanout=64)
    request = SweepRequest(hosts_argument=None, reach=Reach(stand_in=FleetFile(str(path))),
                           judging=Judging(store_path=str(store) if store else None, baseline_name=baseline),
                           sweep=options, **fields)
    return run_sweep(request)


def healthy_watches(case: Case, findings: list[dict]) -> int:
    """``watch`` findings on parts where nothing was planted: said (a dip its re-test did not
    repeat, a trend to look at next sweep), never a warning nor a fail, so not scored as a false
    positive (``score``), but counted."""
    return sum(1 for f in findings if f.get("severity") == "watch"
               and _place(f["kind"], f["host"], f.get("gpu")) not in case.expected)


def healthy_drains(case: Case, findings: list[dict]) -> int:
    """Drain actions on parts where nothing was planted (a host none of the expected findings names)."""
    faulty = {host for _, host, _ in case.expected}
    return sum(1 for f in findings if f.get("action") == "drain" and f["host"] not in faulty)


def score(case: Case, findings: list[dict]) -> dict[str, list[int]]:
    """Per kind: [true positives, findings of that kind, faults of that kind, faults detected].
    ``fleet_shift`` and ``unchecked`` findings are not scored here, nor a ``watch`` on a part
    where nothing was planted (``healthy_watches``: the row counts those apart); a ``watch`` on a
    planted fault detects it."""
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    # a group finding, where a case expects one or scores it
    expected_kinds = {kind for kind, _, _ in case.expected} | set(case.scored)
    found = {place for f in findings
             if (f["kind"] not in NOT_SCORED or f["kind"] in expected_kinds)
             and ((place := _place(f["kind"], f["host"], f.get("gpu"))) in case.expected
                  or f.get("severity") != "watch")}
    for kind, host, gpu in found:
        tally[kind][1] += 1
        tally[kind][0] += (kind, host, gpu) in case.expected
    for kind, host, gpu in case.expected:
        tally[kind][2] += 1
        tally[kind][3] += (kind, host, gpu) in found
    return tally


def _place(kind: str, host: str, gpu: int | None) -> tuple[str, str, int | None]:
    return kind, host, gpu if kind in GPU_KINDS else None


def ratio(numerator: int, denominator: int) -> str:
    return f"{numerator / denominator:.3f}" if denominator else "  -  "


def run_cell(label: str, cases: list[Case], slowdown: float, cv: float) -> None:
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    shifts, exits, drains, watches, seconds = [], [], 0, 0, 0.0
    for case in cases:
        with tempfile.TemporaryDirectory() as folder:
            started = time.perf_counter()
            findings, code = sweep_with_exit(case, Path(folder))
            seconds += time.perf_counter() - started
        if case.shift_expected:
            shifts.append(any(f["kind"] == "fleet_shift" for f in findings))
        if case.exit_expected is not None:
            expected = case.exit_expected
            exits.append(code in expected if isinstance(expected, tuple) else code == expected)
        drains += healthy_drains(case, findings)
        watches += healthy_watches(case, findings)
        for kind, counts in score(case, findings).items():
            totals[kind] = [a + b for a, b in zip(totals[kind], counts, strict=True)]
    shift = "-" if not shifts else f"{sum(shifts)}/{len(shifts)}"
    exit_ok = "-" if not exits else f"{sum(exits)}/{len(exits)}"
    for kind in sorted(totals) or ["(none)"]:
        tp, found, faults, detected = totals[kind]
        print(f"{label:<16} {cv:>5.3f} {slowdown:>5g} {kind:<14} {ratio(tp, found):>9} {ratio(detected, faults):>7} "
              f"{faults:>6} {shift:>6} {exit_ok:>6} {drains:>6} {watches:>6} {seconds / len(cases):>7.1f}", flush=True)


def healthy_flagged(size: int, cv: float, seeds: int) -> None:
    flagged, hosts = 0, 0
    for seed in range(1, seeds + 1):
        with tempfile.TemporaryDirectory() as folder:
            findings = sweep(mix_case(size, cv, None, seed), Path(folder))
        flagged += len({f["host"] for f in findings})
        hosts += size
    print(f"{'healthy ' + str(size):<16} {cv:>5.3f} {'none':>5} {'healthy hosts flagged':<22} {flagged}/{hosts} "
          f"= {100 * flagged / hosts:.2f} %", flush=True)


def builders(scenario: str, sizes: list[int]) -> list[tuple[str, Callable[[float, float, int], Case]]]:
    if scenario == "mix":
        return [(f"mix {size}", lambda cv, s, seed, size=size: mix_case(size, cv, s, seed)) for size in sizes]
    if scenario == "ports":
        return [("ports", ports_case)]
    if scenario.startswith("share"):
        share = int(scenario[5:]) / 100
        return [(scenario, lambda cv, s, seed, share=share: share_case(share, cv, s, seed))]
    if scenario in IDENTITY_SCENARIOS:
        return [(label, lambda cv, s, seed, build=build: Case(**build(cv, s, seed))) for label, build in
                identity_builders(scenario)]
    if scenario in MEMORY_SCENARIOS:
        return [(label, lambda cv, s, seed, build=build: Case(**build(cv, s, seed))) for label, build in
                memory_builders(scenario)]
    if scenario in LINK_SCENARIOS:
        return [(label, lambda cv, s, seed, build=build: Case(**build(cv, s, seed))) for label, build in
                link_builders(scenario)]
    if scenario == "shift":
        return [(f"shift {'baseline' if with_baseline else 'sku'}",
                 lambda cv, s, seed, b=with_baseline: shift_case(cv, s, seed, b)) for with_baseline in (False, True)]
    if scenario in GROUP_SCENARIOS:
        return group_builders(scenario)
    if scenario in SIBLING_SCENARIOS:
        return [(label, lambda cv, s, seed, build=build: Case(**build(cv, s, seed))) for label, build in
                sibling_builders(scenario, sizes)]
    if scenario in CONFIRM_SCENARIOS:
        return [(label, lambda cv, s, seed, build=build: Case(**build(cv, s, seed))) for label, build in
                confirm_builders(scenario)]
    nodes = int(scenario[3:])
    alone = "peers" if nodes >= 3 else "sku"  # 3 nodes or more are their own fleet
    return [(f"{scenario} {'baseline' if with_baseline else alone}",
             lambda cv, s, seed, nodes=nodes, b=with_baseline: job_case(nodes, cv, s, seed, b))
            for with_baseline in (False, True)]


def group_builders(scenario: str) -> list[tuple[str, Callable[[float, float, int], Case]]]:
    """The rows of the group scenarios: ``drivergroup`` without and with a baseline on the old driver."""
    if scenario == "drivergroup":
        return [(f"drivergroup {'baseline' if with_baseline else 'sku'}",
                 lambda cv, s, seed, b=with_baseline: driver_group_case(cv, s, seed, b))
                for with_baseline in (False, True)]
    builds = {"fleet8": fleet8_case, "modelgroup": model_group_case, "powercap": power_cap_case,
              "sitecap": site_cap_case, "partialthrottle": partial_throttle_case}
    return [(scenario, builds[scenario])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024], help="fleet sizes of 'mix'")
    parser.add_argument("--cvs", type=float, nargs="+", default=[0.005, 0.01, 0.02])
    parser.add_argument("--slowdowns", type=float, nargs="+", default=[3, 5, 10, 20, 50])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="one small fleet per scenario, in seconds")
    arguments = parser.parse_args()
    if arguments.smoke:
        arguments.sizes, arguments.cvs, arguments.slowdowns, arguments.seeds = [16], [0.01], [20], 1
    print(f"{'scenario':<16} {'CV':>5} {'slow%':>5} {'kind':<14} {'precision':>9} {'recall':>7} {'faults':>6} "
          f"{'shift':>6} {'exit':>6} {'hdrain':>6} {'hwatch':>6} {'sweep s':>7}", flush=True)
    for scenario in arguments.scenarios:
        if scenario == "history":  # a series of sweeps per trial, not one sweep (bench/detection_history.py)
            run_history(arguments.cvs, arguments.seeds, arguments.smoke)
            continue
        for label, build in builders(scenario, arguments.sizes):
            for cv in scenario_cvs(scenario, arguments.cvs):
                for slowdown in arguments.slowdowns:
                    cases = [build(cv, slowdown, seed) for seed in range(1, arguments.seeds + 1)]
                    run_cell(label, cases, slowdown, cv)
    for size in arguments.sizes if "mix" in arguments.scenarios else []:
        for cv in arguments.cvs:
            healthy_flagged(size, cv, arguments.seeds)
    if "mixedmodels" in arguments.scenarios:
        healthy_mixed(arguments.cvs, arguments.seeds, lambda fields, folder: sweep_with_exit(Case(**fields), folder))
    if "cv3" in arguments.scenarios:
        healthy_at_fail(arguments.sizes, arguments.seeds,
                        lambda fields, folder: sweep_with_exit(Case(**fields), folder))
    print("targets at CV <= 1 %: precision and recall >= 0.99 for slowdowns >= 10 %, >= 0.95 at 5 %; "
          "<= 1 % of healthy hosts flagged")


if __name__ == "__main__":
    main()
