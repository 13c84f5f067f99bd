"""The link schedule with a topology: a screen of at most three rounds that loads every switch
link, and confirm rounds that re-test the fabric's suspects on paths chosen to split them.

Hosts are grouped by the leaves they sit under (one per plane: in a rail-optimised fabric, a
scalable unit). In each screen round some nodes of every group are paired with nodes of another
group — the next group in round 1, a far one in round 2 (another pod, where there are pods) —
and the rest with nodes of their own group, so every round clears NICs on paths that cross no
uplink while it loads the uplinks. Each leaf's pairs to other leaves in one round are capped at
``LOAD_SHARE`` of what its uplinks carry (its nodes' line rate against its uplinks' capacity):
a 2:1 leaf does not look slow for being loaded past what it was built for, and flows hashed
unevenly onto its uplinks still fit. Round 3 gives each node a second partner where rounds 1
and 2 did not. With ECMP each pair's streams spread over its paths: ``stream_count`` asks for
enough of them that each uplink of a leaf carries several.

Every round is a matching (a node in one pair), pairs in canonical order; hosts the topology
does not place form a group of their own. Pure: the same hosts and topology give the same
rounds.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..links.schedule import CONFIRM, SCREEN, Pair, Round, pair_key
from .elements import LINK, SWITCH, UPLINKS, Element
from .model import LEAF, Topology
from .paths import PathModel

# The share of a leaf's uplink capacity one screen round may load: below what it carries, with
# room for flows hashed unevenly, and above half, so a link that lost half its cables shows.
LOAD_SHARE = 0.75
SCREEN_ROUNDS = 3
# perftest runs one ib_write_bw process per QP: 32 at most.
MAX_STREAMS = 32
# Streams per uplink of the widest leaf, so each of its uplinks carries a few of every pair's.
STREAMS_PER_UPLINK = 2
# Pairs a confirm round gives each leaf a suspect part touches (or the suspect, where it touches
# no leaf) at least, and streams it wants through the part (more pairs where each crosses it with
# a small share: a spine–core link of a 3-tier fabric), at most CONFIRM_PAIRS_MOST pairs.
CONFIRM_PAIRS = 3
CONFIRM_STREAMS = 8
CONFIRM_PAIRS_MOST = 32
MAX_CONFIRM_ROUNDS = 2

Group = tuple[str | None, ...]


@dataclass(frozen=True)
class Grouping:
    """The hosts by the leaves they sit under (``groups``, in order), each group's cap on pairs
    to other groups per round, and the hosts no plane places (``unplaced``)."""

    groups: tuple[tuple[str, ...], ...]
    caps: tuple[int, ...]
    keys: tuple[Group, ...]
    unplaced: tuple[str, ...]

    def group_of(self) -> dict[str, int]:
        return {host: index for index, members in enumerate(self.groups) for host in members}


def group_hosts(hosts: Sequence[str], topology: Topology) -> Grouping:
    """``hosts`` by their leaves (see the module), in host order within a group."""
    members: dict[Group, list[str]] = defaultdict(list)
    unplaced = []
    for host in hosts:
        key = topology.group_of(host)
        if None in key:
            unplaced.append(host)
        else:
            members[key].append(host)
    keys = sorted(members, key=lambda key: tuple(k or "" for k in key))
    caps = tuple(_cap(topology, key, len(members[key])) for key in keys)
    groups = tuple(tuple(members[key]) for key in keys)
    if unplaced:
        groups += (tuple(unplaced),)
        caps += (max(1, len(unplaced)),)
        keys += ((None,),)
    return Grouping(groups, caps, tuple(keys), tuple(unplaced))


def _cap(topology: Topology, key: Group, size: int) -> int:
    """Pairs a group may have with other groups in one round: LOAD_SHARE of the tightest of its
    leaves' uplinks, in nodes at line rate (half the group where rates are unknown); one at least."""
    caps = []
    for plane, leaf in zip(topology.planes, key, strict=True):
        if leaf is None:
            continue
        uplinks = plane.uplink_gbps(leaf)
        rates = [a.rate_gbps for a in plane.attachments if a.switch == leaf and a.rate_gbps]
        if uplinks and rates:
            caps.append(math.floor(LOAD_SHARE * uplinks / max(rates) + 1e-9))
    cap = min(caps) if caps else math.ceil(size / 2)
    return max(1, min(cap, size))


def stream_count(topology: Topology, requested: int) -> int:
    """Streams each pair test needs: ``requested``, or STREAMS_PER_UPLINK per uplink of the leaf
    with the most (at most MAX_STREAMS)."""
    widest = max((len(plane.uplinks(leaf)) for plane in topology.planes for leaf in plane.hosts_under), default=0)
    return max(requested, min(MAX_STREAMS, STREAMS_PER_UPLINK * widest))


