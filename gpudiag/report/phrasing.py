"""The words of a sweep document's parts, shared by every report format.

Where a finding is (host, GPU index, UUID, PCI bus id, peer; for a finding of no host, the part
of the fabric between switches it names or the network of its pair tests), its figures with their
unit and the source of the reference, what it rests on and its action; findings in cost order,
hosts grouped by status, and the cells of one finding or host group as text. A missing key counts
as null.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from itertools import pairwise
from typing import Any

from ..findings import FABRIC_KINDS, Action, Basis, Kind, cost_order, sort_by_cost
from ..hosts import fold_hosts
from ..words import deficit_text, figure
from .folding import host_count_words

Document = Mapping[str, Any]

OK = "ok"
# What a finding rests on (its ``basis``), in words.
BASIS_WORDS = {
    Basis.RETEST: "confirmed by re-test",
    Basis.SINGLE_RUN: "single run, not re-tested",
    Basis.TELEMETRY: "NVML telemetry",
    Basis.FACTS: "host facts",
    Basis.HOST_STATUS: "no usable measurements",
    Basis.ERROR_RECORD: "probe error",
    Basis.COMPARISON: "nothing to compare with",
}
REFERENCE_SOURCE_WORDS = {"fleet": "fleet", "baseline": "baseline", "sku": "SKU", "line_rate": "line rate"}
# Units that read worse than the bare number ("2 count").
# A GPU UUID is shortened in text to its prefix and first group of hex digits ("GPU-1a2b3c4d…"):
# enough to tell the GPUs of a fleet apart and to grep for; the HTML report shows it whole.
SHORT_UUID = re.compile(r"(?:MIG-)?(?:GPU-)?[0-9A-Fa-f]{8}")
FINDING_COLUMNS = ["severity", "action", "kind", "where", "metric", "value", "reference", "deficit", "robust z",
                   "basis", "evidence", "action detail"]
HOST_COLUMNS = ["status", "hosts", "count", "example error"]


def sort_findings(findings: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Findings ordered by what they cost a job: ``fail`` before ``warn``, then the largest
    ``deficit_pct`` first (None last), then kind, host, peer and GPU, so the order is deterministic.
    Findings already in that order (a sweep's own: its analysis sorted them) are kept as they are,
    checked pair by pair without a key for every finding held at once."""
    listed = list(findings)
    if all(cost_order(first) <= cost_order(second) for first, second in pairwise(listed)):
        return listed
    return sort_by_cost(listed)


def hosts_by_status(document: Document) -> dict[str, list[str]]:
    """Host labels grouped by status, ``ok`` first and the other statuses in name order."""
    groups: dict[str, list[str]] = defaultdict(list)
    for host in _hosts(document):
        groups[str(host.get("status"))].append(str(host.get("host")))
    return {status: groups[status] for status in sorted(groups, key=lambda s: (s != OK, s))}


def finding_where(finding: Mapping[str, Any], link_arrow: str = "↔", *, full_uuid: bool = False) -> str:
    """Where a finding is: ``node017:3 (GPU-1a2b3c4d…, 00000000:5D:00.0)`` for a GPU (the UUID whole
    with ``full_uuid``), ``node017:3↔5`` for a GPU pair in one host, ``node001 ↔ node004`` for a
    link, ``node050`` for a host, ``node[001-032] (share 72 % of hosts)`` for a fleet-wide shift,
    ``rail 2 leaf03:12 ↔ spine04:3`` for a part of the fabric and ``the network (perftest) (share
    100 % of pairs)`` for a network below its line rate (a pair test's share is of pairs)."""
    where = finding_location(finding, link_arrow) + host_count_words(finding)
    ids = gpu_ids(finding, full_uuid=full_uuid)
    if ids:
        where += f" ({ids})"
    if finding.get("share_pct") is not None:
        counted = "pairs" if network_metric(finding.get("metric"))[0] is not None else "hosts"
        where += f" (share {_share(finding['share_pct'])} of {counted})"
    return where


def finding_location(finding: Mapping[str, Any], link_arrow: str = "↔") -> str:
    """``node017:3``, ``node017:3↔5``, ``node001 ↔ node004`` or ``node050``: host, GPU index, peer;
    for a finding of no host, where it is instead (``hostless_location``)."""
    if finding.get("host") is None:
        return hostless_location(finding, link_arrow)
    host, peer = str(finding.get("host")), finding.get("peer")
    gpu, peer_gpu = finding.get("gpu"), finding.get("peer_gpu")
    where = host if gpu is None else f"{host}:{gpu}"
    if peer_gpu is not None and peer in (None, host):
        return f"{where}{link_arrow}{peer_gpu}"  # two GPUs of one host
    if peer is not None:
        where += f" {link_arrow} {peer}" + ("" if peer_gpu is None else f":{peer_gpu}")
    return where


# The keys a finding of the fabric between switches names its part by (gpudiag.findings.FabricPart).
FABRIC_KEYS = ("fabric_link", "switch", "fabric_candidates")


