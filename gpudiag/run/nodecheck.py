"""A node's records checked against its own facts, before any reference sees them.

What one node prints may change only its own verdict. After each record passed its schema
(gpudiag.schema.recordcheck), the node's records as a whole:

1. one record per measurement (probe, device, metric, params): copies of a measurement are
   never silently kept — where one of them is ``ok``, all are replaced by one ``error`` record
   naming the duplication (which copy would be the truth?). The bundle never repeats an ok
   measurement; it does repeat a failure (a GPU whose PCIe copies fail prints one error record
   per direction, without the direction), and records that are not ok are kept as they are:
   they measured nothing, and each says why (tests/unit/controller/analysis/test_node_checks.py runs every probe of
   the simulator, with faults and in pause mode, to hold the bundle to that);
2. records of GPUs the node does not have — ``cuda:N`` at or past torch's count, ``gpu:N`` at or
   past NVML's (else the PCI bus's, else torch's), a P2P pair with such an end — are dropped, and
   each probe that printed any gets one ``error`` record on the host naming them (``unchecked``);
3. an ``ok`` value above the physical ceiling of its measurement (gpudiag.run.bounds: the
   SKU figure of the node's GPU model times a margin, or a generic ceiling) is an ``error``
   record in its place: that GPU's measurement is unchecked, and no reference sees it;
4. a per-GPU probe (gemm, membw, pcie, smclock, telemetry) that printed records for some of the
   node's GPUs but not for others: each GPU (and each measurement of the probe, e.g. both PCIe
   directions) it left out gets an ``error`` record — never a silent pass.

5. more NIC port records (telemetry ``nic_port``) than any node has ports (MAX_NIC_PORTS) are
   all replaced by one ``error`` record on device ``nic``: no port of the node is judged, and it
   cannot crowd the peer groups of the others' ports.

Without an ok facts record (a re-test that did not ask for facts, or duplicated facts) there are
no counts to check 2 and 4 against, and the ceilings are the generic ones.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..records import ProbeResult, device_index
from ..schema.tables import METRICS
from .bounds import ceiling

# Per-GPU probes and the device prefix they name GPUs by: CUDA's index, or NVML's.
PER_GPU_PROBES = {"gemm": "cuda", "membw": "cuda", "pcie": "cuda", "smclock": "cuda", "telemetry": "gpu"}
HOST = "host"
# NIC port records a node may print (probes/nicports.py reads at most 128).
MAX_NIC_PORTS = 256
NIC_PORT = ("telemetry", "nic_port")
# Devices named in a message before the rest are only counted.
DEVICES_NAMED = 6


@dataclass(frozen=True)
class GpuCounts:
    """How many GPUs the node has, by the name its records give them: ``cuda`` (torch's count:
    ``cuda:N`` needs N below it) and ``gpu`` (NVML's count, else the PCI bus's, else torch's:
    ``gpu:N``); None where the facts do not say."""

    cuda: int | None
    gpu: int | None

    def limit(self, prefix: str) -> int | None:
        return self.cuda if prefix == "cuda" else self.gpu if prefix == "gpu" else None

    def describe(self, prefix: str) -> str:
        return "torch's count" if prefix == "cuda" else "NVML's count"


def check_host_records(results: Sequence[ProbeResult], source: str) -> list[ProbeResult]:
    """``results`` (one node's records, each schema-checked) checked as a whole against the
    node's facts (see the module docstring); ``source`` names the node in the reasons."""
    kept = bounded_nic_ports(one_per_measurement(results, source), source)
    facts = facts_of(kept)
    counts = gpu_counts(facts) if facts is not None else None
    absent: list[ProbeResult] = []
    if counts is not None:
        kept, absent = drop_absent_gpus(kept, counts, source)
    model = facts.get("gpu_model") if facts is not None else None
    kept = within_ceilings(kept, model if isinstance(model, str) else None, source)
    if counts is not None:
        kept += unmeasured_gpus(kept, counts, source)
    return kept + absent


def facts_of(results: Iterable[ProbeResult]) -> Mapping[str, Any] | None:
    """The details of the node's one ok facts record, or None."""
    return next((dict(r.details) for r in results if r.probe == "facts" and r.ok), None)


def gpu_counts(facts: Mapping[str, Any]) -> GpuCounts:
    def count(name: str) -> int | None:
        value = facts.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    torch, nvml, pci = count("gpu_count"), count("nvml_gpu_count"), count("pci_gpu_count")
    others = [known for known in (pci, torch) if known is not None]
    return GpuCounts(torch, nvml if nvml is not None else (max(others) if others else None))


# ------------------------------------------------------------------------------ 1. duplicates


def _measurement(result: ProbeResult) -> tuple[Any, ...]:
    return result.probe, result.device, result.metric, tuple(sorted(result.params.items(), key=lambda kv: kv[0]))


def one_per_measurement(results: Sequence[ProbeResult], source: str) -> list[ProbeResult]:
    """``results`` with every ok measurement once (module docstring, 1), in their order."""
    copies: dict[tuple[Any, ...], list[ProbeResult]] = defaultdict(list)
    for result in results:
        copies[_measurement(result)].append(result)
    replaced = {key for key, group in copies.items() if len(group) > 1 and any(r.ok for r in group)}
    if not replaced:
        return list(results)
    kept: list[ProbeResult] = []
    for result in results:
        key = _measurement(result)
        if key not in replaced:
            kept.append(result)
        elif copies[key][0] is result:
            group = copies[key]
            why = (f"{source}: the node printed {len(group)} records of {result.probe}.{result.metric} on "
                   f"{result.device}{_params_text(result.params)} ({sum(r.ok for r in group)} of them ok); a "
                   "measurement has one record: none is used")
            kept.append(_error(result, why))
    return kept


def _params_text(params: Mapping[str, Any]) -> str:
    return " (" + ", ".join(f"{k} {v}" for k, v in params.items()) + ")" if params else ""


def _error(record: ProbeResult, reason: str, **fields: Any) -> ProbeResult:
    """An ``error`` record of the same measurement, carrying ``reason``."""
    return ProbeResult(probe=fields.get("probe", record.probe), device=fields.get("device", record.device),
                       metric=fields.get("metric", record.metric), value=None, unit=None, status="error",
                       reason=reason, gpu_uuid=fields.get("gpu_uuid", record.gpu_uuid),
                       params=fields.get("params", dict(record.params)))


def bounded_nic_ports(results: list[ProbeResult], source: str) -> list[ProbeResult]:
    """``results``, or, with more than MAX_NIC_PORTS port records, those replaced by one ``error``
    record (module docstring, 5)."""
    ports = [r for r in results if (r.probe, r.metric) == NIC_PORT]
    if len(ports) <= MAX_NIC_PORTS:
        return results
    why = (f"{source}: the node printed {len(ports)} NIC port records, more than any node has ports "
           f"(at most {MAX_NIC_PORTS}): none is used")
    kept = [r for r in results if (r.probe, r.metric) != NIC_PORT]
    return kept + [_error(ports[0], why, device="nic", gpu_uuid=None, params={})]


# ------------------------------------------------------------------------------ 2. absent GPUs


def _absent_devices(result: ProbeResult, counts: GpuCounts) -> list[str]:
    """The devices of ``result`` (its own, and a P2P pair's ends) the node does not have."""
    named = [result.device]
    if result.probe == "p2p":
        named += [str(result.params.get(end)) for end in ("src", "dst") if result.params.get(end) is not None]
    absent = []
    for device in named:
        prefix, _, _ = device.partition(":")
        index, limit = device_index(device), counts.limit(prefix)
        if index is not None and limit is not None and index >= limit:
            absent.append(device)
    return absent


def drop_absent_gpus(results: Sequence[ProbeResult], counts: GpuCounts,
                     source: str) -> tuple[list[ProbeResult], list[ProbeResult]]:
    """(the records of GPUs the node has, one ``error`` record per probe that named others)."""
    kept: list[ProbeResult] = []
    dropped: dict[str, list[str]] = defaultdict(list)
    first: dict[str, ProbeResult] = {}
    for result in results:
        absent = _absent_devices(result, counts)
        if not absent:
            kept.append(result)
            continue
        dropped[result.probe] += absent
        first.setdefault(result.probe, result)
    errors = []
    for probe, devices in dropped.items():
        names = _folded(devices)
        prefix = devices[0].partition(":")[0]
        count = len(set(devices))
        why = (f"{source}: the node printed {probe} records for {count} GPU{'s' if count != 1 else ''} it does not "
               f"have ({names}; it has {counts.limit(prefix)} by {counts.describe(prefix)}): dropped, not compared")
        errors.append(_error(first[probe], why, device=HOST, gpu_uuid=None, params={}))
    return kept, errors


def _folded(devices: Iterable[str]) -> str:
    """``cuda:8..cuda:107`` (a run of indexes), or the first few and a count."""
    by_prefix: dict[str, set[int]] = defaultdict(set)
    for device in devices:
        index = device_index(device)
        if index is not None:
            by_prefix[device.partition(":")[0]].add(index)
    parts = []
    for prefix, indexes in sorted(by_prefix.items()):
        ordered = sorted(indexes)
        if ordered == list(range(ordered[0], ordered[-1] + 1)) and len(ordered) > 2:
            parts.append(f"{prefix}:{ordered[0]}..{prefix}:{ordered[-1]}")
        else:
            shown = ", ".join(f"{prefix}:{i}" for i in ordered[:DEVICES_NAMED])
            parts.append(shown + (f" and {len(ordered) - DEVICES_NAMED} more" if len(ordered) > DEVICES_NAMED else ""))
    return "; ".join(parts)


# ------------------------------------------------------------------------------ 3. ceilings


def within_ceilings(results: Sequence[ProbeResult], gpu_model: str | None, source: str) -> list[ProbeResult]:
    """``results`` with each ok value above its ceiling replaced by an ``error`` record."""
    checked = []
    for result in results:
        measure = METRICS.get(result.probe, {}).get(result.metric)
        if not result.ok or result.value is None or measure is None or measure.ceiling is None:
            checked.append(result)
            continue
        bound = ceiling(gpu_model, result.probe, result.metric, result.params, result.device)
        if bound is None or result.value <= bound.value:
            checked.append(result)
            continue
        why = (f"{source}: {result.probe}.{result.metric} {result.value:.6g} {bound.unit} on {result.device} is above "
               f"what it can measure (at most {bound.value:.6g} {bound.unit}: {bound.source}): not used")
        checked.append(_error(result, why))
    return checked


# ------------------------------------------------------------------------------ 4. GPUs left out

Shape = tuple[str, Any]  # (metric, direction): one measurement a per-GPU probe makes on each GPU


def unmeasured_gpus(results: Sequence[ProbeResult], counts: GpuCounts, source: str) -> list[ProbeResult]:
    """An ``error`` record for each GPU (and measurement) a per-GPU probe left out."""
    by_probe: dict[str, list[ProbeResult]] = defaultdict(list)
    for result in results:
        if result.probe in PER_GPU_PROBES:
            by_probe[result.probe].append(result)
    added = []
    for probe, records in by_probe.items():
        prefix = PER_GPU_PROBES[probe]
        limit = counts.limit(prefix)
        if limit is None or any(r.device == HOST and not r.ok for r in records):
            continue  # the probe failed or was skipped for the whole host: that record says so
        added += _left_out(probe, prefix, limit, records, source)
    return added


def _left_out(probe: str, prefix: str, limit: int, records: Sequence[ProbeResult], source: str) -> list[ProbeResult]:
    on_gpus = [r for r in records if r.device.startswith(f"{prefix}:")]
    # What the probe measures on each GPU, from its ok records (a failure may not name the
    # direction it failed in); from any record where none is ok.
    shapes = sorted({_shape(probe, r) for r in on_gpus if r.ok} or {_shape(probe, r) for r in on_gpus}, key=repr)
    if not shapes:
        return []
    covered = {(r.device, _shape(probe, r)) for r in records}
    covered_whole = {(r.device, r.metric) for r in records if not r.ok and "direction" not in r.params}
    added = []
    for index in range(limit):
        device = f"{prefix}:{index}"
        for metric, direction in shapes:
            if (device, (metric, direction)) in covered or (device, metric) in covered_whole:
                continue
            what = f"{metric} ({direction})" if direction else metric
            why = (f"{source}: {probe} printed no {what} record for {device}, one of the node's {limit} GPUs "
                   f"({'torch' if prefix == 'cuda' else 'NVML'} counts them): not measured")
            params = {"direction": direction} if direction else {}
            added.append(ProbeResult(probe=probe, device=device, metric=metric, value=None, unit=None,
                                     status="error", reason=why, params=params))
    return added


def _shape(probe: str, record: ProbeResult) -> Shape:
    if probe == "telemetry":
        return ("identity", None)
    direction = record.params.get("direction")
    return record.metric, direction if isinstance(direction, str) else None
