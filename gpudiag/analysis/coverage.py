"""What a sweep could not check, and what the hosts' facts say by themselves.

A diagnostic's worst failure is a green result on broken hardware, so every gap is a finding:

- a probe record that is an ``error`` (a CUDA error, an Xid, a refusal to fit in memory), or a
  measurement ``skipped`` on a host that has GPUs, is ``unchecked`` (naming host, GPU, reason);
- a result with no reference at all (too few peer hosts, no stored baseline, no SKU figure) is
  ``unchecked`` too: nothing compared it, so nothing passed it;
- a GPU that NVML reports lost, or a host that sees fewer GPUs than its PCI bus, NVML, its
  peers of the same GPU model on the same platform (the board's DMI product name: a 4-GPU board
  is no 8-GPU board short of four) or its own previous sweep on the same board (a GPU gone from
  the bus since, which its PCI bus and NVML no longer count: found in a 1-node job too), is
  ``missing_gpu``; where the platform is unknown and only peers expect more than the host's PCI
  bus, NVML and torch all count, it is ``unchecked`` (a smaller board, or GPUs gone from the
  bus: not told apart, not passed);
- a host whose load, usable CPUs or available memory say it is starved is the evidence (and
  the cause) of a ``slow_node``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..findings import Basis, Finding, Kind, Severity
from ..hosts import fold_hosts
from ..records import HostRecords, ProbeResult, device_index
from ..words import deficit_text, figure
from .actions import Cause, action
from .identity import HostGpus
from .measurements import Measurement
from .nodes import gpu_key
from .reference import BASELINE, FLEET, SKU, SMALL_FLEET_HOSTS, SMALL_FLEET_MIN_VALUES, KeyReferences, Reference
from .thresholds import Thresholds

# Probes that need a GPU; on a host without one their skips are expected, not gaps.
GPU_PROBES = frozenset({"telemetry", "p2p", "pcie", "smclock"})
LOST_MARKERS = ("GPU_IS_LOST", "gpu is lost", "fallen off the bus")


def record_gaps(host: str, records: Iterable[ProbeResult], facts: Mapping[str, Any],
                identities: HostGpus | None = None) -> list[Finding]:
    """``unchecked`` findings for one ok host's error and skipped records, one per probe and
    device, naming the GPU by NVML's index (``identities``: gpudiag.analysis.identity). A lost GPU
    is left to :func:`missing_gpus`; a reading a GPU does not have (NVML's not-supported) and a
    probe that needs more GPUs than the host has are not gaps."""
    gpus = identities if identities is not None else HostGpus(facts)
    grouped: dict[tuple[str, str, str], list[ProbeResult]] = defaultdict(list)
    has_gpus = _gpu_count(facts) > 0 or (facts.get("pci_gpu_count") or 0) > 0
    for record in records:
        status = record.status
        if status == "ok" or _is_lost(record) or not _is_gap(record, has_gpus, _gpu_count(facts)):
            continue
        grouped[(record.probe, record.device, status)].append(record)
    findings = []
    for (probe, device, status), group in sorted(grouped.items()):
        first = group[0]
        more = f" (and {len(group) - 1} more {probe} readings)" if len(group) > 1 else ""
        words = "failed" if status == "error" else "was not measured"
        evidence = f"{probe} {words} on {device}: {first.reason or 'no reason given'}{more}"
        who = gpus.of(device, first.gpu_uuid)
        note = who.renumbered_note()
        findings.append(unchecked_finding(host, evidence + (f"; {note}" if note else ""), Basis.ERROR_RECORD,
                                          gpu=who.nvml_index, gpu_uuid=who.gpu_uuid, pci_bus_id=who.pci_bus_id,
                                          metric=f"{probe}.{first.metric}"))
    return findings


def _is_gap(record: ProbeResult, has_gpus: bool, gpu_count: int) -> bool:
    if record.status == "error":
        return True
    probe, device, reason = record.probe, record.device, record.reason or ""
    if "deadline" in reason:
        return True
    if not has_gpus:
        # A host without GPUs skips the GPU probes by nature (missing_gpus judges the count), but
        # GEMM and memory bandwidth run on its CPU: their skip (e.g. no torch) is a gap.
        return probe not in GPU_PROBES
    if probe == "telemetry" and device != "host":
        return False  # a reading this GPU does not have (n/a: not supported)
    return not (probe == "p2p" and gpu_count < 2)


def _is_lost(record: ProbeResult) -> bool:
    reason = record.reason or ""
    return record.status == "error" and any(marker.lower() in reason.lower() for marker in LOST_MARKERS)


def add_gpu_count(counts: dict[str, tuple[int, str | None]], host: HostRecords) -> None:
    """``host``'s usable GPU count and board into ``counts`` (a previous sweep's: missing_gpus),
    where it was ok and counted its GPUs."""
    count = _gpu_count(host.facts)
    if host.status == "ok" and count > 0 and not host.facts.get("torch_unavailable"):
        counts[host.host] = (count, _platform(host.facts))


def missing_gpus(hosts: Sequence[HostRecords], not_ok: Mapping[str, Sequence[ProbeResult]],
                 previous: Mapping[str, tuple[int, str | None]] | None = None,
                 configured: Mapping[str, int] | None = None) -> list[Finding]:
    """``missing_gpu`` findings: each GPU NVML reports lost, and each host that sees fewer GPUs
    than its PCI bus, NVML, most of its peers of the same GPU model and platform, its own
    previous sweep on the same board (``previous``: add_gpu_count's) or the GPUs Slurm is
    configured to give it (``configured``: host -> its ``Gres=`` GPUs, gpudiag.slurm.nodes; a GPU
    gone from the bus of a 1-node job with no stored sweep). ``not_ok`` holds each
    host's records that are not ok (where a lost GPU's telemetry is). A host of no known platform
    that only its peers find short is ``unchecked`` (see the module docstring)."""
    ok = [h for h in hosts if h.status == "ok" and h.facts]
    groups = _count_groups(ok)
    peer_counts = _peer_counts(groups)
    undecided = _undecided_counts(groups, peer_counts)
    previous, configured = previous or {}, configured or {}
    findings: list[Finding] = []
    for host in ok:
        lost = _lost_gpus(host.host, not_ok.get(host.host, ()))
        findings += lost
        facts = host.facts
        if facts.get("torch_unavailable"):
            continue  # torch could not count the GPUs: the skipped probes say so (record_gaps)
        seen = _gpu_count(facts)
        expected = _expected_counts(facts, peer_counts)
        before = previous.get(host.host)
        if before is not None and before[1] == _platform(facts):
            expected[PREVIOUS] = before[0]
        if host.host in configured:
            expected[CONFIGURED] = configured[host.host]
        most = max(expected.values(), default=0)
        if seen < most and len(lost) < most - seen:
            sources = "; ".join(f"{what} {count}" for what, count in expected.items())
            evidence = f"{seen} GPUs usable (torch), expected {most}: {sources}"
            findings.append(_short_of_peers(host.host, evidence) if _only_peers_expect_more(facts, expected)
                            else _missing(host.host, evidence, Basis.FACTS))
        elif host.host in undecided and seen < undecided[host.host][0] and not lost:
            top, agreed = undecided[host.host]
            most = "too few peers agree on a count" if agreed is None else f"most have {agreed}, too few to be sure"
            findings.append(unchecked_finding(
                host.host, f"{seen} GPUs usable (torch), where a peer of the same model and platform has {top}; "
                f"{most} to tell GPUs gone from the bus from a board that holds fewer: not compared, not passed",
                Basis.FACTS))
    return findings


def _undecided_counts(groups: Mapping[PeerGroup, Sequence[tuple[str, int]]],
                      peer_counts: Mapping[PeerGroup, int]) -> dict[str, tuple[int, int | None]]:
    """For each host of a GPU model and platform below the most GPUs another of them has, where
    its peers' count does not already make it short: (that most, the count most of them agree on,
    None where they agree on none). A GPU gone from the bus and the PCI bus too left a 2-node job's
    host at 7 beside its peer's 8, and nothing was said; in a 3-node job of 7, 7 and 8 the 7s were
    most and passed. Which count is the board's so few cannot tell, so a host below a peer is
    ``unchecked``, never drained on that peer's word. Where at least TRUSTED_AGREEMENT hosts agree,
    their count stands (a fleet's few boards that hold more are no sign that the rest lost GPUs)."""
    found: dict[str, tuple[int, int | None]] = {}
    for group, members in groups.items():
        if group[0] is None or len(members) < 2:
            continue
        agreed = peer_counts.get(group)
        if agreed is not None and sum(count == agreed for _, count in members) >= TRUSTED_AGREEMENT:
            continue
        # The most another host has: the group's most, or the next count for the one host with it.
        counts = Counter(count for _, count in members)
        most = max(counts)
        below = max((count for count in counts if count < most), default=most)
        for name, count in members:
            top = below if count == most and counts[most] == 1 else most
            if count < top and (agreed is None or count >= agreed):
                found[name] = (top, agreed)
    return found


def _only_peers_expect_more(facts: Mapping[str, Any], expected: Mapping[str, int]) -> bool:
    """True where the platform is unknown and the host's PCI bus and NVML both count what torch
    sees: only peers (maybe of another board) expect more, not its previous sweep nor Slurm."""
    seen = _gpu_count(facts)
    own = [facts.get("pci_gpu_count"), facts.get("nvml_gpu_count")]
    return not _platform(facts) and all(isinstance(count, int) and count == seen for count in own) and \
        expected.get(PEERS, 0) > seen >= max(expected.get(PREVIOUS, 0), expected.get(CONFIGURED, 0))


def _short_of_peers(host: str, evidence: str) -> Finding:
    return unchecked_finding(host, f"{evidence}; the board's product name (DMI) is unknown, so a smaller board "
                                   "cannot be told from GPUs gone from the bus: not compared, not passed", Basis.FACTS)


def _lost_gpus(host: str, records: Iterable[ProbeResult]) -> list[Finding]:
    found: dict[str, Finding] = {}
    for record in records:
        if record.probe == "telemetry" and _is_lost(record) and record.device not in found:
            device = record.device
            evidence = f"NVML reports {device} lost: {record.reason}"
            found[device] = _missing(host, evidence, Basis.TELEMETRY, gpu=device_index(device),
                                     gpu_uuid=record.gpu_uuid)
    return [found[device] for device in sorted(found)]


# A peer group of GPU counts: (GPU model, platform); a model of None holds every host with GPUs
# of that platform, a platform of None the hosts whose board is unknown.
PeerGroup = tuple[str | None, str | None]
PEERS = "peers of the same model and platform have"
PREVIOUS = "its previous sweep on this board counted"
# How many hosts of a GPU model and platform must agree on a GPU count for it to stand beside a
# peer that has more (_undecided_counts): two of a 3-node job's 7, 7 and 8 are too few.
TRUSTED_AGREEMENT = 3
CONFIGURED = "Slurm's configuration (Gres) gives it"


def _platform(facts: Mapping[str, Any]) -> str | None:
    platform = facts.get("platform")
    return platform if isinstance(platform, str) and platform else None


def _count_groups(hosts: Sequence[HostRecords]) -> dict[PeerGroup, list[tuple[str, int]]]:
    """Each host with GPUs and its GPU count, by GPU model and platform, and by platform alone
    (model None)."""
    groups: dict[PeerGroup, list[tuple[str, int]]] = defaultdict(list)
    for host in hosts:
        facts = host.facts
        if facts.get("gpu_model"):
            platform, counted = _platform(facts), (host.host, _gpu_count(facts))
            groups[(facts["gpu_model"], platform)].append(counted)
            groups[(None, platform)].append(counted)
    return groups


def _peer_counts(groups: Mapping[PeerGroup, Sequence[tuple[str, int]]]) -> dict[PeerGroup, int]:
    """The GPU count most hosts of each GPU model and platform have (``groups``: _count_groups;
    model None: over every host with GPUs of the platform), where at least two hosts agree and
    they are at least half of that group's hosts, and no other count has as many (of 7, 7, 8 and
    8, which came first had decided whether the 7s were missing or the count they agree on).
    GPU counts are compared only within a platform: a 4-GPU board is no 8-GPU board short of
    four."""
    modes = {}
    for group, members in groups.items():
        ranked = Counter(count for _, count in members).most_common(2)
        count, hosts_with_it = ranked[0]
        tied = len(ranked) > 1 and ranked[1][1] == hosts_with_it
        if hosts_with_it >= 2 and 2 * hosts_with_it >= len(members) and not tied:
            modes[group] = count
    return modes


def _expected_counts(facts: Mapping[str, Any], peer_counts: Mapping[PeerGroup, int]) -> dict[str, int]:
    expected = {}
    for name, label in (("pci_gpu_count", "on the PCI bus"), ("nvml_gpu_count", "counted by NVML")):
        if isinstance(facts.get(name), int):
            expected[label] = int(facts[name])
    peers = peer_counts.get((facts.get("gpu_model") or None, _platform(facts)))
    if peers is not None:
        expected[PEERS] = peers
    return expected


def _gpu_count(facts: Mapping[str, Any]) -> int:
    count = facts.get("gpu_count")
    return int(count) if isinstance(count, (int, float)) else 0


def starvation(facts: Mapping[str, Any], thresholds: Thresholds) -> list[str]:
    """What starves a host, in plain words (empty when nothing does): a 1-minute load above
    ``host_load_per_cpu`` per usable CPU, too few usable CPUs, too little available memory."""
    usable, total = facts.get("cpu_count_usable"), facts.get("cpu_count")
    load = facts.get("load_average_1m")
    available, memory = facts.get("memory_available_mib"), facts.get("memory_total_mib")
    parts = []
    if usable and load is not None and load / usable > thresholds.host_load_per_cpu:
        parts.append(f"load {load:.1f} on {usable} usable CPUs")
    if usable and total and 100 * usable / total < thresholds.host_cpus_usable_pct:
        parts.append(f"{usable} of {total} CPUs usable")
    if available is not None and memory and 100 * available / memory < thresholds.host_memory_available_pct:
        parts.append(f"{available} of {memory} MiB memory available")
    return parts


def not_compared(metrics: Mapping[tuple[str, str], Iterable[str]], thresholds: Thresholds) -> list[Finding]:
    """One ``unchecked`` finding per probe and metric some of whose results had no reference at
    all: ``metrics`` maps (probe, metric) to the hosts of those results."""
    findings = []
    for (probe, metric), hosts in sorted(metrics.items()):
        names = sorted(set(hosts))
        needed = (f"{thresholds.min_peers} needed to compare with the fleet" if len(names) < thresholds.min_peers
                  else f"from fewer than {SMALL_FLEET_HOSTS} hosts a key needs {SMALL_FLEET_MIN_VALUES} values "
                       "to compare with the fleet")
        evidence = (f"{probe}.{metric} measured on {len(names)} host{'s' if len(names) != 1 else ''} "
                    f"({needed}), with no stored baseline and no SKU figure: not compared, not passed")
        findings.append(unchecked_finding(fold_hosts(names), evidence, Basis.COMPARISON, metric=f"{probe}.{metric}"))
    return findings


def below_the_sku_alone(medians: Iterable[Measurement], refs: Mapping[str, KeyReferences],
                        shifted: Iterable[str], findings: Iterable[Finding], thresholds: Thresholds) -> list[Finding]:
    """An ``unchecked`` finding for each node whose GPUs' median (``medians``: gpudiag.analysis.nodes)
    falls ``deficit_fail`` or more below the SKU figure of a key that nothing else judges (no
    fleet level, no stored baseline: a 1- or 2-node job) and that no finding of its own, nor a
    group shift of that key (``shifted``: the hosts of shifted groups), already names. A node 8 %
    slow on every GPU in a 2-node job is 2.7 of the SKU figure's 3 % spreads below it: too
    coarse to fail it, and too far to pass it. Measured, unlike a figure with no reference at
    all, so the job is kept off it (gpudiag.analysis.fleet.job_impact), and no node is drained."""
    named = {(f.host, f.metric) for f in findings} | {(f.host, None) for f in findings if f.severity == Severity.FAIL}
    skipped = set(shifted)
    gaps = []
    sku_alone: dict[str, Reference | None] = {}  # each key's SKU figure where nothing else judges it
    for m in medians:
        if m.key not in sku_alone:
            key_refs = refs.get(gpu_key(m.key))
            sku_alone[m.key] = None if key_refs is None or any(ref.source in (FLEET, BASELINE)
                                                               for ref in key_refs.references) else key_refs.get(SKU)
        sku = sku_alone[m.key]
        if sku is None:
            continue
        metric = f"{m.probe}.{m.metric}"
        if sku.deficit_pct(m.value) < thresholds.deficit_fail_pct or m.host in skipped \
                or {(m.host, metric), (m.host, None)} & named:
            continue
        evidence = (f"{metric}: the median of its GPUs {figure(m.value, m.unit)} is "
                    f"{deficit_text(sku.deficit_pct(m.value))} the SKU figure {figure(sku.value, m.unit)}; "
                    "with no fleet to compare with and no stored baseline, the "
                    f"SKU figure's {100 * sku.spread / sku.value:.0f} % spread cannot tell it from a healthy node: "
                    "not passed (store a baseline, or sweep it with its peers)")
        gaps.append(unchecked_finding(m.host, evidence, Basis.SINGLE_RUN, metric=metric))
    return gaps


def unchecked_finding(host: str, evidence: str, basis: Basis, **fields: Any) -> Finding:
    """An ``unchecked`` warning: something was not measured or compared, resting on ``basis``."""
    verb, detail = action(Cause.UNCHECKED, Severity.WARN)
    return Finding(kind=Kind.UNCHECKED, severity=Severity.WARN, host=host, evidence=evidence, action=verb,
                   action_detail=detail, basis=basis, **fields)


def _missing(host: str, evidence: str, basis: Basis, **fields: Any) -> Finding:
    verb, detail = action(Cause.MISSING_GPU, Severity.FAIL, fields.get("gpu"))
    return Finding(kind=Kind.MISSING_GPU, severity=Severity.FAIL, host=host, evidence=evidence, action=verb,
                   action_detail=detail, basis=basis, **fields)
