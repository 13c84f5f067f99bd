"""Detection thresholds: data in a schema-checked JSON file with units, never code.

Every entry is ``{"value": number, "unit": "..."}`` with the unit this module expects; an
unknown key, a wrong unit or a value of the wrong kind is an error (exit 2), not ignored.
A user's file (``--thresholds FILE``) may give any subset; the rest come from the defaults
shipped in ``gpudiag/data/thresholds.json``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, fields
from importlib import resources
from typing import Any

from ..errors import InputError, read_json_file

SCHEMA = "gpudiag.thresholds/1"
# JSON key -> (dataclass field, unit, whether it must be a whole number)
ENTRIES: dict[str, tuple[str, str, bool]] = {
    "robust_z": ("robust_z", "sigma", False),
    "deficit_warn": ("deficit_warn_pct", "percent", False),
    "deficit_fail": ("deficit_fail_pct", "percent", False),
    "retest_deficit": ("retest_deficit_pct", "percent", False),
    "retest_max_runs": ("retest_max_runs", "count", True),
    "min_peers": ("min_peers", "count", True),
    "small_fleet_min_hosts": ("small_fleet_min_hosts", "count", True),
    "mad_floor": ("mad_floor_pct", "percent", False),
    "slow_node_share": ("slow_node_share_pct", "percent", False),
    "sku_spread": ("sku_spread_pct", "percent", False),
    "sibling_min_gpus": ("sibling_min_gpus", "count", True),
    "sample_cv_cap": ("sample_cv_cap_pct", "percent", False),
    "fleet_shift_share": ("fleet_shift_share_pct", "percent", False),
    "throttle_share": ("throttle_share_pct", "percent", False),
    "host_load_per_cpu": ("host_load_per_cpu", "ratio", False),
    "host_cpus_usable": ("host_cpus_usable_pct", "percent", False),
    "host_memory_available": ("host_memory_available_pct", "percent", False),
    "link_deficit": ("link_deficit_pct", "percent", False),
    "link_robust_z": ("link_robust_z", "sigma", False),
    "link_line_rate_efficiency": ("link_line_rate_efficiency_pct", "percent", False),
    "link_mad_floor": ("link_mad_floor_pct", "percent", False),
    "link_min_hosts": ("link_min_hosts", "count", True),
    "link_confirm_partners": ("link_confirm_partners", "count", True),
    "pcie_replay_floor": ("pcie_replay_floor", "count", True),
    "nvlink_crc_floor": ("nvlink_crc_floor", "count", True),
    "nvlink_replay_floor": ("nvlink_replay_floor", "count", True),
    "nvlink_recovery_floor": ("nvlink_recovery_floor", "count", True),
    "counter_peer_ratio": ("counter_peer_ratio", "ratio", False),
    "port_error_floor": ("port_error_floor", "count", True),
    "port_link_down_floor": ("port_link_down_floor", "count", True),
    "port_discard_floor": ("port_discard_floor", "count", True),
    "history_degradation": ("history_degradation_pct", "percent", False),
    "history_min_sweeps": ("history_min_sweeps", "count", True),
    "history_slope_z": ("history_slope_z", "sigma", False),
}


@dataclass(frozen=True)
class Thresholds:
    """A result is a suspect when, against any of its references, its robust z is at or below
    ``robust_z`` (sigma, negative) AND it falls ``deficit_warn_pct`` or more below; a confirmed
    ``deficit_fail_pct`` makes it a fail. A re-test confirms it when the mean of both runs still
    falls ``retest_deficit_pct`` below. On a key too noisy for one run to show a
    ``deficit_fail_pct`` deficit, up to ``retest_max_runs`` re-test runs judge a GPU, and their
    mean alone confirms it (gpudiag.analysis.noisy). References: the fleet's healthy level when ``min_peers``
    hosts or more have the key (a sweep of ``small_fleet_min_hosts`` hosts or more but fewer than
    ``min_peers`` is its own fleet: small_fleet_thresholds), a stored baseline, and the SKU figure, whose spread is
    ``sku_spread_pct`` of it (healthy GPUs scatter around a published figure more than around
    their own fleet). The spread is the MAD, at least ``mad_floor_pct`` of the reference. A node
    with ``sibling_min_gpus`` GPUs or more of a key judges each against its siblings too (their
    median; their MAD, at least the fleet's or baseline's spread). Every spread judging a result
    is at least its host's median sample CV of that probe and metric, up to ``sample_cv_cap_pct``
    (beyond it, noise no longer hides a deficit).
    ``slow_node_share_pct`` of a host's GPUs slow on one metric (or of a GPU's NVLink partners)
    makes the host (the GPU) the culprit. ``fleet_shift_share_pct`` of a metric's hosts slow is
    a fleet-wide shift. A clocks-event reason counts when active in ``throttle_share_pct`` of the
    loaded NVML samples. A host is starved when its 1-minute load exceeds ``host_load_per_cpu``
    per usable CPU, fewer than ``host_cpus_usable_pct`` of its CPUs are usable, or less than
    ``host_memory_available_pct`` of its memory is available. The ``link_*`` figures judge node
    pairs (gpudiag.links.attribution.LinkThresholds). An error counter (a GPU's PCIe replays, an
    NVLink's CRC, replay or recovery errors) is a warning when it reaches its ``*_floor`` (a
    count) AND ``counter_peer_ratio`` times its peers' median (gpudiag.analysis.counters); so is
    a NIC port's error counter against ``port_error_floor``, ``port_link_down_floor`` (link downs
    and error recoveries) or ``port_discard_floor`` (transmit discards: gpudiag.analysis.ports).
    ``gpudiag history`` calls a host's figure (the median of its GPUs, or one GPU's) a slow
    degradation when, over at least ``history_min_sweeps`` of its sweeps since its last repair,
    a robust line through them falls ``history_degradation_pct`` or more, its slope at least
    ``history_slope_z`` standard errors below flat against the sweeps' scatter (gpudiag.store.trend)."""

    robust_z: float
    deficit_warn_pct: float
    deficit_fail_pct: float
    retest_deficit_pct: float
    retest_max_runs: int
    min_peers: int
    small_fleet_min_hosts: int
    mad_floor_pct: float
    slow_node_share_pct: float
    sku_spread_pct: float
    sibling_min_gpus: int
    sample_cv_cap_pct: float
    fleet_shift_share_pct: float
    throttle_share_pct: float
    host_load_per_cpu: float
    host_cpus_usable_pct: float
    host_memory_available_pct: float
    link_deficit_pct: float
    link_robust_z: float
    link_line_rate_efficiency_pct: float
    link_mad_floor_pct: float
    link_min_hosts: int
    link_confirm_partners: int
    pcie_replay_floor: int
    nvlink_crc_floor: int
    nvlink_replay_floor: int
    nvlink_recovery_floor: int
    counter_peer_ratio: float
    port_error_floor: int
    port_link_down_floor: int
    port_discard_floor: int
    history_degradation_pct: float
    history_min_sweeps: int
    history_slope_z: float


