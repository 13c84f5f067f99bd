"""NIC ports judged without traffic: a port that is not up, one trained below its peers' rate,
and one whose error counters grow far faster than its peers' (the ``nic_port`` records of
probes/nicports.py).

- Peers: the ports of the same kind in this sweep — on the same platform (the facts' board name),
  for an RDMA port its link layer, HCA model and port number (``MT4129 InfiniBand port 1``), for
  an Ethernet interface its driver and name —
  the judged port left out. Each host weighs once: a host's ports of a group share one weight,
  so a node printing a hundred ports moves no other node's verdict.
- Not up (IB state other than ``ACTIVE``, an interface's operstate other than ``up``): a ``fail``
  (drain) when more than half of its peers' weight is up. With no peer up, an RDMA port that is
  not ``Disabled`` is a warning (inspect: not compared, not passed); an Ethernet interface is
  nothing (servers carry uncabled onboard ports).
- Rate: an up port below the highest rate that more than half of its up peers' weight reaches
  (most ports at 400 Gbit/s: a 200 port is degraded) is a ``fail`` (drain); the evidence names
  width and speed where the kernel gave them (``2X NDR``).
- Its own previous sweep: a port up then and not up now, or trained below the rate it ran at
  then, is a ``fail`` too, where its peers did not already say so (every port of its kind
  changed at once, or it has no peer). A SKU's rate is no reference: the same HCA runs 4X at
  400 Gbit/s or, split, 2X at 200 (NDR200), both healthy.
- Error counters (symbol errors, link downs, receive errors ...): as the GPU counters of
  gpudiag.analysis.counters, with its PeerCounts and PriorCounts: a counter at or above its
  floor (thresholds ``port_error_floor``, ``port_link_down_floor``, ``port_discard_floor``) and
  ``counter_peer_ratio`` times its peers' median is a warning (inspect); given the previous
  sweep, growth since then is judged instead of the count since the driver loaded.

Findings are kind ``nic_port``, basis ``telemetry``, with the host and the port named first in the
evidence (``mlx5_3 port 1``, ``eth2``). A port record that is no reading (an error) is an
``unchecked`` gap of gpudiag.analysis.coverage; a node without NIC is nothing.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..findings import Basis, Finding, Kind, Severity
from ..records import ProbeResult
from . import actions
from .actions import Cause
from .counters import COUNT, GROWTH, PeerCounts, PriorCounts, counter_evidence
from .thresholds import Thresholds

PROBE, METRIC = "telemetry", "nic_port"
IB, ETHERNET = "ib", "ethernet"
UP_STATES = {IB: "ACTIVE", ETHERNET: "UP"}
# A rate this close to the reference (a fraction) is at it: rates are discrete, never noisy.
RATE_TOLERANCE = 0.01
# sysfs counter -> (words, its floor's Thresholds field); the counters every mlx5 port keeps.
PORT_COUNTERS: Mapping[str, tuple[str, str]] = {
    "symbol_error": ("symbol errors", "port_error_floor"),
    "port_rcv_errors": ("receive errors", "port_error_floor"),
    "local_link_integrity_errors": ("local link integrity errors", "port_error_floor"),
    "excessive_buffer_overrun_errors": ("buffer overrun errors", "port_error_floor"),
    "port_rcv_remote_physical_errors": ("remote physical errors", "port_error_floor"),
    "link_downed": ("link downs", "port_link_down_floor"),
    "link_error_recovery": ("link error recoveries", "port_link_down_floor"),
    "port_xmit_discards": ("transmit discards", "port_discard_floor"),
}


@dataclass(frozen=True)
class Port:
    """One ok ``nic_port`` record of ``host``: ``device`` (``nic:mlx5_0/1``), ``kind`` (``ib``,
    ``ethernet``), states, ``rate_gbps`` (the record's value), width and speed words, link layer,
    ``model`` (HCA type or driver), port number, error counters, and the host's ``platform`` (its
    board, from the facts: ports of different boards are no peers)."""

    host: str
    device: str
    kind: str
    state: str | None
    phys_state: str | None
    rate_gbps: float | None
    width: str | None
    speed: str | None
    link_layer: str | None
    model: str | None
    port: int | None
    counters: Mapping[str, int] = field(default_factory=dict)
    platform: str | None = None

    @property
    def name(self) -> str:
        """``mlx5_3 port 1`` (an RDMA port) or ``eth2`` (an interface), as evidence names it."""
        return self.device.removeprefix("nic:").replace("/", " port ")

    @property
    def up(self) -> bool:
        return self.state == UP_STATES.get(self.kind)

    @property
    def group(self) -> tuple[Any, ...]:
        """The peer group: ports of the same kind (module docstring)."""
        if self.kind == IB:
            return IB, self.platform, self.link_layer, self.model, self.port
        return self.kind, self.platform, self.model, self.device

    def group_words(self) -> str:
        if self.kind == IB:
            return f"{self.model or 'unknown HCA'} {self.link_layer or ''} port {self.port}".replace("  ", " ")
        return f"{self.device.removeprefix('nic:')} ({self.model or 'unknown driver'})"

    def rate_words(self) -> str:
        shape = " ".join(part for part in (self.width, self.speed) if part)
        return f"{_text(self.rate_gbps or 0)} Gbit/s" + (f" ({shape})" if shape else "")


def read_ports(host: str, results: Iterable[ProbeResult],
               facts: Mapping[str, Any] | None = None) -> tuple[Port, ...]:
    """The ok ``nic_port`` records among one host's records, as Ports (the others are gaps); the
    host's ``facts`` give its platform."""
    platform = (facts or {}).get("platform")
    platform = platform if isinstance(platform, str) else None
    ports = []
    for result in results:
        if result.metric != METRIC or result.probe != PROBE or result.status != "ok":
            continue
        details = result.details
        value = result.value
        counters = details.get("counters") or {}
        ports.append(Port(host, result.device, str(details.get("kind")), details.get("state"),
                          details.get("phys_state"), value if isinstance(value, (int, float)) else None,
                          details.get("width"), details.get("speed"), details.get("link_layer"), details.get("model"),
                          details.get("port"),
                          {name: count for name, count in counters.items() if name in PORT_COUNTERS}, platform))
    return tuple(ports)


