"""The ``ecc`` rows of bench/detection.py: GPU memory errors planted in a simulated fleet (the
``ecc`` fault: gpudiag/sim/memerrors.py) found by a sweep from NVML's ECC and row-remapping
readings alone (gpudiag.rules).

Per trial, 16 nodes, three GPUs chosen by the seed: one with uncorrectable ECC errors since the
last reset and a remap pending (``ecc`` fail, reset_gpu), one with a row remap pending only
(``ecc`` warn, watch), one whose row remap failed (``ecc`` fail, drain). The slowdown does not
apply (memory errors leave the speed alone). Expected: the three ``ecc`` findings, exit 1, no
drain elsewhere.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

GPUS = 8
MEMORY_SCENARIOS = ("ecc",)
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


def memory_builders(scenario: str) -> list[tuple[str, Callable[[float, float, int], CaseFields]]]:
    """(label, build(cv, slowdown_pct, seed)) for each row of ``scenario`` (one of MEMORY_SCENARIOS)."""
    return [("ecc", ecc_case)]
