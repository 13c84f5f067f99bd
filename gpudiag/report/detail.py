"""How much of each host the sweep document carries (``--json-detail``).

``full``: every record as the node printed it (about 160 KB for an 8-GPU node). ``compact``
(the default): every measured figure, kept under 50 KB a node —

- measured records (GEMM, memory and PCIe bandwidth, SM clocks, errors and skips of any probe)
  stay records; long per-SM arrays in their ``details`` (more than LONG_LIST items) are left out,
  and named in ``details_left_out``, except for the GPUs a finding names;
- the P2P pair records of a node become matrices (``p2p``: one per metric, direction and buffer
  size, rows the source device, columns the destination; a pair not measured is null), except
  that a pair that errored or was skipped stays a record;
- the NVML telemetry readings become one table per GPU (``telemetry``: metric → value, and the
  details of readings that have any, such as the GPU's identity; a list of like dicts, such as
  its NVLinks, as ``{"columns", "rows"}``), except that a reading that errored stays a record;
- the NIC port records become one table (``nic_ports``: a row per port, counters only where
  not 0), except that a port that errored stays a record;
- the facts name each GPU's UUID once: ``gpu_uuids`` is left out where ``gpus`` holds them all;
- floats keep SIGNIFICANT digits.

Nothing is judged from the document: the analysis reads the full records in memory.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence, Set
from typing import Any

from ..records import device_index
from ..schema.jsonout import dumps as strict_dumps

FULL, COMPACT = "full", "compact"
DETAILS = (COMPACT, FULL)
# A list in a record's details longer than this is a per-SM (or per-sample) array.
LONG_LIST = 16
# Significant digits of a float in the compact form.
SIGNIFICANT = 6
# Details that say only where a reading came from: not worth a copy per reading.
_PLAIN_DETAILS = ({}, {"source": "nvml"}, {"source": "nvidia-smi"})
ALL_GPUS = -1
NIC_PORT = "nic_port"


def flagged_gpus(findings: Iterable[Mapping[str, Any]]) -> dict[str, frozenset[int]]:
    """The GPU indexes each host's findings name; ALL_GPUS for a finding about the whole host.
    Hosts flagged alike share one set (a fleet of unreachable hosts: one for all)."""
    flagged: dict[str, frozenset[int]] = {}
    alike: dict[frozenset[int], frozenset[int]] = {}
    for finding in findings:
        host, gpu = finding.get("host"), finding.get("gpu")
        if isinstance(host, str):
            marks = flagged.get(host, frozenset()) | {gpu if isinstance(gpu, int) else ALL_GPUS}
            flagged[host] = alike.setdefault(marks, marks)
    return flagged


def compact_host(entry: Mapping[str, Any], flagged: Set[int]) -> dict[str, Any]:
    """The compact form of one host's document entry (see the module); ``flagged`` its GPUs that
    a finding names (ALL_GPUS: every one)."""
    results, p2p, telemetry, ports = [], [], [], []
    for record in entry.get("results") or ():
        if record.get("status") == "ok" and record.get("metric") == NIC_PORT:
            ports.append(record)
        elif record.get("status") == "ok" and record.get("probe") == "p2p":
            p2p.append(record)
        elif record.get("status") == "ok" and record.get("probe") == "telemetry":
            telemetry.append(record)
        else:
            results.append(_trimmed(record, flagged))
    compact = {name: value for name, value in entry.items() if name != "results"}
    if isinstance(entry.get("facts"), Mapping):
        compact["facts"] = compact_facts(entry["facts"])
    compact["results"] = results
    if p2p:
        compact["p2p"] = p2p_matrices(p2p)
    if telemetry:
        compact["telemetry"] = telemetry_tables(telemetry)
    if ports:
        compact["nic_ports"] = port_table(ports)
    return compact


def compact_facts(facts: Mapping[str, Any]) -> Mapping[str, Any]:
    """The facts, less ``gpu_uuids`` where ``gpus`` (each GPU's CUDA and NVML index, UUID and bus
    id) names every one of them: each UUID once."""
    gpus = facts.get("gpus")
    uuids = facts.get("gpu_uuids")
    if not isinstance(gpus, list) or not isinstance(uuids, list):
        return facts
    mapped = {gpu.get("gpu_uuid") for gpu in gpus if isinstance(gpu, Mapping)}
    if not set(uuids) <= mapped:
        return facts
    return {name: value for name, value in facts.items() if name != "gpu_uuids"}


def port_table(records: Sequence[Mapping[str, Any]]) -> Any:
    """The NIC port records as one ``{"columns", "rows"}`` table: the device, the rate, the
    details without the fields that are null, and of the counters those that are not 0."""
    rows = []
    for record in records:
        details = {name: value for name, value in (record.get("details") or {}).items() if value is not None}
        details["counters"] = {name: count for name, count in (details.get("counters") or {}).items() if count}
        rows.append({"device": record.get("device"), "rate_gbps": record.get("value"), **details})
    return columns(rows)


def _trimmed(record: Mapping[str, Any], flagged: Set[int]) -> Mapping[str, Any]:
    details = record.get("details") or {}
    long = sorted(name for name, value in details.items() if isinstance(value, list) and len(value) > LONG_LIST)
    if not long or ALL_GPUS in flagged or device_index(record.get("device")) in flagged:
        return rounded(record)
    kept = {name: value for name, value in details.items() if name not in long}
    return rounded({**record, "details": {**kept, "details_left_out": long}})


def rounded(value: Any) -> Any:
    """``value`` with every float cut to SIGNIFICANT digits (a measurement's noise is far larger)."""
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT}g}")
    if isinstance(value, Mapping):
        return {name: rounded(item) for name, item in value.items()}
    if isinstance(value, list):
        return [rounded(item) for item in value]
    return value