def add_prior(prior: PriorCounts, ports: Mapping[str, Sequence[Port]]) -> None:
    """The previous sweep's port counters, states and rates into ``prior`` (each port as its
    host's part ``device``)."""
    for host, host_ports in ports.items():
        for port in host_ports:
            prior.gpus.add((host, port.device))
            prior.ports[(host, port.device)] = port.rate_gbps if port.up else None
            for name, count in port.counters.items():
                if count:
                    prior.counts[(host, port.device, name, None)] = float(count)


def port_findings(ports: Mapping[str, Sequence[Port]], thresholds: Thresholds,
                  previous: PriorCounts | None = None) -> list[Finding]:
    """Every ``nic_port`` finding of the sweep's ports (host -> its ports), as the module
    docstring says; ``previous``: the previous sweep's counters, to judge growth."""
    groups = _groups(port for host in sorted(ports) for port in ports[host])
    by_port = {(port.host, port.device): finding for group in groups.values()
               for port, finding in group.state_and_rate_findings()}
    previous = previous or PriorCounts()
    for host in sorted(ports):
        for port in ports[host]:
            peers_said = by_port.get((host, port.device))
            if peers_said is None or peers_said.severity != Severity.FAIL:
                changed = _changed(port, previous)
                if changed is not None:
                    by_port[(host, port.device)] = changed  # its own history says more than "not compared"
    findings = list(by_port.values())
    return findings + _counter_findings(groups, thresholds, previous)


# ------------------------------------------------------------------------------ state and rate


