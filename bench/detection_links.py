"""The link rows of bench/detection.py: small jobs and paused jobs, where a slow NIC has few
healthy partners to be confirmed against (issue 16).

- ``smalljobs``: 2-, 3- and 4-node jobs with one slow NIC, and a 4-node job with two, swept
  whole (the screen and its confirm rounds: every pair of so few hosts), judged against the
  line rate alone (``line``), then also against a stored baseline built from a healthy 16-node
  sweep (``baseline``). Expected: the slow NIC's ``slow_nic`` (in a 2-node job its network as a
  whole, ``slow_network``: either end, or the fabric, may be the cause), exit 1, no drain
  elsewhere. Two slow NICs of three hosts are left out: every pair is slow and which two NICs
  are cannot be told (the job's network as a whole: tests/cli/test_small_job_links_cli.py).
- ``mixedrails``: 16 nodes of two models whose NICs run at different rates (node0001-0008
  H100 at 400 Gbit/s a rail, node0009-0016 A100 at 200), one slow NIC on a node of each: a pair
  across the boundary runs at its slower end and is judged at the lower line rate, so no healthy
  boundary node is a ``slow_nic``. At CV 3 % (6 % link noise) seed 5 drains a healthy node
  (node0008): its three pairs' 24 rail figures average 4.7 % under the healthy rate the
  simulator gives (392 Gbit/s), 3.9 sigma of such a mean on their own, past any bar that still
  finds a NIC 10 % slow in these fleets; about one sweep in a hundred meets such a host.
- ``pauseref``: an 8-node job paused, ``--suspects`` one node with its two reference peers;
  ``nic``: a reference peer's NIC slow (its ``slow_nic``, the suspect not blamed); ``node``:
  the suspect slow on every GPU (one ``slow_node``, no per-GPU verdict, no shift); ``refs8``,
  ``refs16``: an 8- and a 16-node job whose two reference peers both have slow NICs and whose
  suspect is healthy (issue 31): a tie the job's further peers break, so both references'
  ``slow_nic`` and nothing on the suspect, never three nodes left unchecked.

Each builder returns the fields of a detection.Case (scored as (kind, host, None) places).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from gpudiag.pause import FocusRequest
from gpudiag.pause.focus import DEFAULT_REFERENCE_PEERS, choose_references
from gpudiag.run.fanout import SweepOptions
from gpudiag.run.hostprobe import ProbeOptions

GPUS = 8
PAUSE_PROBES = ("facts", "telemetry", "gemm", "membw", "pcie")
LINK_SCENARIOS = ("smalljobs", "pauseref", "mixedrails")
# (nodes, slow NICs) of the smalljobs rows: the slow ones are the last nodes of the job.
SMALL_JOBS = ((2, 1), (3, 1), (4, 1), (4, 2))
PAUSE_SUSPECT = "node0005"  # its reference peers among 8 nodes: node0002 and node0007
SLOW_REFERENCE = "node0007"

CaseFields = dict[str, Any]


def _fleet(size: int, cv: float, seed: int, faults: list[dict]) -> dict:
    return {"nodes": size, "name_format": "node{:04d}", "gpus_per_node": GPUS, "seed": seed,
            "noise": {"gemm_cv": cv, "membw_cv": cv, "link_cv": 2 * cv}, "faults": faults}


def _names(size: int) -> list[str]:
    return [f"node{i:04d}" for i in range(1, size + 1)]


def small_job_case(nodes: int, slow_nics: int, cv: float, slowdown_pct: float, seed: int,
                   baseline: bool) -> CaseFields:
    """A job of ``nodes`` with its last ``slow_nics`` nodes' NICs ``slowdown_pct`` slow."""
    names = _names(nodes)
    slow = names[-slow_nics:]
    faults = [{"kind": "slow_nic", "host": host, "factor": 1 - slowdown_pct / 100} for host in slow]
    expected = ({("slow_network", None, None)} if nodes == 2  # one pair: its network as a whole
                else {("slow_nic", host, None) for host in slow})
    return {"fleet": _fleet(nodes, cv, seed, faults), "expected": frozenset(expected), "baseline": baseline,
            "exit_expected": 1}


