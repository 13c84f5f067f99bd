"""Further peers for a link phase whose own hosts cannot decide: a tie that a third partner can break.

A paused job's suspect is pair-tested with its few reference peers (gpudiag.pause.focus). When
those references are slow too, every pair among them is slow and no host is *known good*
(gpudiag.links.attribution): the suspect cannot be cleared, nor the references named, from their
pairs alone. The job's other nodes can. ``TieBreakPlan`` wraps the link phase's plan: where a
confirm phase finds no host that passed, it brings in ``spares`` (the job's nodes not probed, in
the order given) — one per undecided probed host, two at least — and tests each undecided host
with its own spare and the spares with each other (a cycle, one pair for two). Healthy spares
prove each other good; from then on the ordinary confirm rounds pair each suspect with hosts
known good, the spares among them, until it is cleared or named.

A probed host whose own line rate no pair ran at, where no probed host reports it (a job of two
models, its suspect an H100 at 400 Gb/s a rail and its references A100s at 200: a NIC 15 % slow
still fills a 200 Gb/s line; gpudiag.links.unreached), brings in UNRATED_SPARES spares, each
paired with it, twice at most: a pair runs at its slower end, so one spare of its rate measures
it, and a pair at that rate's line clears both ends.

Every pair test with a spare end counts against ``max_pair_tests``, a hard bound: a pair past it
is not run, and what it would have decided stays undecided (said in ``TieBreak.note``). Spares
are brought in once per probed host; a spare never brings in another.

A spare is pair-tested only once a ``PeerReacher`` has reached it (over SSH or srun: connected,
the node's bundle staged, its facts through the identity check; gpudiag.run.peers). One that
cannot be reached is said (``TieBreak.tried``, the note), takes part in no pair test, and is
replaced by the next spare, in at most MAX_REACH_BATCHES tries.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Protocol

from ..schema.text import one_line
from ..words import plural
from .attribution import LinkAttribution
from .rounds import LinkPlan, LinkRecord, PeerReach, TieBreak
from .schedule import CONFIRM, Pair, Round, Suspects, pair_key

# Extra pair tests a tie-break may run, per host the link phase started with: each undecided host
# with its spare and two more spares (a NIC is confirmed slow with three partners known good,
# link_confirm_partners), the spares' cycle, and a re-test or two. At 4, a paused job whose
# suspect and both references had slow NICs reached the bound one pair short of the suspect's
# third good partner (2 of 8 such 16-node jobs at 1 % noise), and left it unchecked.
EXTRA_PAIR_TESTS_PER_HOST = 6
# Spares brought in for a host whose own line rate no pair reached (each paired with all of them),
# at most UNRATED_TRIES times: in a job of two models half its nodes of each, three miss its rate
# one time in eight, six one time in sixty.
UNRATED_SPARES = 3
UNRATED_TRIES = 2
# Tries to reach spares in place of those that could not be reached, each one host time limit at most.
MAX_REACH_BATCHES = 2
# Characters of a peer's error the note quotes (the document's ``tried`` has it whole).
NOTE_ERROR_CHARS = 160


def extra_pair_bound(hosts: int) -> int:
    """The most pair tests with further peers for a link phase of ``hosts`` probed hosts."""
    return EXTRA_PAIR_TESTS_PER_HOST * hosts


class PeerReacher(Protocol):
    """Makes spares ready for pair tests, as the sweep made its own hosts ready (gpudiag.run.peers)."""

    def reach(self, hosts: Sequence[str]) -> list[PeerReach]:
        """One outcome per host of ``hosts``, in order: reached (it can be pair-tested now), or
        why not. Never raises for a host; raises KeyboardInterrupt when the sweep is interrupted."""
        ...


class TieBreakPlan:
    """``base`` with further peers for the undecided hosts of ``probed`` (see the module); a
    LinkPlan. ``reacher``: what reaches a spare before its first pair test (None: every spare can
    be pair-tested as it is). Not thread-safe: the link phase calls it between rounds."""

    def __init__(self, base: LinkPlan, probed: Sequence[str], spares: Sequence[str], max_pair_tests: int,
                 unavailable: str | None = None, reacher: PeerReacher | None = None) -> None:
        self._base = base
        self._probed = set(probed)
        self._spares = [spare for spare in spares if spare not in self._probed]
        self._max = max_pair_tests
        self._unavailable = unavailable  # why no spare can be drawn on (None: they can)
        self._reacher = reacher
        self._tried: list[PeerReach] = []  # every spare a reach was tried on, in order
        self._batches = 0  # reaches tried so far (MAX_REACH_BATCHES in all)
        self._used: list[str] = []
        self._given: set[str] = set()  # probed hosts already given a spare
        self._rate_tries: Counter[str] = Counter()  # spares brought in for a host's own line rate
        self._tests = 0
        self._dropped = 0
        self._wanted = False  # a confirm phase found no host that passed, with probed hosts undecided

    @property
    def confirm_phases(self) -> int:
        """The base plan's, and one more: bringing further peers in takes a phase of its own. In a
        paused 4-node job whose two references had NICs at 60 %, the one further peer's pair with
        the suspect ran in the second phase, dipped under the floor on one rail at 4 % link noise,
        and no phase was left to run it again: both were left unchecked in 6 of 20 jobs."""
        return self._base.confirm_phases + 1

    def first_rounds(self, hosts: Sequence[str]) -> list[Round]:
        return self._base.first_rounds(hosts)

    def attribute(self, records: Sequence[LinkRecord]) -> LinkAttribution:
        return self._base.attribute(records)

    def confirm(self, attribution: LinkAttribution, suspects: Suspects, records: Sequence[LinkRecord]) -> list[Round]:
        undecided = [host for host in suspects.hosts if host in self._probed and host not in self._given]
        tie = bool(undecided) and not set(attribution.passed) - set(suspects.hosts)
        # a probed host whose own line rate no pair ran at, and no host of the run reports: a job of
        # two models whose references are of the other (gpudiag.links.unreached)
        unrated = [u.host for u in attribution.unreached
                   if not u.peers and u.host in self._probed and self._rate_tries[u.host] < UNRATED_TRIES]
        if tie or unrated:
            self._wanted = True
            rounds = self._bring_in(undecided if tie else [], unrated)
            if rounds:
                return rounds
        return self._bounded(self._base.confirm(attribution, suspects, records),
                             {pair_key(record.result.a, record.result.b) for record in records})

    def outcome(self) -> TieBreak:
        """What the tie-break did, once the link phase is over."""
        notes = []
        if self._wanted and not self._used:
            notes.append(self._unavailable or self._why_none())
        elif self._dropped:
            notes.append(f"the bound was reached: {plural(self._dropped, 'further pair test')} not run, what they "
                         "would have decided is left unchecked")
        missed = [peer for peer in self._tried if not peer.reached]
        if missed and self._used:
            notes.append(_not_reached(missed))
        return TieBreak(tuple(self._used), self._tests, self._max, len(self._spares), "; ".join(notes) or None,
                        tuple(self._tried))

    def _why_none(self) -> str:
        if not self._spares:
            return "no further peer: every node of the job is tested already"
        missed = [peer for peer in self._tried if not peer.reached]
        if missed:
            return f"no further peer could be reached: {_not_reached(missed)}"
        return "the bound of extra pair tests was reached"

    def _bring_in(self, undecided: Sequence[str], unrated: Sequence[str] = ()) -> list[Round]:
        """Spares for the ``undecided`` hosts (one each) and for the ``unrated`` ones (paired with
        every spare brought in: which of them runs at the host's own rate is known only once a pair
        with it has run), and the spares' cycle; [] where none can be drawn or reached."""
        if self._unavailable is not None:
            return []
        tried = {peer.host for peer in self._tried}
        fresh = [spare for spare in self._spares if spare not in tried]
        room = self._max - self._tests
        count = min(len(fresh), max(UNRATED_SPARES if unrated else 2, len(undecided)))
        while count and _cost(min(count, len(undecided)), count, len(unrated)) > room:
            count -= 1
        spares = self._reach(fresh, count)
        if not spares:
            return []
        count = len(spares)
        pairs = [pair_key(host, spare) for host, spare in zip(undecided[:count], spares, strict=False)]
        pairs += [pair_key(host, spare) for host in unrated for spare in spares]
        pairs += _cycle(spares)
        self._used += spares
        self._given.update(undecided[:count])
        for host in unrated:
            self._rate_tries[host] += 1
        self._tests += len(pairs)
        return _rounds(pairs)

    def _reach(self, fresh: Sequence[str], count: int) -> list[str]:
        """Up to ``count`` spares of ``fresh``, in order, each reached (where there is a reacher):
        those that cannot be are replaced by the next ones, in at most MAX_REACH_BATCHES tries
        over the whole link phase (each may take a host's time limit)."""
        if self._reacher is None:
            return list(fresh[:count])
        reached: list[str] = []
        queue = list(fresh)
        while self._batches < MAX_REACH_BATCHES and len(reached) < count and queue:
            batch, queue = queue[:count - len(reached)], queue[count - len(reached):]
            self._batches += 1
            outcomes = self._reacher.reach(batch)
            self._tried += outcomes
            reached += [peer.host for peer in outcomes if peer.reached]
        return reached

    def _bounded(self, rounds: list[Round], tested: set[Pair]) -> list[Round]:
        """``rounds`` with the pairs that have a spare end counted, those past the bound dropped:
        pairs not yet ``tested`` first (a partner new to a host tells of its NIC; a repeat of a
        pair, of that pair alone). Re-tests of pairs among spares and suspects took the last
        tests of the bound, and a suspect slow with two good partners never met the third."""
        used = set(self._used)
        # each pair test with a spare end, by where it sits (a pair may run in two rounds: two tests)
        counted = [(index, pair) for index, round_ in enumerate(rounds) for pair in round_.pairs if used & set(pair)]
        room = max(0, self._max - self._tests)
        allowed = set(sorted(counted, key=lambda test: test[1] in tested)[:room])
        self._dropped += len(counted) - len(allowed)
        self._tests += len(allowed)
        return [Round(round_.phase, pairs) for index, round_ in enumerate(rounds)
                if (pairs := tuple(pair for pair in round_.pairs if not used & set(pair) or (index, pair) in allowed))]


