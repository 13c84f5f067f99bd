"""Slurm's topology.conf for the tree plugin (topology/tree), as a Topology of one plane.

Each line names a switch and its children, nodes or switches, in Slurm's host-list syntax::

    SwitchName=leaf01 Nodes=gpu[001-032] LinkSpeed=400
    SwitchName=spine01 Switches=leaf[01-04]

Keys are case-insensitive, ``#`` starts a comment, and a ``\\`` at the end of a line joins the
next. A leaf is a switch with ``Nodes=`` (tier 1); a switch with ``Switches=`` is one tier above
the highest of its children. Each parent–child pair is one link of one cable whose ports and
rate the file does not say (``LinkSpeed`` is a relative weight in Slurm, with no unit: it is not
read as a rate); nodes are on their leaf at an unknown port and rate.

The file describes one fabric: its plane is shared by every rail (rail None), unless ``rails``
are given, when each rail gets a copy of it. Errors name the line: a switch defined twice, a
child switch no ``SwitchName`` line defines, a node under two leaves, a switch with no children
or with both nodes and switches, switches that contain each other.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetParseError

from ..model import LEAF, MAX_TIER, Attachment, Cable, Switch, Topology
from .draft import PlaneBuilder, Wire, switch_name_problem
from .source import MAX_NODES, MAX_SWITCHES, Where

_KEYS = ("switchname", "switches", "nodes", "linkspeed")
_RANGE = re.compile(r"(\d+)\s*-\s*(\d+)")
_FIX_LINE = "write SwitchName=NAME followed by Nodes=HOSTLIST or Switches=HOSTLIST"


@dataclass(frozen=True)
class _Entry:
    """One SwitchName line: its switch, its child nodes and switches, where it is."""

    name: str
    nodes: tuple[str, ...]
    switches: tuple[str, ...]
    where: Where


def read_slurm(path: str, text: str, *, rails: Sequence[int] | None = None) -> Topology:
    """The Topology of a topology.conf (``text``, read from ``path``): one plane of rail None, or a
    copy for each of ``rails``. Raises InputError naming the file and line."""
    entries = _entries(path, text)
    if not entries:
        Where(path).fail("no SwitchName line", "write one line per switch: SwitchName=leaf01 Nodes=gpu[01-08]")
    tiers = _tiers(entries)
    builder = PlaneBuilder(None, path)
    for entry in entries.values():
        builder.add_switch(Switch(entry.name, tiers[entry.name]), entry.where)
    for entry in entries.values():
        for child in entry.switches:
            builder.add_wire(Wire(child, entry.name, Cable(), entry.where))
        for host in entry.nodes:
            builder.attach(Attachment(host, entry.name), entry.where)
    plane, notes = builder.build()
    planes = (plane,) if not rails else tuple(replace(plane, rail=rail) for rail in sorted(set(rails)))
    return Topology(source=path, planes=planes, notes=tuple(notes))


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(number of its first line, text) of each line, comments cut, continuations joined."""
    lines: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(text.split("\n"), start=1):
        content = raw.split("#", 1)[0].rstrip()
        continued = content.endswith("\\")
        content = content[:-1] if continued else content
        pending = (number, content) if pending is None else (pending[0], f"{pending[1]} {content}")
        if not continued:
            lines.append(pending)
            pending = None
    if pending is not None:
        lines.append(pending)
    return [(number, line) for number, line in lines if line.strip()]


def _entries(path: str, text: str) -> dict[str, _Entry]:
    """Each switch's line by name. Raises InputError for a line of no known form, a switch
    defined twice, a child switch never defined."""
    entries: dict[str, _Entry] = {}
    names = 0
    for number, line in _logical_lines(text):
        entry = _entry(line, Where(path, number))
        names += len(entry.nodes) + len(entry.switches)
        if names > MAX_NODES + MAX_SWITCHES:
            entry.where.fail(f"more than {MAX_NODES + MAX_SWITCHES} nodes and switches named", "check the ranges")
        first = entries.get(entry.name)
        if first is not None:
            entry.where.fail(f"duplicate switch: {entry.name!r} is defined at line {first.where.line} too",
                             "give each switch one SwitchName line")
        entries[entry.name] = entry
    for entry in entries.values():
        for child in entry.switches:
            if child not in entries:
                entry.where.fail(f"switch {child!r} is not defined by any SwitchName line",
                                 "add one or remove it from Switches=")
    return entries


def _entry(line: str, where: Where) -> _Entry:
    values: dict[str, str] = {}
    for word in line.split():
        key, equals, value = word.partition("=")
        if not equals or key.lower() not in _KEYS:
            if key.lower() in ("blockname", "blocksizes"):
                where.fail("a topology/block line: gpudiag reads the tree plugin's switches", _FIX_LINE)
            where.fail(f"not a topology.conf setting: {word[:60]!r}", _FIX_LINE)
        if key.lower() in values:
            where.fail(f"{key} is given twice on one line", "give each setting once")
        values[key.lower()] = value
    name = values.get("switchname")
    if name is None:
        where.fail("a line without SwitchName=", _FIX_LINE)
    problem = switch_name_problem(name)
    if problem is not None:
        where.fail(f"the switch name {name[:60]!r} {problem}", _FIX_LINE)
    nodes = _host_list(values.get("nodes"), "Nodes", where)
    switches = _host_list(values.get("switches"), "Switches", where)
    if not nodes and not switches:
        where.fail(f"switch {name!r} has no Nodes= and no Switches=", "list its nodes or its child switches")
    if nodes and switches:
        where.fail(f"switch {name!r} has both Nodes= and Switches=",
                   "gpudiag puts nodes on leaves only: give its nodes a leaf switch of their own")
    return _Entry(name, nodes, switches, where)


def _host_list(value: str | None, key: str, where: Where) -> tuple[str, ...]:
    """The names of a host list such as ``gpu[001-032,040]``. Raises InputError."""
    if value is None:
        return ()
    if not value:
        where.fail(f"{key}= names nothing", f"list the {key.lower()}, or leave out {key}=")
    for low, high in _RANGE.findall(value):
        if int(high) - int(low) >= MAX_NODES:
            where.fail(f"{key}={value[:60]} holds a range of more than {MAX_NODES} names", "check the range bounds")
    try:
        names = tuple(NodeSet(value, resolver=RESOLVER_NOGROUP))
    except NodeSetParseError as error:
        where.fail(f"{key}={value[:60]} is no host list ({error})", "write ranges as name[1-4,7]")
    if len(names) > MAX_NODES:
        where.fail(f"{key}= names more than {MAX_NODES}", "check the range bounds")
    return names


def _tiers(entries: dict[str, _Entry]) -> dict[str, int]:
    """Each switch's tier: 1 for a leaf, one above its highest child for a parent. Raises
    InputError for switches that contain each other or a tree deeper than MAX_TIER."""
    tiers: dict[str, int] = {}

    def tier(name: str, path: tuple[str, ...]) -> int:
        entry = entries[name]
        if name in path:
            entry.where.fail(f"switches contain each other: {' -> '.join((*path, name))}",
                             "a tree has no loops: fix the Switches= lists")
        if len(path) > MAX_TIER:
            entry.where.fail(f"a tree deeper than {MAX_TIER} tiers", "check the Switches= lists")
        if name not in tiers:
            tiers[name] = LEAF if entry.nodes else 1 + max(tier(child, (*path, name)) for child in entry.switches)
        return tiers[name]

    for name in entries:
        tier(name, ())
    return tiers
