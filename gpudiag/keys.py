"""Baseline keys: which measurements may be compared with which.

Two results share a key only when they come from the same GPU model and memory size, the same
driver, CUDA and torch versions, the same probe and metric, and the same probe parameters
(dtype, matrix size, buffer size, direction, GPU pair). Different keys are never pooled.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# Probes whose figures are compared with peers and baselines; telemetry has rules of its own.
COMPARED_PROBES = ("gemm", "membw", "p2p", "pcie", "smclock")
# Facts that decide comparability. CPU results (no GPU) are keyed by CPU model instead.
GPU_FACTS = ("gpu_model", "gpu_memory_mib", "driver_version", "cuda_version", "torch_version")
CPU_FACTS = ("cpu_model", "torch_version")
# Parameters that describe how a figure was taken but not what it is comparable with.
IGNORED_PARAMS = frozenset()


def result_key(facts: Mapping[str, Any], result: Mapping[str, Any]) -> str | None:
    """The canonical key (a JSON string) of one result, or None when it is not compared
    (another probe, or not ok)."""
    if result.get("probe") not in COMPARED_PROBES or result.get("status") != "ok":
        return None
    on_cpu = result.get("device") == "cpu"
    chosen = CPU_FACTS if on_cpu else GPU_FACTS
    params = {k: v for k, v in sorted((result.get("params") or {}).items()) if k not in IGNORED_PARAMS}
    key = {"facts": {name: facts.get(name) for name in chosen}, "probe": result["probe"],
           "metric": result["metric"], "unit": result.get("unit"), "params": params}
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


def describe_key(key: str) -> str:
    """A short human form of a key: ``gemm.tflops bf16 8192³ · NVIDIA H100 80GB HBM3 · 550.54.15``."""
    data = json.loads(key)
    params = " ".join(f"{v}" for k, v in data["params"].items() if k not in ("n", "k"))
    facts = " · ".join(str(v) for v in data["facts"].values() if v is not None)
    return f"{data['probe']}.{data['metric']} {params} · {facts}".strip()