def _not_reached(peers: Sequence[PeerReach]) -> str:
    """``node010 not reached (unreachable: ...)``, for each peer, in the note's words."""
    return "; ".join(f"{peer.host} not reached ({peer.status}: "
                     f"{one_line(peer.error or 'no reason given', NOTE_ERROR_CHARS)})" for peer in peers)


def _cost(hosts: int, spares: int, unrated: int = 0) -> int:
    """Pair tests of bringing in ``spares`` for ``hosts`` (one each) and ``unrated`` hosts (each
    with every spare), and the spares' cycle."""
    return hosts + unrated * spares + len(_cycle([str(index) for index in range(spares)]))


def _cycle(spares: Sequence[str]) -> list[Pair]:
    """The spares tested with each other: none for one, one pair for two, a cycle for more."""
    if len(spares) < 2:
        return []
    if len(spares) == 2:
        return [pair_key(spares[0], spares[1])]
    return [pair_key(spares[i], spares[(i + 1) % len(spares)]) for i in range(len(spares))]


def _rounds(pairs: Sequence[Pair]) -> list[Round]:
    """``pairs`` packed first-fit into confirm rounds that stay matchings."""
    rounds: list[list[Pair]] = []
    busy: list[set[str]] = []
    for pair in pairs:
        index = next((i for i, taken in enumerate(busy) if not taken & set(pair)), len(rounds))
        if index == len(rounds):
            rounds.append([])
            busy.append(set())
        rounds[index].append(pair)
        busy[index].update(pair)
    return [Round(CONFIRM, tuple(found)) for found in rounds]