def mixed_rails_case(cv: float, slowdown_pct: float, seed: int, size: int = 16) -> CaseFields:
    """Two models with different rail rates (the first half H100 at 400 Gbit/s a rail, the rest
    A100 at 200), one NIC ``slowdown_pct`` slow on a node of each half, chosen by the seed."""
    rng = random.Random(f"mixedrails:{cv}:{slowdown_pct}:{seed}")
    names = _names(size)
    slow = [rng.choice(names[:size // 2]), rng.choice(names[size // 2:])]
    faults = [{"kind": "slow_nic", "host": host, "factor": 1 - slowdown_pct / 100} for host in slow]
    fleet = {**_fleet(size, cv, seed, faults),
             "overrides": [{"hosts": names[size // 2:], "gpu_model": "NVIDIA A100-SXM4-80GB"}]}
    return {"fleet": fleet, "expected": frozenset(("slow_nic", host, None) for host in slow),
            "exit_expected": 1}


def pause_reference_case(kind: str, cv: float, slowdown_pct: float, seed: int) -> CaseFields:
    """A paused 8-node job swept as ``--pause --suspects node0005``: a reference peer's NIC slow
    (``nic``) or the suspect slow on every GPU (``node``); or an 8- or 16-node job whose two
    reference peers' NICs are both slow (``refs8``, ``refs16``), or whose two reference peers
    are slow on every GPU (``gpurefs8``, ``gpurefs16``: further nodes of the job are probed)."""
    factor = 1 - slowdown_pct / 100
    size = 16 if kind.endswith("16") else 8
    if kind.startswith("gpurefs"):
        references = choose_references(_names(size), [PAUSE_SUSPECT], DEFAULT_REFERENCE_PEERS)
        faults = [{"kind": "slow_gpu", "host": host, "gpu": gpu, "factor": factor}
                  for host in references for gpu in range(GPUS)]
        expected = {("slow_node", host, None) for host in references}
    elif kind.startswith("refs"):
        references = choose_references(_names(size), [PAUSE_SUSPECT], DEFAULT_REFERENCE_PEERS)
        faults = [{"kind": "slow_nic", "host": host, "factor": factor} for host in references]
        expected = {("slow_nic", host, None) for host in references}
    elif kind == "nic":
        faults = [{"kind": "slow_nic", "host": SLOW_REFERENCE, "factor": factor}]
        expected = {("slow_nic", SLOW_REFERENCE, None)}
    else:
        faults = [{"kind": "slow_gpu", "host": PAUSE_SUSPECT, "gpu": gpu, "factor": factor} for gpu in range(GPUS)]
        expected = {("slow_node", PAUSE_SUSPECT, None)}
    sweep = SweepOptions(probe=ProbeOptions(names=PAUSE_PROBES, pause=True), fanout=64)
    return {"fleet": _fleet(size, cv, seed, faults), "expected": frozenset(expected),
            "exit_expected": 1 if slowdown_pct >= 8 else None,
            "request": (("focus", FocusRequest(PAUSE_SUSPECT)), ("sweep", sweep))}


def link_builders(scenario: str) -> list[tuple[str, Callable[[float, float, int], CaseFields]]]:
    """(label, build(cv, slowdown_pct, seed)) for each row of ``scenario`` (one of LINK_SCENARIOS)."""
    if scenario == "smalljobs":
        return [(f"small{nodes}n{nics} {'base' if baseline else 'line'}",
                 lambda cv, s, seed, n=nodes, k=nics, b=baseline: small_job_case(n, k, cv, s, seed, b))
                for nodes, nics in SMALL_JOBS for baseline in (False, True)]
    if scenario == "mixedrails":
        return [("mixedrails", mixed_rails_case)]
    return [(f"pauseref {kind}", lambda cv, s, seed, k=kind: pause_reference_case(k, cv, s, seed))
            for kind in ("nic", "node", "refs8", "refs16", "gpurefs8", "gpurefs16")]
