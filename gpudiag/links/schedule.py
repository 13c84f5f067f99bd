"""The pairwise link schedule: which node pairs test their links together, round by round.

A *round* is a set of pair tests that run at once; a node is in at most one pair per round (every
round is a matching), so a pair's figure never shares a NIC with another test of the same round.
Rounds run one after another. Per-rail pairs (rail i ↔ rail i) run together inside one pair test,
so rails never appear here. Hosts that failed their node probes or are unreachable are left out
by the caller: every schedule closes around whatever hosts it is given, in the order given (a
cycle follows that order, so neighbours in a nodeset are partners in the screen).

- ``screen_rounds``: the cycle 0–1–2–…–(N−1)–0 in two rounds, every node tested with two
  partners, N pair tests in all (a third, one-pair round for odd N).
- ``confirm_rounds``: each suspect node re-paired with a node that passed, and each suspect pair
  re-tested, in as few rounds as possible.
- ``full_rounds``: the round-robin circle method, every unordered pair exactly once.

Pure functions: the same hosts give the same rounds. A pair is always written in canonical order
(the two names sorted), so ``("node02", "node01")`` and ``("node01", "node02")`` are one pair.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

SCREEN = "screen"
CONFIRM = "confirm"
FULL = "full"
PHASES = (SCREEN, CONFIRM, FULL)

Pair = tuple[str, str]


def pair_key(a: str, b: str) -> Pair:
    """The canonical form of the unordered pair ``a``–``b``: the two names sorted. Raises
    ValueError when ``a == b`` (a node is never its own partner)."""
    if a == b:
        raise ValueError(f"a pair needs two different hosts, got {a!r} twice")
    return (a, b) if a < b else (b, a)


@dataclass(frozen=True)
class Round:
    """Pair tests that run at once in one ``phase`` (``screen``, ``confirm`` or ``full``).
    ``pairs`` are canonical (see ``pair_key``) and disjoint. Raises ValueError otherwise."""

    phase: str
    pairs: tuple[Pair, ...]

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"unknown phase {self.phase!r}; expected one of {', '.join(PHASES)}")
        seen: set[str] = set()
        for a, b in self.pairs:
            if pair_key(a, b) != (a, b):
                raise ValueError(f"pair ({a!r}, {b!r}) is not in canonical order")
            if a in seen or b in seen:
                raise ValueError(f"a host is in two pairs of one round: ({a!r}, {b!r})")
            seen.update((a, b))

    @property
    def hosts(self) -> frozenset[str]:
        """Every host that tests a link in this round."""
        return frozenset(host for pair in self.pairs for host in pair)

    def to_dict(self) -> dict[str, object]:
        return {"phase": self.phase, "pairs": [list(pair) for pair in self.pairs]}


@dataclass(frozen=True)
class Suspects:
    """What a round of attribution could not settle: ``hosts`` to re-pair with a node that passed
    (slow with every partner so far, or tested with one partner only), and ``pairs`` to re-test
    as they are (a low figure not yet repeated). Both sorted, pairs canonical."""

    hosts: tuple[str, ...] = ()
    pairs: tuple[Pair, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.hosts or self.pairs)


def screen_rounds(hosts: Sequence[str], stride: int = 1) -> list[Round]:
    """The screen: every node tested with the nodes ``stride`` places before and after it in
    ``hosts`` (cyclically) — the cycle ``hosts[0]``–``hosts[1]``–…–``hosts[0]`` for stride 1 —
    as rounds of disjoint pairs, N pair tests in all.

    A stride splits the hosts into gcd(N, stride) cycles of N/gcd nodes each. A cycle of even
    length is two matchings: round 1 is its pairs (0,1)(2,3)…, round 2 its pairs (1,2)(3,4)…
    and the one that closes it. A cycle of odd length cannot be split into two matchings: its
    closing pair runs in a third round (one pair per cycle, all disjoint). A "cycle" of two
    nodes (stride N/2) is one pair: one round, each node with one partner (its attribution
    waits for a confirm round). Stride 1 pairs neighbours in a nodeset (often one leaf switch).

    Strides 1, 2, …, ⌊N/2⌋ test every unordered pair exactly once between them, so a screen
    that moves to the next stride each sweep (see ``next_stride``) reaches every pair over
    ⌊N/2⌋ sweeps, while each sweep costs N pair tests. N ≤ 1: no rounds. Raises ValueError when
    a host appears twice or ``stride`` is not in 1..max(1, ⌊N/2⌋).
    """
    names = _distinct(hosts)
    count = len(names)
    if not 1 <= stride <= max(1, count // 2):
        raise ValueError(f"stride must be from 1 to {max(1, count // 2)} for {count} hosts, got {stride}")
    if count < 2:
        return []
    rounds: list[list[Pair]] = [[], [], []]
    for cycle in _stride_cycles(names, stride):
        length = len(cycle)
        if length == 2:
            rounds[0].append(pair_key(cycle[0], cycle[1]))
            continue
        rounds[0] += [pair_key(cycle[i], cycle[i + 1]) for i in range(0, length - 1, 2)]
        rounds[1] += [pair_key(cycle[i], cycle[(i + 1) % length]) for i in range(1, length - length % 2, 2)]
        if length % 2:
            rounds[2].append(pair_key(cycle[-1], cycle[0]))
    return [Round(SCREEN, tuple(pairs)) for pairs in rounds if pairs]


def next_stride(previous: int | None, count: int) -> int:
    """The stride of the next screen of ``count`` hosts after one at ``previous`` (None: none
    before): 1, 2, …, ⌊N/2⌋, then 1 again."""
    top = max(1, count // 2)
    return 1 if previous is None or previous >= top else previous + 1


def _stride_cycles(names: Sequence[str], stride: int) -> list[list[str]]:
    count = len(names)
    cycles = []
    for start in range(math.gcd(count, stride)):
        cycles.append([names[(start + step * stride) % count] for step in range(count // math.gcd(count, stride))])
    return cycles


def full_rounds(hosts: Sequence[str]) -> list[Round]:
    """Every unordered pair of ``hosts`` exactly once, by the round-robin circle method: N−1
    rounds of N/2 disjoint pairs for even N; for odd N, N rounds of (N−1)/2 pairs with one node
    sitting out each round. N ≤ 1: no rounds. Raises ValueError when a host appears twice."""
    names: list[str | None] = list(_distinct(hosts))
    if len(names) < 2:
        return []
    if len(names) % 2:
        names.append(None)  # a bye: whoever meets it sits the round out
    count = len(names)
    fixed, ring = names[0], names[1:]
    rounds = []
    for turn in range(count - 1):
        order = [fixed, *ring[turn:], *ring[:turn]]
        pairs = tuple(pair_key(a, b) for a, b in (
            (order[i], order[count - 1 - i]) for i in range(count // 2)) if a is not None and b is not None)
        rounds.append(Round(FULL, pairs))
    return rounds


def confirm_rounds(suspects: Suspects, passed: Sequence[str], tested: Iterable[Pair] = (),
                   rates: Mapping[str, float] | None = None, levels: Mapping[Pair, float] | None = None) -> list[Round]:
    """Confirm rounds for what the screen could not settle, in as few rounds as possible.

    Policy:
    - Each suspect pair is re-tested as it is (the same two ends), to see whether its low
      figure repeats.
    - Each suspect host is re-paired with one host of ``passed`` (hosts whose NIC a healthy pair
      has shown good, most trusted first): the first one, in ``passed`` order, that is free in
      the round and was not yet its partner (``tested``); only when every passed host already
      was its partner, one that was. One round holds as many of these as there are free passed
      hosts; suspects left over go to a further round, so a fleet with fewer passed hosts than
      suspects needs more rounds but every re-pairing still has a partner known to be good.
    - Placement is first fit, suspect pairs first, then suspect hosts in name order. With
      enough passed hosts that is one round; a host in two of these tests (a suspect host that
      is also an end of a suspect pair, or an end of two suspect pairs) takes one round each.
    - When no host passed (every measured pair was low: several faults at once in a small
      fleet, or the whole fabric below its line rate), suspect hosts are paired with each
      other instead, in one round, only with partners they have not had yet (greedy in name
      order, then partners swapped so that as many as possible get one); a pair that comes
      back healthy clears both ends, one that stays low adds a partner to each. Suspects with no
      such partner left re-run the pair among them run the fewest times (a small job: a second
      run is all there is to learn), the fastest of those first (``levels``: each pair's mean
      figure, pair_levels). A healthy pair's chance dip under the floor on one rail is what a
      second run undoes; a pair with a NIC slow on every rail runs as slow again. In a 4-node
      job with two NICs at 60 % and 4 % link noise, re-running those first left the two healthy
      hosts `unchecked` in 7 of 20 jobs, their one healthy pair never run again.
    - A partner not yet tested is preferred even when it costs a further round: repeating a
      pair the host already had adds no evidence about the host's NIC.
    - With ``rates`` (each host's line rate), a partner at the suspect's rate or above comes
      before any slower one: a 400 Gb/s NIC paired with a 200 Gb/s host runs at 200 and tells
      nothing of its own rate (a healthy 5-node fleet of three models left a 400 Gb/s host half-way
      below unchecked, its fresh partner a 200 Gb/s one). Suspects with no fresh passed partner at
      their rate or above, two or more at one rate, are paired among themselves: fresh pairs
      first, and where no passed host runs at their rate at all, as when none passed. A 6-node
      job of two models, one H100 NIC slow, left a healthy H100 ``unchecked``: its other H100
      partner dipped under the floor on a rail and was a suspect too, and both were re-paired with
      A100 hosts; with another H100 NIC slow, its two partners re-ran their pairs with it, never
      met each other, and the job's network was left unconfirmed.

    ``tested``: pairs already measured (either order). Returns [] when there are no suspects.
    """
    done = Counter(pair_key(a, b) for a, b in tested)
    builder = _RoundBuilder()
    for a, b in sorted(pair_key(a, b) for a, b in suspects.pairs):
        builder.place((a, b))
    good = [host for host in _distinct(passed) if host not in set(suspects.hosts)]
    if not good:
        _pair_suspects_together(sorted(set(suspects.hosts)), done, builder, levels or {})
        return [Round(CONFIRM, pairs) for pairs in builder.rounds]
    rated = rates or {}
    # Suspects with no fresh partner at their line rate or above among the passed hosts (their
    # partners at a lower rate say nothing of their NICs): paired among themselves at their rate,
    # fresh pairs first; where no passed host runs at that rate at all, as when none passed.
    unmet: dict[float, list[str]] = defaultdict(list)
    for host in sorted(set(suspects.hosts)):
        if host in rated and not any(rated.get(p, 0.0) >= rated[host] and pair_key(host, p) not in done
                                     for p in good):
            unmet[rated[host]].append(host)
    placed: set[str] = set()
    for rate, hosts in sorted(unmet.items()):
        if len(hosts) < 2:
            continue
        if any(rated.get(p, 0.0) >= rate for p in good):
            for pair in _fresh_matching(hosts, done):
                builder.place(pair)
                placed.update(pair)
        else:
            _pair_suspects_together(hosts, done, builder, levels or {})
            placed.update(hosts)
    for host in sorted(set(suspects.hosts) - placed):
        builder.place_with_partner(host, good, done, rates)
    return [Round(CONFIRM, pairs) for pairs in builder.rounds]


def pair_levels(figures: Iterable[tuple[Pair, float | None]]) -> dict[Pair, float]:
    """Each pair's mean figure over its measured runs and rails (``figures``: each run's pair and
    Gb/s, None where it measured nothing), keyed in pair_key order."""
    sums: dict[Pair, list[float]] = defaultdict(list)
    for pair, gbps in figures:
        if gbps is not None:
            sums[pair_key(*pair)].append(gbps)
    return {pair: math.fsum(values) / len(values) for pair, values in sums.items()}


def _pair_suspects_together(hosts: Sequence[str], done: Mapping[Pair, int], builder: _RoundBuilder,
                            levels: Mapping[Pair, float]) -> None:
    """No host passed: pair suspects with suspects they have not been tested with, in one round;
    those left without one re-run the pair among them run the fewest times, the fastest first (a
    small job has no fresh partner left, and a second run is all there is to learn)."""
    made = _fresh_matching(hosts, done)
    paired = {host for pair in made for host in pair}
    left = [host for host in hosts if host not in paired]
    again = sorted((done.get(pair_key(a, b), 0), -levels.get(pair_key(a, b), 0.0), pair_key(a, b))
                   for i, a in enumerate(left) for b in left[i + 1:])
    for _, _, (a, b) in again:
        if a not in paired and b not in paired:
            made.append((a, b))
            paired |= {a, b}
    for pair in made:
        builder.place(pair)


def _fresh_matching(hosts: Sequence[str], done: Mapping[Pair, int]) -> list[Pair]:
    """Disjoint pairs of ``hosts`` that are not in ``done``: greedy in the order given, then
    each two hosts left over are fitted in by swapping partners with a pair already made
    (u, v left and (x, y) made become (u, x) and (v, y), or (u, y) and (v, x))."""

    def fresh(a: str, b: str) -> bool:
        return pair_key(a, b) not in done

    made: list[Pair] = []
    left: list[str] = []
    for host in hosts:
        partner = next((other for other in left if fresh(host, other)), None)
        if partner is None:
            left.append(host)
        else:
            left.remove(partner)
            made.append(pair_key(partner, host))
    changed = True
    while changed and len(left) >= 2:
        changed = False
        for u, v in ((u, v) for i, u in enumerate(left) for v in left[i + 1:]):
            swap = next(((index, first, second) for index, (x, y) in enumerate(made)
                         for first, second in (((u, x), (v, y)), ((u, y), (v, x)))
                         if fresh(*first) and fresh(*second)), None)
            if swap is not None:
                index, first, second = swap
                made[index:index + 1] = [pair_key(*first), pair_key(*second)]
                left.remove(u)
                left.remove(v)
                changed = True
                break
    return made


class _RoundBuilder:
    """First-fit packing of pairs into rounds that stay matchings."""

    def __init__(self) -> None:
        self.rounds: list[tuple[Pair, ...]] = []
        self._busy: list[set[str]] = []

    def place(self, pair: Pair) -> None:
        """Put ``pair`` in the first round where both ends are free (a new round if none)."""
        index = next((i for i, busy in enumerate(self._busy) if not busy & set(pair)), len(self.rounds))
        self._add(index, pair)

    def place_with_partner(self, host: str, partners: Sequence[str], done: Mapping[Pair, int],
                           rates: Mapping[str, float] | None = None) -> None:
        """Pair ``host`` with a partner from ``partners`` in the first round where both are free:
        a partner not yet tested with ``host`` if any round has one, else the partner it was
        tested with the fewest times (``done``: how many results each pair has), so that re-runs
        go round its partners; partners at ``host``'s line rate or above (``rates``) before any
        slower one."""
        others = [p for p in partners if p != host]
        rate = (rates or {}).get(host)
        able = [p for p in others if rate is None or (rates or {}).get(p, 0.0) >= rate]
        slower = [p for p in others if p not in able]
        for group in (able, slower):
            fresh = [p for p in group if pair_key(host, p) not in done]
            again = sorted(group, key=lambda p: done.get(pair_key(host, p), 0))
            for candidates in (fresh, again):
                if not candidates:
                    continue
                for index in range(len(self.rounds) + 1):
                    busy = self._busy[index] if index < len(self.rounds) else set()
                    if host in busy:
                        continue
                    partner = next((p for p in candidates if p not in busy), None)
                    if partner is not None:
                        self._add(index, pair_key(host, partner))
                        return

    def _add(self, index: int, pair: Pair) -> None:
        if index == len(self.rounds):
            self.rounds.append(())
            self._busy.append(set())
        self.rounds[index] = (*self.rounds[index], pair)
        self._busy[index].update(pair)


def _distinct(hosts: Iterable[str]) -> list[str]:
    names = list(hosts)
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"host {name!r} is given twice")
        seen.add(name)
    return names