class _Group:
    """The ports of one peer group, each weighing 1 / (its host's ports in the group)."""

    def __init__(self) -> None:
        self.ports: list[Port] = []
        self._per_host: dict[str, int] = defaultdict(int)

    def add(self, port: Port) -> None:
        self.ports.append(port)
        self._per_host[port.host] += 1

    def weight(self, port: Port) -> float:
        return 1 / self._per_host[port.host]

    def state_and_rate_findings(self) -> list[tuple[Port, Finding]]:
        total = sum(self.weight(p) for p in self.ports)
        up_weight = sum(self.weight(p) for p in self.ports if p.up)
        rates: dict[float, float] = defaultdict(float)  # a rate of up ports -> its weight
        for port in self.ports:
            if port.up and port.rate_gbps is not None:
                rates[port.rate_gbps] += self.weight(port)
        found = []
        for port in self.ports:
            weight = self.weight(port)
            if not port.up:
                finding = _not_up(port, up_weight, total - weight, self._up_count(port), len(self.ports) - 1)
            elif port.rate_gbps is not None:
                finding = _slow(port, _majority_rate(rates, port.rate_gbps, weight), self._hosts())
            else:
                finding = None
            if finding is not None:
                found.append((port, finding))
        return found

    def _up_count(self, left_out: Port) -> int:
        return sum(1 for p in self.ports if p.up and p is not left_out)

    def _hosts(self) -> int:
        return len(self._per_host)


def _groups(ports: Iterable[Port]) -> dict[tuple[Any, ...], _Group]:
    groups: dict[tuple[Any, ...], _Group] = defaultdict(_Group)
    for port in ports:
        groups[port.group].add(port)
    return groups


def _majority_rate(rates: Mapping[float, float], own: float, own_weight: float) -> float | None:
    """The highest rate that more than half of the peers' weight reaches, ``own`` (of weight
    ``own_weight``) left out; None without a peer."""
    weights = dict(rates)
    weights[own] = weights.get(own, 0.0) - own_weight
    total = math.fsum(w for w in weights.values() if w > 1e-12)
    if total <= 0:
        return None
    reached = 0.0
    for rate in sorted(weights, reverse=True):
        if weights[rate] > 1e-12:
            reached += weights[rate]
            if reached > total / 2 + 1e-12:
                return rate
    return None


def _not_up(port: Port, up_weight: float, peers_weight: float, peers_up: int, peers: int) -> Finding | None:
    state = port.state or "unknown"
    said = f"{port.name}: {state}" + (f" (physical state {port.phys_state})" if port.phys_state else "")
    kind_words = f"ports of its kind ({port.group_words()})"
    if peers_weight > 1e-12 and up_weight / peers_weight > 0.5:
        evidence = f"{said}; {peers_up} of {peers} {kind_words} are up"
        return _finding(port, Severity.FAIL, Cause.NIC_PORT_DOWN, evidence, "telemetry.nic_port_state", None, None)
    if port.kind != IB or port.phys_state == "Disabled":
        return None  # an uncabled onboard interface, or a port switched off on purpose
    evidence = (f"{said}; no peer to compare with: {peers_up} of {peers} {kind_words} are up in this sweep "
                "(not compared, not passed)")
    return _finding(port, Severity.WARN, Cause.NIC_PORT_NOT_COMPARED, evidence, "telemetry.nic_port_state", None, None)


def _slow(port: Port, reference: float | None, hosts: int) -> Finding | None:
    if reference is None or port.rate_gbps is None or port.rate_gbps >= reference * (1 - RATE_TOLERANCE):
        return None
    evidence = (f"{port.name}: {port.state} at {port.rate_words()}; most ports of its kind "
                f"({port.group_words()}, on {_plural(hosts, 'host')}) run at {_text(reference)} Gbit/s or more")
    return _finding(port, Severity.FAIL, Cause.NIC_PORT_RATE, evidence, "telemetry.nic_port_rate", port.rate_gbps,
                    reference)


