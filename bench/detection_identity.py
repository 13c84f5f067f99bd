"""The ``lostslow`` and ``mixedboards`` rows of bench/detection.py: GPUs named by NVML's index, and
GPU counts compared within a platform (gpudiag.analysis.identity, gpudiag.analysis.coverage).

- ``lostslow``: per trial, two of 16 nodes (chosen by the seed) each lose one GPU (``gpu_lost``:
  CUDA renumbers the GPUs after it) and have a GPU after the lost one slowed by the slowdown.
  Expected: ``missing_gpu`` on each, and ``slow_gpu`` at the slow GPU's NVML index (the CUDA
  index is one lower: a finding that names it is scored a false positive and a miss); exit 1.
- ``mixedboards``: 16 nodes, six of them 4-GPU boards of the same GPU model (another platform).
  One 8-GPU node has a GPU gone from the bus (``gpu_missing``: PCI and NVML count 7), one 4-GPU
  node too (3), and one GPU of another 4-GPU node is slowed by the slowdown. Expected: the two
  ``missing_gpu``, the ``slow_gpu``, and nothing on the healthy 4-GPU boards; exit 1.
- ``gone1n``: a 1-node job swept healthy first (stored), then with a GPU gone from the bus and a
  slow GPU after it: no peer, and its PCI bus and NVML count 7 too; its own previous sweep on the
  same board counted 8. Expected: ``missing_gpu`` and the ``slow_gpu`` at NVML's index now; exit 1.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

GPUS = 8
SMALL_BOARD_GPUS = 4
SMALL_BOARDS = 6
IDENTITY_SCENARIOS = ("lostslow", "mixedboards", "gone1n")

CaseFields = dict[str, Any]


def _names(size: int) -> list[str]:
    return [f"node{i:04d}" for i in range(1, size + 1)]


def _fleet(size: int, cv: float, seed: int, faults: list[dict], **fields: Any) -> dict:
    return {"nodes": size, "name_format": "node{:04d}", "gpus_per_node": GPUS, "seed": seed,
            "noise": {"gemm_cv": cv, "membw_cv": cv, "link_cv": 2 * cv}, "faults": faults, **fields}


def lost_slow_case(cv: float, slowdown_pct: float, seed: int, size: int = 16) -> CaseFields:
    """Two nodes, each with a lost GPU and a slow GPU after it (module docstring)."""
    rng = random.Random(f"lostslow:{cv}:{slowdown_pct}:{seed}")
    faults, expected = [], set()
    for host in rng.sample(_names(size), 2):
        lost = rng.randrange(GPUS - 1)
        slow = rng.randrange(lost + 1, GPUS)
        faults += [{"kind": "gpu_lost", "host": host, "gpu": lost},
                   {"kind": "slow_gpu", "host": host, "gpu": slow, "factor": 1 - slowdown_pct / 100}]
        expected |= {("missing_gpu", host, None), ("slow_gpu", host, slow)}
    return {"fleet": _fleet(size, cv, seed, faults), "expected": frozenset(expected), "exit_expected": 1}


def mixed_boards_case(cv: float, slowdown_pct: float, seed: int, size: int = 16) -> CaseFields:
    """Six 4-GPU boards among 8-GPU ones; a GPU gone from one board of each, a slow GPU on a 4-GPU board."""
    rng = random.Random(f"mixedboards:{cv}:{slowdown_pct}:{seed}")
    names = _names(size)
    small = sorted(rng.sample(names, SMALL_BOARDS))
    large = [name for name in names if name not in small]
    gone_large, gone_small = rng.choice(large), small[0]
    slow_host, slow_gpu = small[1], rng.randrange(SMALL_BOARD_GPUS)
    faults = [{"kind": "gpu_missing", "host": gone_large, "gpu": rng.randrange(GPUS)},
              {"kind": "gpu_missing", "host": gone_small, "gpu": rng.randrange(SMALL_BOARD_GPUS)},
              {"kind": "slow_gpu", "host": slow_host, "gpu": slow_gpu, "factor": 1 - slowdown_pct / 100}]
    expected = {("missing_gpu", gone_large, None), ("missing_gpu", gone_small, None),
                ("slow_gpu", slow_host, slow_gpu)}
    fleet = _fleet(size, cv, seed, faults, overrides=[{"hosts": small, "gpus_per_node": SMALL_BOARD_GPUS}])
    return {"fleet": fleet, "expected": frozenset(expected), "exit_expected": 1}


def gone_in_one_node_case(cv: float, slowdown_pct: float, seed: int) -> CaseFields:
    """A 1-node job swept once healthy (into the store), then with a GPU gone from the bus and a
    slow GPU after it: NVML, PCI and torch all count 7, no peer says 8, its own previous sweep does."""
    rng = random.Random(f"gone1n:{cv}:{slowdown_pct}:{seed}")
    gone = rng.randrange(GPUS - 1)
    slow = rng.randrange(gone + 1, GPUS)
    faults = [{"kind": "gpu_missing", "host": "node0001", "gpu": gone},
              {"kind": "slow_gpu", "host": "node0001", "gpu": slow, "factor": 1 - slowdown_pct / 100}]
    # NVML numbers the GPUs left: the slow one is NVML's slow - 1 now (what nvidia-smi -i takes)
    expected = {("missing_gpu", "node0001", None), ("slow_gpu", "node0001", slow - 1)}
    return {"fleet": _fleet(1, cv, seed, faults), "expected": frozenset(expected), "baseline": True,
            "baseline_fleet": _fleet(1, cv, seed + 1000, []), "exit_expected": 1}


def identity_builders(scenario: str) -> list[tuple[str, Callable[[float, float, int], CaseFields]]]:
    """(label, build(cv, slowdown_pct, seed)) for ``scenario`` (one of IDENTITY_SCENARIOS)."""
    builds = {"lostslow": lost_slow_case, "mixedboards": mixed_boards_case, "gone1n": gone_in_one_node_case}
    return [(scenario, builds[scenario])]