# What a finding of no host and no fabric part is about: a job's network as a whole (slow_network).
NETWORK_WORDS = "the network"
# Where a finding of no host is that says nothing of where it is (a document from another tool).
NO_HOST_WORDS = "no host named"


def hostless_location(finding: Mapping[str, Any], link_arrow: str = "↔") -> str:
    """Where a finding of no host is: the part of the fabric between switches it names
    (``fabric_location``), else the network of its pair tests, ``the network (perftest)`` or
    ``the network (perftest, rail 5)`` (``slow_network``, a job's network as a whole); NO_HOST_WORDS
    for one that says neither."""
    if finding.get("kind") in FABRIC_KINDS or any(finding.get(key) is not None for key in FABRIC_KEYS):
        return fabric_location(finding, link_arrow)
    backend, rail = network_metric(finding.get("metric"))
    if finding.get("kind") != Kind.SLOW_NETWORK and backend is None:
        return NO_HOST_WORDS
    within = ", ".join(words for words in (backend, "" if rail is None else f"rail {rail}") if words)
    return f"{NETWORK_WORDS} ({within})" if within else NETWORK_WORDS


def network_metric(metric: object) -> tuple[str | None, int | None]:
    """(backend, rail) of a pair test's or the fabric's metric (``link.perftest.rail5``,
    ``fabric.perftest``); None for what it does not say."""
    words = str(metric or "").split(".")
    if len(words) < 2 or words[0] not in ("link", "fabric"):
        return None, None
    rail = words[2].removeprefix("rail") if len(words) > 2 else ""
    return words[1] or None, int(rail) if rail.isdigit() else None


def fabric_location(finding: Mapping[str, Any], link_arrow: str = "↔") -> str:
    """Where a fabric finding is (see ``finding_location``): ``rail 2 leaf03:12 ↔ spine04:3``,
    ``rail 2 switch spine02`` or ``rail 0 one of leaf01 ↔ spine02, …``; ``the fabric (rail 2)``
    where it names no part."""
    parts = finding.get("fabric_candidates")
    if isinstance(parts, list) and parts:
        named = [_fabric_part(part, link_arrow) for part in parts if isinstance(part, Mapping)]
        rail = parts[0].get("rail") if isinstance(parts[0], Mapping) else None
        return f"{_rail_words(rail)}one of {', '.join(named)}"
    link = finding.get("fabric_link")
    if isinstance(link, Mapping):
        return _rail_words(link.get("rail")) + _fabric_part(link, link_arrow)
    if finding.get("switch") is not None:
        return _rail_words(finding.get("rail")) + f"switch {finding['switch']}"
    rail = fabric_rail(finding)
    return "the fabric" + ("" if rail is None else f" (rail {rail})")


