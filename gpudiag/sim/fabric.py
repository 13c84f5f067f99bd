"""A simulated fleet's switched fabric: the fleet file's ``fabric`` section, its topology, the
fabric faults and each pair test's per-stream figures.

The section (every field optional but ``leaves`` and ``spines``)::

    "fabric": {"leaves": 8, "spines": 4, "pods": 1, "cores": 0, "uplinks": 1, "core_uplinks": 1,
               "oversubscription": 1.0, "ecmp": true, "traced": true, "planes": "per_rail",
               "stream_cv": 0.01}

Nodes fill the leaves in order, ``ceil(nodes / leaves)`` a leaf. Every leaf has ``uplinks``
cables to each spine of its pod; with ``pods`` > 1 the pods' spines reach each other through the
``cores`` (every spine ``core_uplinks`` cables to every core), a 3-tier fabric. A cable's rate
makes each leaf ``oversubscription`` : 1 (its nodes' line rate over its uplinks); a spine's core
cables carry what its leaves' cables do. ``planes``: ``per_rail`` (rail r of every node is cabled
to plane r's own switches, named ``r<r>-leaf01``, …: a rail-optimised fabric) or ``shared``
(one fabric for every rail: ``leaf01``, ``spine01``, ``core01``). ``rails``: how many of each
node's rails the fabric carries and the pair tests use (default: all).

Faults (the fleet file's ``faults`` list): ``slow_uplink`` (``a``, ``b``: the link's two
switches, ``factor``: what a stream across it keeps, as a cable with errors or a port trained
down slows every flow it carries), ``uplink_down`` (``a``, ``b``, ``cables``: how many of the
link's cables are down; the rest carry its share of the traffic, so it slows only when a round
loads it past what they carry) and ``slow_switch`` (``switch``, ``factor``: every stream through
it). Names are the topology's.

A pair test of ``streams`` streams measures each direction: each stream takes one equal-cost
path — drawn per stream and attempt with ECMP (a new source port each test), or the one path a
destination-based routing gives without it — at the pair's rate split evenly, × each fault on
its path, × each link's load (the round's demand on it against what it carries), with
``stream_cv`` noise; what the slowed streams leave of the pair's rate the others take up (TCP
streams and RDMA queue pairs share the NIC), so a slow path leaves the pair's sum whole while its
slowest stream falls. The figure is the sum of the slower direction's streams; the streams go
with it, their paths too where ``traced`` (the probe traced them). Only the pair tests see this
model; the analysis gets the figures and the topology, never the faults.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..fabric.model import LEAF, Attachment, Cable, FabricLink, Plane, Switch, Topology, link_key
from ..fabric.paths import PathModel
from ..links.groups import StreamFigure
from .reader import FieldReader, join_path, one_of

FABRIC_FIELDS = ("leaves", "spines", "pods", "cores", "uplinks", "core_uplinks", "oversubscription", "ecmp",
                 "traced", "planes", "stream_cv", "rails")
PLANE_KINDS = ("per_rail", "shared")
FABRIC_FAULT_FIELDS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "slow_uplink": (("a", "b", "factor"), ()),
    "uplink_down": (("a", "b", "cables"), ()),
    "slow_switch": (("switch", "factor"), ()),
}
MAX_SWITCHES = 20_000


@dataclass(frozen=True)
class FabricSpec:
    """The fleet file's ``fabric`` section, checked (see the module docstring)."""

    leaves: int
    spines: int
    pods: int = 1
    cores: int = 0
    uplinks: int = 1
    core_uplinks: int = 1
    oversubscription: float = 1.0
    ecmp: bool = True
    traced: bool = True
    planes: str = "per_rail"
    stream_cv: float = 0.01
    rails: int | None = None  # the rails the pair tests use (None: every rail of each node)


@dataclass(frozen=True)
class FabricFault:
    """A planted fabric fault: ``kind`` (slow_uplink, uplink_down, slow_switch), the link
    (``link``: its canonical switch pair) or ``switch``, the ``factor`` a stream keeps, or how
    many ``cables`` are down."""

    kind: str
    link: tuple[str, str] | None = None
    switch: str | None = None
    factor: float = 1.0
    cables: int = 0