def fabric_screen_rounds(hosts: Sequence[str], topology: Topology) -> list[Round]:
    """The screen of ``hosts`` (see the module): at most SCREEN_ROUNDS rounds."""
    grouping = group_hosts(hosts, topology)
    count = len(grouping.groups)
    partners: Counter[Pair] = Counter()
    rounds = []
    for number in range(SCREEN_ROUNDS):
        busy: set[str] = set()
        pairs: list[Pair] = []
        if number < 2 and count > 1:
            offset = 1 if number == 0 or count <= 3 else count // 2
            pairs += _cross_pairs(grouping, offset, number, busy)
        if number == 2:
            pairs += _last_pairs(grouping, partners, busy)
        else:
            for members in grouping.groups:
                pairs += _local_pairs([h for h in members if h not in busy], partners, busy)
        partners.update(pairs)
        if pairs:
            rounds.append(Round(SCREEN, tuple(sorted(pairs))))
    return rounds


def _cross_pairs(grouping: Grouping, offset: int, number: int, busy: set[str]) -> list[Pair]:
    """Pairs between each group and the one ``offset`` after it: each group within its cap and
    half its nodes (half of that a side), from the first half of the group in round 1 and the
    second in round 2, so every node also has a partner under its own leaf in one of them."""
    count = len(grouping.groups)
    duty = [min(cap, max(2, len(members) // 2), len(members))
            for cap, members in zip(grouping.caps, grouping.groups, strict=True)]
    left = list(duty)
    pairs = []
    # round 2 takes the boundaries from the other end: a small group used up by its first
    # boundary in round 1 meets its other neighbour there
    order = range(count) if number == 0 else range(count - 1, -1, -1)
    for index in order:
        members = grouping.groups[index]
        other = (index + offset) % count
        if other == index:
            continue
        share = min(max(1, duty[index] // 2), max(1, duty[other] // 2), left[index], left[other])
        mine = _pick(members, busy, share, number * (len(members) // 2))
        theirs = _pick(grouping.groups[other], busy | set(mine), len(mine), number * (len(grouping.groups[other]) // 2))
        for a, b in zip(mine, theirs, strict=False):
            pairs.append(pair_key(a, b))
            busy.update((a, b))
        left[index] -= min(len(mine), len(theirs))
        left[other] -= min(len(mine), len(theirs))
    return pairs


def _pick(members: Sequence[str], busy: set[str], wanted: int, start: int) -> list[str]:
    """Up to ``wanted`` free members, from position ``start`` on, cyclically."""
    if not members or wanted <= 0:
        return []
    found = []
    for step in range(len(members)):
        host = members[(start + step) % len(members)]
        if host not in busy:
            found.append(host)
            if len(found) == wanted:
                break
    return found


def _local_pairs(free: Sequence[str], partners: Mapping[Pair, int], busy: set[str]) -> list[Pair]:
    """Free hosts of one group paired among themselves, each with a partner it has not had
    where one is free (greedy in host order)."""
    pairs = []
    for host in free:
        if host in busy:
            continue
        choices = [other for other in free if other != host and other not in busy]
        fresh = [other for other in choices if pair_key(host, other) not in partners]
        partner = (fresh or choices)[:1]
        if partner:
            pairs.append(pair_key(host, partner[0]))
            busy.update((host, partner[0]))
    return pairs


def _last_pairs(grouping: Grouping, partners: Mapping[Pair, int], busy: set[str]) -> list[Pair]:
    """The last round: hosts that still lack a partner under their own leaf (where it has
    another node) or a second partner, those with fewest partners first, each with a new partner
    under its own leaf where one is free, else (lacking a second partner) any free new one."""
    had: Counter[str] = Counter(host for pair in partners for host in pair)
    group = grouping.group_of()
    every = [host for members in grouping.groups for host in members]

    def local(host: str) -> list[str]:
        return [other for other in grouping.groups[group[host]] if other != host]

    lacking = [host for host in every if had[host] < 2 or
               (local(host) and not any(pair_key(host, other) in partners for other in local(host)))]
    order = {host: index for index, host in enumerate(every)}
    lacking.sort(key=lambda host: (had[host], order[host]))
    wanting = set(lacking)

    def best(candidates: list[str]) -> list[str]:  # hosts that lack a partner too, fewest partners first
        return sorted(candidates, key=lambda other: (other not in wanting, had[other], order[other]))

    pairs = []
    for host in lacking:
        if host in busy:
            continue
        fresh = best([other for other in local(host) if other not in busy and pair_key(host, other) not in partners])
        if not fresh and had[host] < 2:
            fresh = best([other for other in every if other != host and other not in busy
                          and pair_key(host, other) not in partners])
        if fresh:
            pairs.append(pair_key(host, fresh[0]))
            busy.update((host, fresh[0]))
    return pairs


def fabric_confirm_pairs(suspects: Iterable[tuple[Element, ...]], topology: Topology, usable: Sequence[str],
                         tested: Iterable[Pair], streams: int = 4) -> list[Pair]:
    """Pairs of ``streams`` streams that re-test each suspect (a part, or a set of parts to
    split), between ``usable`` hosts (none a NIC suspect): for each leaf it touches, pairs from
    there to leaves it does not touch — new partners first — and for a suspect that touches no
    leaf, pairs whose paths cross it most; enough that CONFIRM_STREAMS of their streams are
    expected through it; a set is split by pairs that cross some of its parts and not all."""
    done = Counter(pair_key(*pair) for pair in tested)
    grouping = group_hosts(usable, topology)
    chosen: list[Pair] = []
    for elements in suspects:
        plane = topology.plane(elements[0].rail)
        if plane is None:
            continue
        model = PathModel(plane)
        touched = _touched_leaves(elements, plane.switch_by_name)
        leaf_pairs = [(x, y) for x in plane.hosts_under for y in plane.hosts_under if x != y]
        for source, target in _splitting(model, elements, touched, leaf_pairs, streams):
            pair = _fresh_pair(plane.hosts_under[source], plane.hosts_under[target], grouping, done, chosen)
            if pair is not None:
                chosen.append(pair)
    return chosen


def _touched_leaves(elements: Sequence[Element], switches: Mapping[str, object]) -> list[str]:
    leaves = set()
    for element in elements:
        if element.kind in (UPLINKS, SWITCH) and getattr(switches.get(element.names[0]), "tier", 0) == LEAF:
            leaves.add(element.names[0])
        if element.kind == LINK:
            leaves |= {name for name in element.names if getattr(switches.get(name), "tier", 0) == LEAF}
    return sorted(leaves)


def _splitting(model: PathModel, elements: Sequence[Element], touched: Sequence[str],
               leaf_pairs: Sequence[tuple[str, str]], streams: int) -> list[tuple[str, str]]:
    """Leaf pairs (a leaf pair again for more pairs) that re-test ``elements``: from each
    touched leaf to leaves not touched (for a set of several parts, those crossing fewest of them
    first, then those crossing them most), else any leaf pair crossing them; see
    ``fabric_confirm_pairs`` for how many."""

    def shares(source: str, target: str) -> list[float]:
        paths = model.between(source, target)
        if paths is None:
            return []
        found = [paths.link_share.get(e.names, 0.0) if e.kind == LINK else
                 paths.switch_share.get(e.names[0], 0.0) if e.kind == SWITCH else
                 float(e.names[0] in (source, target)) for e in elements]
        return [share for share in found if share > 0]

    chosen: list[tuple[str, str]] = []
    for leaf in touched or [None]:
        crossing = {(x, y): found for x, y in leaf_pairs if (leaf is None or x == leaf) and (found := shares(x, y))}
        # to leaves the suspect does not touch where there are any (with two leaves there are none)
        candidates = [pair for pair in crossing if pair[1] not in touched] or list(crossing)
        candidates.sort(key=lambda pair: (len(crossing[pair]), -max(crossing[pair]), _spread(pair, chosen), pair))
        expected = 0.0
        for count in range(CONFIRM_PAIRS_MOST):
            if not candidates or (count >= CONFIRM_PAIRS and expected >= CONFIRM_STREAMS):
                break
            pair = candidates[count % len(candidates)]
            chosen.append(pair)
            expected += streams * min(crossing[pair])
    return chosen


def _spread(pair: tuple[str, str], chosen: Sequence[tuple[str, str]]) -> int:
    """How often the pair's leaves were chosen already (fewer first: the re-tests spread out)."""
    return sum(1 for x, y in chosen for leaf in pair if leaf in (x, y))


def _fresh_pair(sources: Sequence[str], targets: Sequence[str], grouping: Grouping, done: Mapping[Pair, int],
                chosen: Sequence[Pair]) -> Pair | None:
    usable = set(grouping.group_of())
    busy = {host for pair in chosen for host in pair}
    options = [(done.get(pair_key(a, b), 0), a, b) for a in sources for b in targets
               if a in usable and b in usable and a not in busy and b not in busy]
    if not options:
        return None
    _, a, b = min(options)
    return pair_key(a, b)


def pack_rounds(first: Sequence[Round], extra: Sequence[Pair], limit: int = MAX_CONFIRM_ROUNDS) -> list[Round]:
    """``first`` (the NIC confirm rounds) with the ``extra`` pairs fitted in first-fit, a new
    round where no round has both ends free, at most ``limit`` rounds more than ``first`` has
    (pairs beyond them are left out)."""
    rounds = [list(r.pairs) for r in first]
    busy = [set(host for pair in r.pairs for host in pair) for r in first]
    ceiling = len(first) + limit
    for pair in extra:
        if pair in {p for r in rounds for p in r}:
            continue
        index = next((i for i, used in enumerate(busy) if not used & set(pair)), len(rounds))
        if index >= ceiling:
            continue
        if index == len(rounds):
            rounds.append([])
            busy.append(set())
        rounds[index].append(pair)
        busy[index].update(pair)
    return [Round(CONFIRM, tuple(sorted(pairs))) for pairs in rounds if pairs]