def small_fleet_thresholds(thresholds: Thresholds, hosts: int) -> Thresholds:
    """``thresholds`` for a sweep of ``hosts`` hosts: from ``small_fleet_min_hosts`` to fewer
    than ``min_peers`` (a small job's pre-flight, a sweep of a few nodes), its hosts are all the
    peers there are, so their live level judges them (``min_peers`` becomes their count). Without
    it a node 8 % slow on every GPU in a 4-node job was judged by the SKU figure alone, whose 3 %
    spread hides a deficit under 9 %, and the job passed. Such a key's level is the median of its
    hosts' medians (gpudiag.analysis.reference.small_fleet_reference), and the re-test confirms
    as anywhere. Unchanged for fewer hosts (of two, neither can say which is slow) and for a
    fleet of ``min_peers`` or more."""
    if thresholds.small_fleet_min_hosts <= hosts < thresholds.min_peers:
        return dataclasses.replace(thresholds, min_peers=hosts)
    return thresholds


def default_thresholds() -> Thresholds:
    return _from_mapping(_defaults(), "gpudiag/data/thresholds.json")


def load_thresholds(path: str | None) -> Thresholds:
    """The defaults, overridden by ``path`` when given. Raises InputError naming file and key."""
    if path is None:
        return default_thresholds()
    data = read_json_file(path, "the thresholds file")
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object of thresholds")
    merged = {**_defaults(), **data}
    return _from_mapping(merged, path)


