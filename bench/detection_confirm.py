"""The rows of bench/detection.py for issue 31: a confirmation never rests on the run that chose
its suspect, separate broken GPUs are no group, and a job's network is judged as a whole.

- ``separate``: 2 or 3 GPUs (by the seed) broken on different nodes of a 4-, 8- and 16-node run
  (``separate 4n`` ...). Expected: each GPU's ``slow_gpu`` and no group finding: a
  ``fleet_shift`` or ``software_regression`` is scored (a false positive), where other rows leave
  group findings unscored. Exit 1 from 10 % slow.
- ``mixedmodels``: 48 nodes, 16 each of H100, H200 and A100, P2P probed and the links screened:
  ``mixedmodels pair`` one P2P pair of GPUs on an H200 node slow by the slowdown (every figure
  of the pair: both one-way figures and both ways) and the link between two neighbouring H100
  nodes (a pair the first screen tests) slow by it too. Expected: both ``slow_link`` findings
  (the GPU pair's names its host, the nodes' its first end), nothing else; exit 1 from 10 % slow.
  ``mixedmodels nic``: one node's NIC slow by the slowdown on every rail (by the seed, an H100,
  H200 or A100 node; at 4 % link noise a NIC 10 % slow is 2.5 sigma a pair on one rail). Expected:
  its ``slow_nic``, nothing else (its partners' links are no findings); exit 1 from 10 % slow.
  ``mixedmodels healthy`` (printed after the rows, over ``--seeds`` sweeps at each CV): how many sweeps of a healthy
  mixed fleet name any part at ``warn`` or ``fail`` (target 0), with the confirmed slow pairs
  and links among them and the drains (target 0).
- ``jobnet``: a job of 2 to 64 nodes whose every pair runs at 58 % of its 400 Gbit/s line
  rate (every NIC slowed alike): one ``slow_network`` fail (``jobnet 4n`` ...), exit 1, no drain.
  ``jobnet 4n+nic`` (3 to 8 nodes): the same, with one NIC (by the seed) at 46 %: the network's
  ``slow_network`` and that NIC's ``slow_nic``, exit 1, that host drained alone. ``jobnet 4n@85``
  (3 to 16 nodes): every pair at 85 % of the line rate, just under its 90 % floor: one
  ``slow_network``, exit 1, no drain.

Each runs at ``--cvs`` (these cases sat between the benchmark's noise levels: the issue measured
them at CV 1, 1.5, 2 and 3 %). Each builder returns the fields of a detection.Case.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from detection_identity import _fleet, _names  # one fleet file's shape for every scenario

from gpudiag.run.fanout import SweepOptions
from gpudiag.run.hostprobe import ProbeOptions

GPUS = 8
CONFIRM_SCENARIOS = ("separate", "mixedmodels", "jobnet")
SEPARATE_SIZES = (4, 8, 16)
JOB_NETWORK_SIZES = (2, 4, 8, 16, 32, 64)
JOB_NETWORK_NIC_SIZES = (3, 4, 5, 8)
# A pair's share of its line rate in the ``jobnet`` rows, and the rate the simulator gives a
# healthy 400 Gbit/s rail (gpudiag/data/sku.json: rail_gbps).
JOB_NETWORK_SHARE = 0.58
SLOWER_NIC_SHARE = 0.46  # a NIC slower still in the ``jobnet +nic`` rows
# A network just under the 90 % line-rate floor (``jobnet 4n@85``): rail by rail its pairs straddle it.
NEAR_FLOOR_SHARE = 0.85
NEAR_FLOOR_SIZES = (3, 4, 8, 16)
RAIL_GBPS, LINE_RATE_GBPS = 392.0, 400.0
MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB")
MIXED_NODES = 48
P2P_PROBES = ("facts", "telemetry", "gemm", "membw", "pcie", "p2p")
GROUP_KINDS = ("fleet_shift", "software_regression")

CaseFields = dict[str, Any]


def separate_case(size: int, cv: float, slowdown_pct: float, seed: int) -> CaseFields:
    """2 or 3 GPUs (by the seed) slow by ``slowdown_pct``, each on a node of its own."""
    rng = random.Random(f"separate:{size}:{cv}:{slowdown_pct}:{seed}")
    hosts = rng.sample(_names(size), 2 + seed % 2)
    faults = [{"kind": "slow_gpu", "host": host, "gpu": rng.randrange(GPUS), "factor": 1 - slowdown_pct / 100}
              for host in hosts]
    return {"fleet": _fleet(size, cv, seed, faults),
            "expected": frozenset(("slow_gpu", f["host"], f["gpu"]) for f in faults),
            "exit_expected": 1 if slowdown_pct >= 10 else None, "scored": GROUP_KINDS}


def mixed_fleet(cv: float, seed: int, faults: list[dict]) -> dict:
    """48 nodes, a third each of H100, H200 and A100 (in that order)."""
    names = _names(MIXED_NODES)
    third = MIXED_NODES // 3
    overrides = [{"hosts": names[third * index:third * (index + 1)], "gpu_model": model}
                 for index, model in enumerate(MODELS) if index]
    return _fleet(MIXED_NODES, cv, seed, faults, overrides=overrides)


def _p2p_sweep() -> tuple[tuple[str, object], ...]:
    return (("sweep", SweepOptions(probe=ProbeOptions(names=P2P_PROBES), fanout=64)),)


def mixed_pair_case(cv: float, slowdown_pct: float, seed: int) -> CaseFields:
    """A mixed fleet with one slow P2P pair on an H200 node and one slow link between H100 nodes."""
    rng = random.Random(f"mixedmodels:{cv}:{slowdown_pct}:{seed}")
    names = _names(MIXED_NODES)
    third = MIXED_NODES // 3
    factor = 1 - slowdown_pct / 100
    host = rng.choice(names[third:2 * third])
    gpu, peer = rng.sample(range(GPUS), 2)
    first = rng.randrange(third - 1)  # neighbours in the host list: the first screen tests them
    a, b = names[first], names[first + 1]
    faults = [{"kind": "slow_p2p", "host": host, "gpu": gpu, "peer_gpu": peer, "factor": factor},
              {"kind": "slow_link", "a": a, "b": b, "factor": factor}]
    return {"fleet": mixed_fleet(cv, seed, faults), "expected": frozenset({("slow_link", host, None),
                                                                           ("slow_link", a, None)}),
            "exit_expected": 1 if slowdown_pct >= 10 else None, "request": _p2p_sweep()}


def mixed_nic_case(cv: float, slowdown_pct: float, seed: int) -> CaseFields:
    """A mixed fleet with one node's NIC slow on every rail."""
    rng = random.Random(f"mixednic:{cv}:{slowdown_pct}:{seed}")
    host = rng.choice(_names(MIXED_NODES))
    faults = [{"kind": "slow_nic", "host": host, "factor": 1 - slowdown_pct / 100}]
    return {"fleet": mixed_fleet(cv, seed, faults), "expected": frozenset({("slow_nic", host, None)}),
            "exit_expected": 1 if slowdown_pct >= 10 else None,
            "request": (("sweep", SweepOptions(probe=ProbeOptions(names=("facts", "telemetry")), fanout=64)),)}