def fabric_ends(finding: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """(switch, port, peer switch, peer port) of the one part of the fabric a finding names: a
    link's two ends (a port empty where unknown), a switch alone; all empty for a set of
    candidates or a finding of no fabric part."""
    link = finding.get("fabric_link")
    if isinstance(link, Mapping):
        ends = [str(name) for name in link.get("switches") or []]
        ports = link.get("ports")
        ports = [str(port) for port in ports] if isinstance(ports, list) and len(ports) == len(ends) else []
        (switch, peer), (port, peer_port) = (ends + ["", ""])[:2], (ports + ["", ""])[:2]
        return switch, port, peer, peer_port
    if finding.get("switch") is not None:
        return str(finding["switch"]), "", "", ""
    return "", "", "", ""


def fabric_rail(finding: Mapping[str, Any]) -> int | None:
    """The rail whose plane a finding of no host is in: its part's, else its metric's; None for
    the plane every rail shares or where nothing says."""
    parts = finding.get("fabric_candidates")
    for part in ([finding.get("fabric_link")] + (parts if isinstance(parts, list) else [])):
        if isinstance(part, Mapping) and part.get("rail") is not None:
            return _rail_number(part["rail"])
    if finding.get("rail") is not None:
        return _rail_number(finding["rail"])
    return network_metric(finding.get("metric"))[1]


def _rail_number(rail: object) -> int | None:
    return rail if isinstance(rail, int) and not isinstance(rail, bool) else None


def _fabric_part(part: Mapping[str, Any], link_arrow: str) -> str:
    if part.get("switch") is not None:
        return f"switch {part['switch']}"
    ends = [str(name) for name in part.get("switches") or []]
    ports = part.get("ports")
    if isinstance(ports, list) and len(ports) == len(ends):
        ends = [f"{name}:{port}" for name, port in zip(ends, ports, strict=True)]
    return f" {link_arrow} ".join(ends)


def _rail_words(rail: Any) -> str:
    return "" if rail is None else f"rail {rail} "


def gpu_ids(finding: Mapping[str, Any], *, full_uuid: bool = False) -> str:
    """``GPU-1a2b3c4d…, 00000000:5D:00.0``: the GPU's UUID (shortened unless ``full_uuid``) and PCI
    bus id, those known; for a GPU pair they name ``gpu`` and say so (``3: GPU-…``). Empty when
    neither is known."""
    uuid, bus_id = finding.get("gpu_uuid"), finding.get("pci_bus_id")
    parts = [str(uuid) if full_uuid else short_uuid(str(uuid))] if uuid else []
    if bus_id:
        parts.append(str(bus_id))
    if not parts:
        return ""
    text = ", ".join(parts)
    if finding.get("peer_gpu") is not None and finding.get("gpu") is not None:
        text = f"{finding['gpu']}: {text}"
    return text


def short_uuid(uuid: str) -> str:
    """``GPU-1a2b3c4d…`` for ``GPU-1a2b3c4d-5e6f-…``; a UUID of another shape is cut after 12 characters."""
    match = SHORT_UUID.match(uuid)
    shown = match.group(0) if match else uuid[:12]
    return uuid if len(uuid) <= len(shown) + 1 else shown + "…"


def finding_measure(finding: Mapping[str, Any]) -> str:
    """``gemm.tflops 612.0 TFLOP/s vs fleet 742.0 TFLOP/s``; the metric alone when the finding has no
    figure; empty for a finding without a measurement."""
    metric, value = finding.get("metric"), finding.get("value")
    if metric is None and value is None:
        return ""
    text = str(metric or "value")
    if value is not None:
        text += f" {figure(value, finding.get('unit'))}"
    if finding.get("reference") is not None:
        text += f" vs {reference_text(finding)}"
    return text


def reference_text(finding: Mapping[str, Any]) -> str:
    """``fleet 742.0 TFLOP/s``: the reference with its source and unit; empty without a reference."""
    if finding.get("reference") is None:
        return ""
    source = finding.get("reference_source")
    text = figure(finding["reference"], finding.get("unit"))
    return f"{REFERENCE_SOURCE_WORDS.get(str(source), str(source))} {text}" if source else text


def basis_words(finding: Mapping[str, Any]) -> str:
    """What a finding rests on, in words (``confirmed by re-test``, ``NVML telemetry``, ...). A
    finding from before ``basis`` existed says ``confirmed`` / ``not confirmed`` for a deficit."""
    basis = finding.get("basis")
    if basis == Basis.TELEMETRY and finding.get("kind") == Kind.NIC_PORT:
        return "NIC port readings (sysfs)"  # the kernel's view of the port, not NVML's
    if basis == Basis.TELEMETRY and finding.get("kind") == Kind.XID:
        return "kernel log and NVML"
    if basis:
        return BASIS_WORDS.get(str(basis), str(basis))
    if finding.get("deficit_pct") is None or finding.get("confirmed") is None:
        return ""
    return "confirmed" if finding["confirmed"] else "not confirmed"


def action_verb(finding: Mapping[str, Any]) -> str | None:
    """The finding's action when it is one of the fixed verbs, else None (an older free-text action)."""
    action = finding.get("action")
    return str(action) if action in tuple(Action) else None


def action_words(finding: Mapping[str, Any]) -> str:
    """``drain — drain the node and run ...``: the verb and its detail; an older free-text action as
    it is; empty without either."""
    action, detail = finding.get("action"), finding.get("action_detail")
    return " — ".join(str(part) for part in (action, detail) if part)


def finding_row(finding: Mapping[str, Any], *, full_uuid: bool = False) -> list[str]:
    """The cells of one finding, in FINDING_COLUMNS order, as text: the action verb (or an older
    free-text action) with its detail apart, figures with their unit, the reference with its source."""
    deficit, robust_z, value = finding.get("deficit_pct"), finding.get("robust_z"), finding.get("value")
    return [str(finding.get("severity", "")), str(finding.get("action") or ""), str(finding.get("kind", "")),
            finding_where(finding, full_uuid=full_uuid), str(finding.get("metric") or ""),
            "" if value is None else figure(value, finding.get("unit")), reference_text(finding),
            "" if deficit is None else deficit_text(deficit), "" if robust_z is None else f"{robust_z:.1f}",
            basis_words(finding), str(finding.get("evidence") or ""), str(finding.get("action_detail") or "")]


def host_group_rows(document: Document) -> list[list[str]]:
    """One row per status: status, folded hosts, count and the first host's error."""
    errors = {str(h.get("host")): h.get("error") for h in _hosts(document)}
    return [[status, fold_hosts(labels), str(len(labels)), "" if status == OK else str(errors.get(labels[0]) or "")]
            for status, labels in hosts_by_status(document).items()]


def _hosts(document: Document) -> list[Mapping[str, Any]]:
    return list(document.get("hosts") or [])


def _findings(document: Document) -> list[Mapping[str, Any]]:
    return list(document.get("findings") or [])


def _deficit_words(finding: Mapping[str, Any]) -> str:
    words = []
    if finding.get("deficit_pct") is not None:
        words.append(deficit_text(finding["deficit_pct"]))
    if finding.get("robust_z") is not None:
        words.append(f"z {finding['robust_z']:.1f}")
    return ", ".join(words)


def _share(value: float) -> str:
    """``72 %``, ``72.5 %``: a share of hosts, whole where it is whole."""
    share = float(value)
    return f"{share:.0f} %" if share.is_integer() else f"{share:.1f} %"


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