def _changed(port: Port, previous: PriorCounts) -> Finding | None:
    """A port that was up in the previous sweep and is not now, or trained down since (its own
    history: where every port of its kind changed at once, or it has no peer, the peers cannot
    say)."""
    key = (port.host, port.device)
    if key not in previous.ports or previous.ports[key] is None:
        return None
    before = previous.ports[key]
    assert before is not None
    if not port.up:
        evidence = (f"{port.name}: {port.state or 'unknown'}" + (f" (physical state {port.phys_state})"
                                                                  if port.phys_state else "")
                    + f"; up at {_text(before)} Gbit/s in the previous sweep")
        return _finding(port, Severity.FAIL, Cause.NIC_PORT_DOWN, evidence, "telemetry.nic_port_state", None, None)
    if port.rate_gbps is not None and port.rate_gbps < before * (1 - RATE_TOLERANCE):
        evidence = (f"{port.name}: {port.state} at {port.rate_words()}; it ran at {_text(before)} Gbit/s in the "
                    "previous sweep: trained down since")
        return _finding(port, Severity.FAIL, Cause.NIC_PORT_RATE, evidence, "telemetry.nic_port_rate", port.rate_gbps,
                        before)
    return None


# ------------------------------------------------------------------------------ error counters


@dataclass(frozen=True)
class _CounterSuspect:
    counter: str
    figure: str
    value: float
    count: float
    median: float | None
    peers: int


def _counter_findings(groups: Mapping[tuple[Any, ...], _Group], thresholds: Thresholds,
                      prior: PriorCounts) -> list[Finding]:
    """One warning per port whose counters stand far above their peers' (module docstring)."""
    peers: dict[tuple[Any, ...], PeerCounts] = defaultdict(PeerCounts)
    candidates: list[tuple[Port, str, str, float, float]] = []  # port, counter, figure, judged, count
    floors = {name: float(getattr(thresholds, floor)) for name, (_, floor) in PORT_COUNTERS.items()}
    for key, group in groups.items():
        for port in group.ports:
            for name, count in port.counters.items():
                before = prior.before(port.host, port.device, name, None)
                figure, judged = (COUNT, float(count)) if before is None else \
                    (GROWTH, count - before if count >= before else float(count))  # below: reset, all growth
                peers[(key, name, figure)].add(judged, port.host)
                if judged and judged >= floors[name]:
                    candidates.append((port, name, figure, judged, float(count)))
    for counts in peers.values():
        counts.sort()
    found: dict[tuple[str, str], tuple[Port, list[_CounterSuspect]]] = {}
    for port, name, figure, judged, count in candidates:
        group_peers = peers[(port.group, name, figure)]
        median = group_peers.median_without(judged, port.host)
        if median is not None and judged < thresholds.counter_peer_ratio * median:
            continue
        suspect = _CounterSuspect(name, figure, judged, count, median, group_peers.total - 1)
        found.setdefault((port.host, port.device), (port, []))[1].append(suspect)
    return [_counter_finding(port, suspects, floors) for port, suspects in found.values()]


def _counter_finding(port: Port, suspects: Sequence[_CounterSuspect], floors: Mapping[str, float]) -> Finding:
    worst = max(suspects, key=lambda e: e.value / max(1.0, floors[e.counter]))
    metric = f"telemetry.nic_port_{worst.counter}" + ("_growth" if worst.figure == GROWTH else "")
    evidence = f"{port.name}: " + "; ".join(_counter_evidence(e) for e in suspects)
    return _finding(port, Severity.WARN, Cause.NIC_PORT_ERRORS, evidence, metric, worst.value, worst.median,
                    unit="count")


def _counter_evidence(suspect: _CounterSuspect) -> str:
    return counter_evidence(PORT_COUNTERS[suspect.counter][0], suspect.figure, suspect.value, suspect.count,
                            suspect.median, suspect.peers, "ports of its kind",
                            "no peer port of its kind to compare with")


# ------------------------------------------------------------------------------ shared


def _finding(port: Port, severity: Severity, cause: Cause, evidence: str, metric: str, value: float | None,
             reference: float | None, unit: str = "Gbit/s") -> Finding:
    verb, detail = actions.action(cause, severity)
    return Finding(kind=Kind.NIC_PORT, severity=severity, host=port.host, metric=metric,
                   value=None if value is None else _number(value),
                   reference=None if reference is None else _number(reference),
                   unit=unit if value is not None or reference is not None else None,
                   reference_source="fleet" if reference is not None else None, basis=Basis.TELEMETRY,
                   evidence=evidence, action=verb, action_detail=detail)


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(value, 3)


def _text(value: float) -> str:
    return str(_number(value))


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"