def fabric_spec(read: FieldReader, data: Any, nodes: int, default_stream_cv: float) -> FabricSpec | None:
    """The ``fabric`` section (None when the file has none). Raises InputError."""
    if data is None:
        return None
    read.keys(data, "fabric", FABRIC_FIELDS, ("leaves", "spines"))
    leaves = read.integer(data, "leaves", path="fabric", low=1, high=nodes)
    pods = read.integer(data, "pods", 1, "fabric", low=1, high=leaves)
    cores = read.integer(data, "cores", 0, "fabric", low=0, high=1024)
    if leaves % pods:
        raise read.error("fabric.pods", f"{leaves} leaves do not split into {pods} pods alike")
    if pods > 1 and cores == 0:
        raise read.error("fabric.cores", f"{pods} pods need cores to reach each other; give cores >= 1")
    spec = FabricSpec(
        leaves=leaves, spines=read.integer(data, "spines", path="fabric", low=1, high=1024), pods=pods, cores=cores,
        uplinks=read.integer(data, "uplinks", 1, "fabric", low=1, high=64),
        core_uplinks=read.integer(data, "core_uplinks", 1, "fabric", low=1, high=64),
        oversubscription=_positive(read, data, "oversubscription", 1.0, 64.0),
        ecmp=read.flag(data, "ecmp", True, "fabric"), traced=read.flag(data, "traced", True, "fabric"),
        planes=one_of(read, {"planes": data.get("planes", "per_rail")}, "planes", "fabric", PLANE_KINDS,
                      "a plane layout"),
        stream_cv=_positive(read, data, "stream_cv", default_stream_cv, 0.5, zero=True),
        rails=read.integer(data, "rails", path="fabric", low=1, high=64) if "rails" in data else None)
    if (spec.leaves + spec.spines * spec.pods + spec.cores) > MAX_SWITCHES:
        raise read.error("fabric", f"more than {MAX_SWITCHES} switches in a plane")
    return spec


def _positive(read: FieldReader, data: dict[str, Any], key: str, default: float, high: float,
              zero: bool = False) -> float:
    value = float(read.value(data, key, default, float, "fabric"))
    if not (0.0 <= value if zero else 0.0 < value) or value > high:
        raise read.error(f"fabric.{key}", f"{value:g} is out of range {'0' if zero else '(0'}..{high:g}]")
    return value


@dataclass(frozen=True)
class NodeRails:
    """What the topology needs of one node: its name, rails and each rail's line rate (Gb/s)."""

    host: str
    rails: int
    line_rate_gbps: float


def fabric_topology(spec: FabricSpec, nodes: Sequence[NodeRails], source: str) -> Topology:
    """The fabric of ``spec`` over ``nodes`` (in fleet order), one plane per rail or one shared."""
    rails = max(node.rails for node in nodes)
    if spec.rails is not None:
        rails = min(rails, spec.rails)
        nodes = [NodeRails(n.host, min(n.rails, spec.rails), n.line_rate_gbps) for n in nodes]
    if spec.planes == "shared":  # a node's every rail on one fabric: its leaf port carries them all
        return Topology(source, (_plane(spec, [NodeRails(n.host, n.rails, n.rails * n.line_rate_gbps) for n in nodes],
                                        None, ""),))
    return Topology(source, tuple(_plane(spec, [n for n in nodes if n.rails > rail], rail, f"r{rail}-")
                                  for rail in range(rails)))