def _defaults() -> dict[str, Any]:
    text = resources.files("gpudiag").joinpath("data/thresholds.json").read_text(encoding="utf-8")
    return json.loads(text)


def _from_mapping(data: dict[str, Any], source: str) -> Thresholds:
    if data.get("schema") != SCHEMA:
        raise InputError(f"{source}: schema: expected {SCHEMA!r}, got {data.get('schema')!r}")
    values: dict[str, Any] = {}
    for key, entry in data.items():
        if key == "schema":
            continue
        if key not in ENTRIES:
            raise InputError(f"{source}: {key}: unknown threshold; known: {', '.join(sorted(ENTRIES))}")
        name, unit, whole = ENTRIES[key]
        values[name] = _value(entry, unit, whole, f"{source}: {key}")
    missing = [f.name for f in fields(Thresholds) if f.name not in values]
    if missing:
        raise InputError(f"{source}: missing thresholds: {', '.join(missing)}")
    thresholds = Thresholds(**values)
    if thresholds.deficit_fail_pct < thresholds.deficit_warn_pct:
        raise InputError(f"{source}: deficit_fail must be at least deficit_warn")
    if thresholds.robust_z >= 0 or thresholds.link_robust_z >= 0:
        raise InputError(f"{source}: robust_z and link_robust_z must be negative (sigma below the reference)")
    if thresholds.link_min_hosts < 2 or thresholds.link_confirm_partners < 2:
        raise InputError(f"{source}: link_min_hosts and link_confirm_partners must be at least 2")
    if thresholds.small_fleet_min_hosts < 3:
        raise InputError(f"{source}: small_fleet_min_hosts must be at least 3 (of two hosts, neither can say which "
                         "is slow)")
    if thresholds.sibling_min_gpus < 3:
        raise InputError(f"{source}: sibling_min_gpus must be at least 3 (of two GPUs, neither can say which "
                         "is slow)")
    if thresholds.counter_peer_ratio < 1:
        raise InputError(f"{source}: counter_peer_ratio must be at least 1 (a count at its peers' median is "
                         "never far above it)")
    if thresholds.history_degradation_pct <= 0 or thresholds.history_min_sweeps < 3:
        raise InputError(f"{source}: history_degradation must be above 0 percent and history_min_sweeps at least 3 "
                         "(a first sweep, the one before the latest, and the latest)")
    if thresholds.history_slope_z <= 0:
        raise InputError(f"{source}: history_slope_z must be above 0 (standard errors a real slope falls below flat)")
    return thresholds


def _value(entry: Any, unit: str, whole: bool, where: str) -> float | int:
    if not isinstance(entry, dict) or set(entry) != {"value", "unit"}:
        raise InputError(f'{where}: expected {{"value": number, "unit": "{unit}"}}')
    if entry["unit"] != unit:
        raise InputError(f"{where}: unit must be {unit!r}, not {entry['unit']!r}")
    value = entry["value"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{where}: value must be a finite number, not {value!r}")
    if whole and (not float(value).is_integer() or value < 1):
        raise InputError(f"{where}: value must be a whole number of at least 1, not {value!r}")
    if unit == "percent" and not 0 <= value <= 100:
        raise InputError(f"{where}: value must be between 0 and 100 percent, not {value!r}")
    if unit == "ratio" and value <= 0:
        raise InputError(f"{where}: value must be a positive ratio, not {value!r}")
    return int(value) if whole else float(value)