def mixed_healthy_case(cv: float, seed: int) -> CaseFields:
    return {"fleet": mixed_fleet(cv, seed, []), "expected": frozenset(), "request": _p2p_sweep()}


def job_network_case(size: int, cv: float, slowdown_pct: float, seed: int,
                     share: float = JOB_NETWORK_SHARE) -> CaseFields:
    """A ``size``-node job whose every pair runs at ``share`` of its line rate (every NIC slowed
    alike; the slowdown is not used)."""
    factor = round(share * LINE_RATE_GBPS / RAIL_GBPS, 4)
    faults = [{"kind": "slow_nic", "host": host, "factor": factor} for host in _names(size)]
    return {"fleet": _fleet(size, cv, seed, faults), "expected": frozenset({("slow_network", None, None)}),
            "exit_expected": 1}


def job_network_nic_case(size: int, cv: float, seed: int) -> CaseFields:
    """A ``size``-node job whose every pair runs at JOB_NETWORK_SHARE of its line rate, and one
    NIC (by the seed) at SLOWER_NIC_SHARE."""
    slower = random.Random(f"jobnet-nic:{size}:{cv}:{seed}").choice(_names(size))
    faults = [{"kind": "slow_nic", "host": host,
               "factor": round((SLOWER_NIC_SHARE if host == slower else JOB_NETWORK_SHARE) * LINE_RATE_GBPS / RAIL_GBPS,
                               4)} for host in _names(size)]
    return {"fleet": _fleet(size, cv, seed, faults),
            "expected": frozenset({("slow_network", None, None), ("slow_nic", slower, None)}), "exit_expected": 1}


