"""The fabric's culprits as findings, and what they cost a job.

A culprit of one part is a ``slow_fabric_link`` (a link between two switches; ``fabric_link``
names its rail, switches and ports) or a ``slow_switch`` (a switch, or a leaf whose every uplink
is slow; ``switch`` names it). A culprit the tests could not split names the set it narrowed to
(``fabric_candidates``) and says so. None names a host, drains a node or keeps one out of a
job: the action is ``inspect``, for whoever runs the network, with the command that reads the
port's counters (``perfquery``/``ibportstate`` on the switch's LID where the topology gives it,
else the switch and port names), and the advice is placement — the leaf to avoid, or keeping a
job under one leaf — never a list of healthy nodes.

A confirmed culprit ``deficit_fail_pct`` or more slow is a ``fail``; a smaller one, or one its
confirm runs could not re-test, a ``warn`` (``confirmed`` false: not a pass, the sweep exits 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..findings import Action, Basis, FabricPart, Finding, Kind, Severity
from ..hosts import fold_hosts
from ..words import plural
from .attribution import FabricAttribution, FabricSuspect
from .elements import LINK, SWITCH, UPLINKS, Element
from .model import LEAF, Plane, Topology

UNIT = "%"


def fabric_findings(attribution: FabricAttribution, topology: Topology, fail_deficit_pct: float,
                    hosts: Sequence[str] = ()) -> list[Finding]:
    """One finding per culprit not cleared by its confirm runs, and an ``unchecked`` for each of
    the pair-tested ``hosts`` the topology does not place (its NIC was judged, its paths were not)."""
    findings = [_finding(s, topology, fail_deficit_pct) for s in attribution.suspects if not s.cleared]
    findings += [_unplaced(host, topology) for host in topology.missing(hosts)]
    return findings


def _finding(suspect: FabricSuspect, topology: Topology, fail_deficit_pct: float) -> Finding:
    plane = topology.plane(suspect.rail)
    assert plane is not None, "a culprit comes from a plane of the topology"
    shown = suspect.confirm if suspect.confirm is not None else suspect.culprit
    deficit = shown.deficit_pct
    severity = Severity.FAIL if suspect.confirmed and deficit >= fail_deficit_pct else Severity.WARN
    kind = _kind(suspect.elements, plane)
    parts = tuple(_part(element, plane) for element in suspect.elements)
    return Finding(kind=kind, severity=severity, host=None, metric=_metric(suspect), value=round(shown.share_pct, 2),
                   reference=100.0, unit=UNIT, reference_source="pairs", deficit_pct=round(deficit, 2),
                   robust_z=None if shown.z == float("-inf") else round(shown.z, 2), confirmed=suspect.confirmed,
                   basis=Basis.RETEST if suspect.confirmed else Basis.SINGLE_RUN,
                   evidence=_evidence(suspect, plane), action=Action.INSPECT,
                   action_detail=_action(suspect.elements, plane), fabric=parts)


def _kind(elements: Sequence[Element], plane: Plane) -> Kind:
    if all(e.kind == SWITCH or (e.kind == UPLINKS and len(elements) == 1) for e in elements):
        return Kind.SLOW_SWITCH
    return Kind.SLOW_FABRIC_LINK


def _part(element: Element, plane: Plane) -> FabricPart:
    if element.kind == LINK:
        link = plane.link_by_key.get((element.names[0], element.names[1]))
        return FabricPart(plane.rail, element.names, None if link is None else link.ports)
    return FabricPart(plane.rail, switch=element.names[0])


def _metric(suspect: FabricSuspect) -> str:
    return f"fabric.{suspect.backend}" + ("" if suspect.rail is None else f".rail{suspect.rail}")


def describe(element: Element, plane: Plane) -> str:
    """``leaf01 port 49 – spine02 port 1`` (its cables where several), ``switch spine02``,
    ``every uplink of leaf01``."""
    if element.kind == LINK:
        link = plane.link_by_key.get((element.names[0], element.names[1]))
        return link.describe() if link is not None else "–".join(element.names)
    if element.kind == UPLINKS:
        return f"every uplink of {element.names[0]}"
    switch = plane.switch_by_name.get(element.names[0])
    return f"{switch.tier_name if switch else 'switch'} {element.names[0]}"


def _evidence(suspect: FabricSuspect, plane: Plane) -> str:
    culprit = suspect.confirm if suspect.confirm is not None else suspect.culprit
    where = f"{plane.describe()} ({suspect.backend})"
    named = [describe(e, plane) for e in suspect.elements]
    what = "streams" if suspect.traced else "pair tests"
    if len(named) == 1:
        head = f"{where}: {named[0]}"
    else:
        head = (f"{where}: one of {', '.join(named)} — the pair tests could not tell them apart "
                f"({_why_unsplit(suspect)})")
    evidence = (f"{head}: the {culprit.observations} {what} through it reached {culprit.share_pct:.1f} % of "
                f"{'the other streams of their pairs' if suspect.traced else 'the healthy pairs'} (median), "
                f"{culprit.slow} of them slow; "
                f"{plural(len(culprit.slow_pairs), 'pair')} through it slow of {len(culprit.pairs)} that crossed it")
    if suspect.clear_pairs:
        evidence += f"; {plural(suspect.clear_pairs, 'pair')} that avoid it were fine"
    if suspect.confirmed and suspect.confirm is not None:
        evidence += f"; confirmed by its confirm runs alone ({suspect.confirm.share_pct:.1f} %)"
    elif not suspect.confirmed and suspect.retested:
        evidence += (f" (not yet confirmed: the {suspect.retested} {what} of its confirm runs through it neither "
                     "showed it slow again nor cleared it; not a pass)")
    elif not suspect.confirmed:
        evidence += " (not yet confirmed: no confirm run re-tested it; not a pass)"
    hosts = _behind(suspect.elements, plane)
    if hosts:
        evidence += f"; nodes behind it: {fold_hosts(hosts)}"
    return evidence


def _why_unsplit(suspect: FabricSuspect) -> str:
    if not suspect.traced:
        return "their paths were not traced, and with ECMP every pair crosses them all"
    return "every tested path that crossed one crossed the others too"


def _behind(elements: Sequence[Element], plane: Plane) -> list[str]:
    """The nodes under the leaves the parts touch (whose traffic to other leaves crosses them)."""
    leaves = {name for e in elements for name in e.names
              if (switch := plane.switch_by_name.get(name)) is not None and switch.tier == LEAF}
    return sorted(host for leaf in leaves for host in plane.hosts_under.get(leaf, ()))


def _action(elements: Sequence[Element], plane: Plane) -> str:
    checks = "; ".join(_check(e, plane) for e in elements[:4])
    leaves = sorted({name for e in elements for name in e.names
                     if (s := plane.switch_by_name.get(name)) is not None and s.tier == LEAF})
    advice = ("until it is fixed, place a job's nodes under one leaf, or keep jobs that span leaves off "
              + " and ".join(leaves) if leaves else
              "until it is fixed, place a job's nodes under one leaf where it can be: traffic between leaves "
              "crosses it")
    return f"for the network team: {checks}; {advice} (no node is at fault: none is drained)"


def _check(element: Element, plane: Plane) -> str:
    """The command that reads the counters of a part's ports."""
    if element.kind == LINK:
        link = plane.link_by_key.get((element.names[0], element.names[1]))
        ends = []
        for index, name in enumerate(element.names):
            switch = plane.switch_by_name.get(name)
            port = None if link is None or link.count != 1 else (link.cables[0].port_a, link.cables[0].port_b)[index]
            if switch is not None and switch.lid is not None and port is not None:
                ends.append(f"perfquery -x {switch.lid} {port} and ibportstate {switch.lid} {port} ({name})")
            elif port is not None:
                ends.append(f"the error and discard counters of {name} port {port}")
            else:
                ends.append(f"the error counters of {name}'s ports to "
                            f"{element.names[1 - index]}")
        return "read " + "; ".join(ends)
    name = element.names[0]
    switch = plane.switch_by_name.get(name)
    if switch is not None and switch.lid is not None:
        return f"read every port of {name}: perfquery -x -a {switch.lid}; check its health and firmware"
    return f"check {name}: its port error and discard counters, health and firmware"


