"""The ``ecc`` rows of bench/detection.py: GPU memory errors planted in a simulated fleet (the
``ecc`` fault: gpudiag/sim/memerrors.py) found by a sweep from NVML's ECC and row-remapping
readings alone (gpudiag.analysis.rules).

Per trial, 16 nodes, three GPUs chosen by the seed: one with uncorrectable ECC errors since the
last reset and a remap pending (``ecc`` fail, reset_gpu), one with a row remap pending only
(``ecc`` warn, watch), one whose row remap failed (``ecc`` fail, drain). The slowdown does not
apply (memory errors leave the speed alone). Expected: the three ``ecc`` findings, exit 1, no
drain elsewhere.

``xid`` (the sweep run with the xid probe): per trial, 16 nodes, an Xid 79 with NVML's recovery
action "node reboot" pending on one GPU (``xid`` fail, reboot), an Xid 48 with "GPU reset" pending
on another (``xid`` fail, reset_gpu), and, on two more nodes, an Xid 94 already recovered (a
``warn`` watch) and 40 application Xid 13s (no finding): the three ``xid`` findings, exit 1, no
drain elsewhere.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from gpudiag.run.fanout import SweepOptions
from gpudiag.run.hostprobe import ProbeOptions

GPUS = 8
MEMORY_SCENARIOS = ("ecc", "xid")
XID_PROBES = ("facts", "telemetry", "xid", "gemm", "membw", "pcie", "p2p")
PLANTED = ({"uncorrectable": 2, "remapped_rows": 2, "pending": True}, {"remapped_rows": 1, "pending": True},
           {"uncorrectable": 1, "aggregate": 7, "remap_failed": True})

CaseFields = dict[str, Any]


def ecc_case(cv: float, slowdown_pct: float, seed: int, size: int = 16) -> CaseFields:
    """Three GPUs of three nodes with memory errors (PLANTED), chosen by ``seed``."""
    rng = random.Random(f"ecc:{cv}:{seed}")
    hosts = rng.sample([f"node{i:04d}" for i in range(1, size + 1)], len(PLANTED))
    faults = [{"kind": "ecc", "host": host, "gpu": rng.randrange(GPUS), **errors}
              for host, errors in zip(hosts, PLANTED, strict=True)]
    fleet = {"nodes": size, "name_format": "node{:04d}", "gpus_per_node": GPUS, "seed": seed,
             "noise": {"gemm_cv": cv, "membw_cv": cv, "link_cv": 2 * cv}, "faults": faults}
    return {"fleet": fleet, "expected": frozenset(("ecc", host, None) for host in hosts), "exit_expected": 1}


def xid_case(cv: float, slowdown_pct: float, seed: int, size: int = 16) -> CaseFields:
    """Two GPUs with a recovery action pending after an Xid, and two nodes with Xids needing none."""
    rng = random.Random(f"xid:{cv}:{seed}")
    pending, recovered, application = rng.sample([f"node{i:04d}" for i in range(1, size + 1)], 3)
    lost, reset = rng.sample(range(GPUS), 2)
    faults = [{"kind": "xid", "host": pending, "gpu": lost, "code": 79, "recovery_action": 2},
              {"kind": "xid", "host": pending, "gpu": reset, "code": 48, "recovery_action": 1},
              {"kind": "xid", "host": recovered, "gpu": rng.randrange(GPUS), "code": 94, "count": 2},
              {"kind": "xid", "host": application, "gpu": rng.randrange(GPUS), "code": 13, "count": 40}]
    fleet = {"nodes": size, "name_format": "node{:04d}", "gpus_per_node": GPUS, "seed": seed,
             "noise": {"gemm_cv": cv, "membw_cv": cv, "link_cv": 2 * cv}, "faults": faults}
    expected = frozenset(("xid", fault["host"], fault["gpu"]) for fault in faults[:3])
    sweep = SweepOptions(probe=ProbeOptions(names=XID_PROBES), fanout=64)
    return {"fleet": fleet, "expected": expected, "exit_expected": 1, "request": (("sweep", sweep),)}


def memory_builders(scenario: str) -> list[tuple[str, Callable[[float, float, int], CaseFields]]]:
    """(label, build(cv, slowdown_pct, seed)) for each row of ``scenario`` (one of MEMORY_SCENARIOS)."""
    return [("ecc", ecc_case)] if scenario == "ecc" else [("xid", xid_case)]