def _plane(spec: FabricSpec, nodes: Sequence[NodeRails], rail: int | None, prefix: str) -> Plane:
    per_leaf = math.ceil(len(nodes) / spec.leaves) if nodes else 1
    line = max((node.line_rate_gbps for node in nodes), default=400.0)
    leaf_names = [f"{prefix}leaf{i + 1:02d}" for i in range(spec.leaves)]
    spine_names = [f"{prefix}spine{i + 1:02d}" for i in range(spec.spines * spec.pods)]
    core_names = [f"{prefix}core{i + 1:02d}" for i in range(spec.cores)]
    lids = iter(range(1, 1 + len(leaf_names) + len(spine_names) + len(core_names)))
    switches = ([Switch(name, LEAF, lid=next(lids)) for name in leaf_names]
                + [Switch(name, 2, lid=next(lids)) for name in spine_names]
                + [Switch(name, 3, lid=next(lids)) for name in core_names])
    uplink_gbps = line * per_leaf / (spec.spines * spec.uplinks * spec.oversubscription)
    leaves_per_pod = spec.leaves // spec.pods
    links = []
    for index, leaf in enumerate(leaf_names):
        pod = index // leaves_per_pod
        for s in range(spec.spines):
            spine_index = pod * spec.spines + s
            cables = tuple(Cable(str(per_leaf + s * spec.uplinks + c + 1),
                                 str((index % leaves_per_pod) * spec.uplinks + c + 1), uplink_gbps)
                           for c in range(spec.uplinks))
            links.append(FabricLink(leaf, spine_names[spine_index], cables))
    core_gbps = uplink_gbps * spec.uplinks * leaves_per_pod / max(1, spec.cores * spec.core_uplinks)
    for s, spine in enumerate(spine_names):
        for c, core in enumerate(core_names):
            cables = tuple(Cable(str(leaves_per_pod * spec.uplinks + c * spec.core_uplinks + k + 1),
                                 str(s * spec.core_uplinks + k + 1), core_gbps) for k in range(spec.core_uplinks))
            links.append(FabricLink(spine, core, cables))
    attachments = tuple(Attachment(node.host, leaf_names[min(i // per_leaf, spec.leaves - 1)], str(i % per_leaf + 1),
                                   node.line_rate_gbps, f"rail{rail}" if rail is not None else None)
                        for i, node in enumerate(nodes))
    return Plane(rail, tuple(switches), tuple(links), attachments)


def check_fabric_fault(read: FieldReader, entry: dict[str, Any], path: str, kind: str,
                       topology: Topology | None) -> FabricFault:
    """A fabric fault of the ``faults`` list, its switches checked against ``topology``. Raises
    InputError (a fabric fault in a fleet without a fabric section, a switch or link it lacks)."""
    required, optional = FABRIC_FAULT_FIELDS[kind]
    read.keys(entry, path, ("kind", *required, *optional), required)
    if topology is None:
        raise read.error(join_path(path, "kind"), f"{kind} needs a fabric section (leaves, spines) in the fleet file")
    switches = {s.name: (plane, s) for plane in topology.planes for s in plane.switches}
    if kind == "slow_switch":
        name = read.text(entry, "switch", path=path)
        if name not in switches:
            raise read.error(join_path(path, "switch"), f"{name!r} is no switch of the fabric")
        return FabricFault(kind, switch=name, factor=read.factor(entry, "factor", 1.0, path))
    ends = [read.text(entry, key, path=path) for key in ("a", "b")]
    for key, name in zip(("a", "b"), ends, strict=True):
        if name not in switches:
            raise read.error(join_path(path, key), f"{name!r} is no switch of the fabric")
    plane = switches[ends[0]][0]
    key = link_key(ends[0], ends[1], {s.name: s.tier for s in plane.switches})
    link = plane.link_by_key.get(key)
    if link is None:
        raise read.error(join_path(path, "b"), f"no link joins {ends[0]} and {ends[1]}")
    if kind == "slow_uplink":
        return FabricFault(kind, link=key, factor=read.factor(entry, "factor", 1.0, path))
    if link.count < 2:
        raise read.error(join_path(path, "cables"), f"{ends[0]}–{ends[1]} has one cable: a link needs two or more "
                         "for some to be down while it still carries traffic")
    down = read.integer(entry, "cables", path=path, low=1, high=link.count - 1)
    return FabricFault(kind, link=key, cables=down)


class FabricNetwork:
    """The fabric's effect on pair tests: each stream's path and rate. Thread-safe."""

    def __init__(self, spec: FabricSpec, topology: Topology, faults: Sequence[FabricFault], seed: int) -> None:
        self.spec = spec
        self.topology = topology
        self._models = {plane.rail: PathModel(plane) for plane in topology.planes}
        self._tiers = {plane.rail: {s.name: s.tier for s in plane.switches} for plane in topology.planes}
        self._link_factor = {f.link: f.factor for f in faults if f.kind == "slow_uplink" and f.link}
        self._switch_factor = {f.switch: f.factor for f in faults if f.kind == "slow_switch" and f.switch}
        self._down = {f.link: f.cables for f in faults if f.kind == "uplink_down" and f.link}
        self._seed = seed
        self._load: dict[tuple[int | None, tuple[str, str], bool], float] = {}

    def round_started(self, pairs: Sequence[tuple[str, str]]) -> None:
        """The round's demand on every link: each pair's rate (the slower end's line rate in the
        plane) spread over its paths, client to server (the phase every pair runs at once first;
        the reverse phase mirrors it)."""
        load: dict[tuple[int | None, tuple[str, str], bool], float] = defaultdict(float)
        for model in self._models.values():
            plane = model.plane
            for a, b in pairs:
                paths = model.of_pair(a, b)
                rates = [plane.attachment_of[host].rate_gbps for host in (a, b) if host in plane.attachment_of]
                if paths is None or len(rates) < 2 or None in rates:
                    continue
                rate = min(r for r in rates if r is not None)
                for key, share in paths.link_share.items():
                    up = paths.link_up_share.get(key, 0.0)
                    load[(plane.rail, key, True)] += rate * up
                    load[(plane.rail, key, False)] += rate * (share - up)
        self._load = dict(load)

    def streams(self, a: str, b: str, rail: int, pair_gbps: float, count: int,
                attempt: int) -> tuple[tuple[StreamFigure, ...], tuple[StreamFigure, ...]] | None:
        """The ``count`` streams of each direction of ``a``–``b`` on ``rail`` (a→b, then b→a) for a
        pair that would reach ``pair_gbps`` on an ideal fabric; None when the topology does not
        place both (the pair then measures as without a fabric)."""
        model = self._model(rail)
        leaf_a, leaf_b = model.plane.leaf_of(a), model.plane.leaf_of(b)
        if leaf_a is None or leaf_b is None:
            return None
        forward = self._direction(model, rail, (a, leaf_a), (b, leaf_b), pair_gbps, count, attempt, False)
        backward = self._direction(model, rail, (b, leaf_b), (a, leaf_a), pair_gbps, count, attempt, True)
        if forward is None or backward is None:
            return None
        return forward, backward

    def _direction(self, model: PathModel, rail: int | None, source: tuple[str, str], target: tuple[str, str],
                   pair_gbps: float, count: int, attempt: int, back: bool) -> tuple[StreamFigure, ...] | None:
        """One direction's streams; ``back``: the server-to-client phase, when every pair of the
        round sends the other way (a link's load in one direction is then its load in the other
        in the first phase)."""
        rng = random.Random(f"{self._seed}:streams:{source[0]}:{target[0]}:{rail}:{attempt}:{'ba' if back else 'ab'}")
        fixed = sum(map(ord, target[0]))  # destination-based routing: one path for every stream
        choose = rng.randrange if self.spec.ecmp else (lambda n: fixed % n)
        paths = []
        for _ in range(count):
            hops = model.walk(source[1], target[1], choose)
            if hops is None:
                return None
            paths.append(hops)
        share = pair_gbps / count
        rates = _shared([share * self._path_factor(model, hops, back) for hops in paths], share)
        return tuple(StreamFigure(max(0.0, rate * rng.gauss(1.0, self.spec.stream_cv)),
                                  hops if self.spec.traced else None) for rate, hops in zip(rates, paths, strict=True))

    def _path_factor(self, model: PathModel, hops: Sequence[str], back: bool) -> float:
        factor = math.prod(self._switch_factor.get(hop, 1.0) for hop in hops)
        tiers = self._tiers[model.plane.rail]
        for first, second in zip(hops, hops[1:], strict=False):
            key = link_key(first, second, tiers)
            up = (tiers[second] > tiers[first]) != back
            factor *= self._link_factor.get(key, 1.0) * self._load_factor(model, key, up)
        return factor

    def _load_factor(self, model: PathModel, key: tuple[str, str], up: bool) -> float:
        """What a stream keeps of its rate on a link the round loads past what its working cables
        carry (1.0 otherwise)."""
        link = model.link(key)
        capacity = link.capacity_gbps
        demand = self._load.get((model.plane.rail, key, up), 0.0)  # the round's loads, replaced whole
        if capacity is None or demand <= 0:
            return 1.0
        capacity *= (link.count - self._down.get(key, 0)) / link.count
        return 1.0 if demand <= capacity else capacity / demand

    def _model(self, rail: int | None) -> PathModel:
        plane = self.topology.plane(rail)
        assert plane is not None, "every rail has a plane: the fabric is built for the fleet's rails"
        return self._models[plane.rail]


def _shared(caps: Sequence[float], share: float) -> list[float]:
    """Each stream's rate: its path's ``caps`` where they hold it below its ``share`` of the pair,
    and the rest of the pair's rate shared by the streams no path holds back."""
    free = [i for i, cap in enumerate(caps) if cap >= share]
    if not free:
        return list(caps)
    slack = math.fsum(share - cap for cap in caps if cap < share)
    return [cap if cap < share else share + slack / len(free) for cap in caps]