def _unplaced(host: str, topology: Topology) -> Finding:
    return Finding(kind=Kind.UNCHECKED, severity=Severity.WARN, host=host, basis=Basis.COMPARISON,
                   evidence=f"{host} is not in the topology {topology.source}: its NIC was judged with its pair "
                            "tests, the switch links on its paths were not",
                   action=Action.INSPECT, action_detail="add the node to the topology file (or fix its name there)")


def fabric_impact(attribution: FabricAttribution, topology: Topology) -> dict[str, Any] | None:
    """What the fabric's culprits cost a job: each one's part, the nodes behind it and the
    share of cross-leaf bandwidth their collectives lose through it (``loss_pct``), and the
    largest (``fabric_slowdown_pct``); None without a culprit."""
    rows = []
    for suspect in attribution.suspects:
        plane = topology.plane(suspect.rail)
        if suspect.cleared or plane is None:
            continue
        shown = suspect.confirm if suspect.confirm is not None else suspect.culprit
        rows.append({"parts": [describe(e, plane) for e in suspect.elements], "rail": plane.rail,
                     "hosts_behind": _behind(suspect.elements, plane), "loss_pct": round(shown.deficit_pct, 2),
                     "confirmed": suspect.confirmed})
    if not rows:
        return None
    return {"fabric_slowdown_pct": max(row["loss_pct"] for row in rows), "fabric": rows}