def confirm_builders(scenario: str) -> list[tuple[str, Callable[[float, float, int], CaseFields]]]:
    """(label, build(cv, slowdown_pct, seed)) for each row of ``scenario`` (one of CONFIRM_SCENARIOS)."""
    if scenario == "separate":
        return [(f"separate {size}n", lambda cv, s, seed, n=size: separate_case(n, cv, s, seed))
                for size in SEPARATE_SIZES]
    if scenario == "mixedmodels":
        return [("mixedmodels pair", mixed_pair_case), ("mixedmodels nic", mixed_nic_case)]
    return [*((f"jobnet {size}n", lambda cv, s, seed, n=size: job_network_case(n, cv, s, seed))
              for size in JOB_NETWORK_SIZES),
            *((f"jobnet {size}n@85", lambda cv, s, seed, n=size: job_network_case(n, cv, s, seed, NEAR_FLOOR_SHARE))
              for size in NEAR_FLOOR_SIZES),
            *((f"jobnet {size}n+nic", lambda cv, s, seed, n=size: job_network_nic_case(n, cv, seed))
              for size in JOB_NETWORK_NIC_SIZES)]


def healthy_mixed(cvs: list[float], seeds: int, sweep: Callable[[CaseFields, Path], tuple[list[dict], int]]) -> None:
    """``mixedmodels healthy``: of ``seeds`` sweeps of a healthy mixed fleet at each CV, how many
    name any part at ``warn`` or ``fail``, and the confirmed slow pairs (P2P) and links."""
    for cv in cvs:
        named, pairs, links, exits, drains, seconds = 0, 0, 0, 0, 0, 0.0
        kinds: dict[str, int] = {}
        for seed in range(1, seeds + 1):
            with tempfile.TemporaryDirectory() as folder:
                started = time.perf_counter()
                findings, code = sweep(mixed_healthy_case(cv, seed), Path(folder))
                seconds += time.perf_counter() - started
            flagged = [f for f in findings if f["severity"] in ("warn", "fail")]
            named += bool(flagged)
            exits += code != 0
            drains += sum(1 for f in findings if f.get("action") == "drain")
            for f in flagged:
                kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
            slow = [f for f in flagged if f["kind"] == "slow_link" and f.get("confirmed")]
            pairs += sum(1 for f in slow if str(f.get("metric", "")).startswith("p2p."))
            links += sum(1 for f in slow if str(f.get("metric", "")).startswith("link."))
        found = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items())) or "none"
        print(f"{'mixedmodels healthy':<16} {cv:>5.3f} {'none':>5} sweeps naming a part {named}/{seeds}, exit != 0 "
              f"{exits}/{seeds}; drains {drains}; confirmed slow P2P pairs {pairs}, links {links}; findings: {found} "
              f"({seconds / seeds:.1f} s a sweep; target 0)", flush=True)
