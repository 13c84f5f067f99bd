"""Baseline keys: which measurements may be compared with which.

Two results share a key only when they come from the same GPU model and memory size, the same
driver, CUDA and torch versions, the same probe and metric, and the same probe parameters
(dtype, matrix size, buffer size, direction, GPU pair). Different keys are never pooled.

A link figure (a pair test between two nodes) is keyed by its group instead: backend, rail and the
port's line rate (``link_key``). Both kinds of key are canonical JSON objects of the same shape
(facts, probe, metric, unit, params), so one baseline file holds both.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

from ..records import ProbeResult
from ..schema.jsonout import dumps as strict_dumps

# Probes whose figures are compared with peers and baselines; telemetry has rules of its own.
COMPARED_PROBES = frozenset({"gemm", "membw", "p2p", "pcie", "smclock"})
# Facts that decide comparability. CPU results (no GPU) are keyed by CPU model instead.
GPU_FACTS = ("gpu_model", "gpu_memory_mib", "driver_version", "cuda_version", "torch_version")
CPU_FACTS = ("cpu_model", "torch_version")
# The facts that are software: keys that differ only in these measure the same hardware.
SOFTWARE_FACTS = ("driver_version", "cuda_version", "torch_version")
SOFTWARE_NAMES = {"driver_version": "driver", "cuda_version": "CUDA", "torch_version": "torch"}
# The probe, metric and unit of a link key: the sweep document's ``links[]`` figures.
LINK_PROBE = "link"
LINK_METRIC = "gbps"
LINK_UNIT = "Gbit/s"


def result_key(facts: Mapping[str, Any], result: ProbeResult) -> str | None:
    """The canonical key (a JSON string) of one result, or None when it is not compared
    (another probe, or not ok)."""
    return host_keys(facts)(result)


def host_keys(facts: Mapping[str, Any]) -> Callable[[ProbeResult], str | None]:
    """``result_key`` for the results of one host, with its facts read once. A host whose facts
    do not name its GPU model (or, for CPU results, its CPU model) has no keys: without facts,
    every model and driver would pool into one key."""
    gpu_facts = (GPU_FACTS, tuple(facts.get(name) for name in GPU_FACTS))
    cpu_facts = (CPU_FACTS, tuple(facts.get(name) for name in CPU_FACTS))

    def key(result: ProbeResult) -> str | None:
        if result.probe not in COMPARED_PROBES or result.status != "ok":
            return None
        chosen, values = cpu_facts if result.device == "cpu" else gpu_facts
        if values[0] is None:
            return None
        # In the order the probe wrote them: the encoding sorts keys, so any order gives one key.
        params = tuple(result.params.items())
        parts = (chosen, values, result.probe, result.metric, result.unit, params)
        try:
            return _encoded_key(*parts)
        except TypeError:  # a parameter value that is a list or an object: not hashable, encode it anew
            return _encoded_key.__wrapped__(*parts)

    return key


# A fleet has few distinct keys and many results: encode each key once (a 10,000-node sweep
# would otherwise spend most of its analysis in json.dumps).
@functools.lru_cache(maxsize=65536)
def _encoded_key(chosen: tuple[str, ...], facts: tuple[Any, ...], probe: str, metric: str, unit: str | None,
                 params: tuple[tuple[str, Any], ...]) -> str:
    key = {"facts": dict(zip(chosen, facts, strict=True)), "probe": probe, "metric": metric, "unit": unit,
           "params": dict(params)}
    return strict_dumps(key, sort_keys=True, separators=(",", ":"))


def link_key(backend: str, rail: int | None, line_rate_gbps: float | None) -> str:
    """The canonical key (a JSON string) of a link group: ``backend`` (tcp, nccl, perftest),
    ``rail`` (None: the backend has no rails) and the port's line rate in Gb/s (None: unknown).
    No facts: links of one backend, rail and line rate compare whatever the nodes' GPUs are.
    The line rate is written as a float, so 100 and 100.0 give one key."""
    rate = None if line_rate_gbps is None else float(line_rate_gbps)
    key = {"facts": {}, "probe": LINK_PROBE, "metric": LINK_METRIC, "unit": LINK_UNIT,
           "params": {"backend": backend, "rail": rail, "line_rate_gbps": rate}}
    return strict_dumps(key, sort_keys=True, separators=(",", ":"))


def describe_key(key: str) -> str:
    """A short human form of a key: ``gemm.tflops bf16 8192³ · NVIDIA H100 80GB HBM3 · 550.54.15``,
    or for a link group ``link nccl rail 3 · line rate 400 Gbit/s``."""
    data = json.loads(key)
    if data.get("probe") == LINK_PROBE:
        return _describe_link(data.get("params") or {})
    params = " ".join(f"{v}" for k, v in data["params"].items() if k not in ("n", "k"))
    facts = " · ".join(str(v) for v in data["facts"].values() if v is not None)
    return f"{data['probe']}.{data['metric']} {params} · {facts}".strip()


def _describe_link(params: dict[str, Any]) -> str:
    rail, rate = params.get("rail"), params.get("line_rate_gbps")
    where = f"link {params.get('backend')}" + ("" if rail is None else f" rail {rail}")
    return f"{where} · line rate {'unknown' if rate is None else f'{rate:g} {LINK_UNIT}'}"


@functools.lru_cache(maxsize=4096)
def hardware_key(key: str) -> str:
    """``key`` without its software facts (driver, CUDA, torch versions): two keys with one
    hardware key are the same GPU model, probe and parameters under other software, so their
    figures may be compared with each other (never pooled)."""
    data = json.loads(key)
    facts = {name: value for name, value in (data.get("facts") or {}).items() if name not in SOFTWARE_FACTS}
    return strict_dumps({**data, "facts": facts}, sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=4096)
def key_model(key: str) -> str | None:
    """The GPU model of ``key`` (its CPU model for a CPU result; None for a link group, or a key
    that names neither)."""
    facts = json.loads(key).get("facts") or {}
    model = facts.get("gpu_model") or facts.get("cpu_model")
    return str(model) if model else None


# The parameters that name one GPU pair of a P2P key: keys differing only in them are one
# metric measured between different GPUs of the same hosts.
PAIR_PARAMS = ("src", "dst")


@functools.lru_cache(maxsize=4096)
def pairless_key(key: str) -> str | None:
    """``key`` without the GPU pair it names (``PAIR_PARAMS``), or None for a key that names none."""
    data = json.loads(key)
    params = data.get("params") or {}
    if not all(name in params for name in PAIR_PARAMS):
        return None
    rest = {name: value for name, value in params.items() if name not in PAIR_PARAMS}
    return strict_dumps({**data, "params": rest}, sort_keys=True, separators=(",", ":"))


def software_change(old_key: str, new_key: str) -> str:
    """The software two keys of one hardware differ in, in plain words: ``driver 550.54.15 ->
    560.35.03`` (each differing version, old first); empty when they do not differ."""
    old, new = (json.loads(key).get("facts") or {} for key in (old_key, new_key))
    changes = [f"{SOFTWARE_NAMES[name]} {old.get(name)} -> {new.get(name)}" for name in SOFTWARE_FACTS
               if old.get(name) != new.get(name)]
    return ", ".join(changes)