def columns(rows: Sequence[Any]) -> Any:
    """A list of dicts with the same keys as ``{"columns": [...], "rows": [[...], ...]}`` (the
    keys written once, e.g. NVML's 18 NVLinks of a GPU); anything else unchanged."""
    if len(rows) < 2 or not all(isinstance(row, Mapping) for row in rows):
        return rows
    names = list(rows[0])
    if any(list(row) != names for row in rows):
        return rows
    return {"columns": names, "rows": [[row[name] for name in names] for row in rows]}


def p2p_matrices(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One matrix per metric, direction and buffer size: ``devices`` (the order of rows and
    columns), ``values`` (row: source, column: destination; null where not measured), ``unit``."""
    groups: dict[tuple[str, str, Any], list[Mapping[str, Any]]] = defaultdict(list)
    for record in records:
        params = record.get("params") or {}
        groups[(str(record.get("metric")), str(params.get("direction")), params.get("buffer_mib"))].append(record)
    matrices = []
    for (metric, direction, buffer_mib), group in groups.items():
        devices = sorted({str(side) for r in group for side in (r["params"].get("src"), r["params"].get("dst"))},
                         key=lambda device: (device_index(device) is None, device_index(device) or 0, device))
        where = {device: index for index, device in enumerate(devices)}
        values: list[list[float | None]] = [[None] * len(devices) for _ in devices]
        for r in group:
            values[where[str(r["params"].get("src"))]][where[str(r["params"].get("dst"))]] = rounded(r.get("value"))
        matrices.append({"metric": metric, "unit": group[0].get("unit"), "direction": direction,
                         "buffer_mib": buffer_mib, "devices": devices, "values": values})
    return matrices


def telemetry_tables(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per device (``gpu:0``…): its UUID, ``readings`` (metric → value) and ``details`` of the
    readings that carry more than their source."""
    tables: dict[str, dict[str, Any]] = {}
    for record in records:
        table = tables.setdefault(str(record.get("device")), {"gpu_uuid": record.get("gpu_uuid"), "readings": {}})
        params = record.get("params") or {}
        metric = str(record.get("metric")) + (f" {strict_dumps(params, sort_keys=True)}" if params else "")
        table["readings"][metric] = record.get("value")
        details = record.get("details") or {}
        if details not in _PLAIN_DETAILS:
            table.setdefault("details", {})[metric] = {
                name: columns(value) if isinstance(value, list) else value for name, value in details.items()}
    return tables
