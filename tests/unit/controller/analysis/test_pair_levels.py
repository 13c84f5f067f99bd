"""A GPU pair's P2P key takes its board's pairs' level where the two agree
(gpudiag.analysis.pairlevels): sixteen hosts are one value each of a pair's key, and its own
level is off by half a spread; the 56 one-way pairs of a model know theirs far better."""

import random
import statistics

from gpudiag.analysis.measurements import KeyInfo, Measurement, by_key
from gpudiag.analysis.noisy import LEVEL_ERROR
from gpudiag.analysis.pairlevels import MIN_KEYS
from gpudiag.analysis.reference import FLEET
from gpudiag.analysis.suspects import references
from gpudiag.analysis.thresholds import default_thresholds

THRESHOLDS = default_thresholds()
ONE_WAY, BOTH_WAYS = 370.0, 720.0
PAIRS = [(src, dst) for src in range(8) for dst in range(8) if src != dst]


def _p2p(host: str, src: int, dst: int, direction: str, value: float) -> Measurement:
    params = {"src": f"cuda:{src}", "dst": f"cuda:{dst}", "direction": direction, "buffer_mib": 256}
    info = KeyInfo(f"p2p {direction} {src}->{dst}", "p2p", "bandwidth", params, "GB/s", "NVIDIA H200")
    return Measurement(host, f"cuda:{src}", None, info, value)


def _fleet(hosts: int, noise: float, seed: int, levels: dict[tuple[int, int], float] | None = None) -> dict:
    """Every one-way pair and every pair both ways of ``hosts`` hosts at ``noise``; ``levels``: a
    one-way pair's own level where it is not ONE_WAY (a pair that differs on every board)."""
    rng = random.Random(seed)
    found = []
    for host in (f"node{i:02d}" for i in range(1, hosts + 1)):
        for src, dst in PAIRS:
            level = (levels or {}).get((src, dst), ONE_WAY)
            found.append(_p2p(host, src, dst, "unidirectional", level * rng.gauss(1, noise)))
            if src < dst:
                found.append(_p2p(host, src, dst, "bidirectional", BOTH_WAYS * rng.gauss(1, noise)))
    return references(by_key(found), THRESHOLDS)


def _levels(refs: dict, direction: str) -> dict[str, float]:
    return {key: refs[key].get(FLEET).value for key in refs if direction in key}


def test_sixteen_hosts_pairs_share_one_level_per_direction_closer_to_the_truth_than_each_their_own():
    for seed in (1, 2, 3):
        refs = _fleet(16, 0.03, seed)
        one_way, both_ways = _levels(refs, "unidirectional"), _levels(refs, "bidirectional")
        assert len(one_way) == 56 and len(both_ways) == 28 >= MIN_KEYS
        # most keys take the group's level (a key whose own lies beyond two of its errors keeps it)
        shared = statistics.mode(one_way.values())
        assert sum(value == shared for value in one_way.values()) >= 45
        assert abs(shared / ONE_WAY - 1) < 0.01 and abs(statistics.mode(both_ways.values()) / BOTH_WAYS - 1) < 0.01
        # and rests on the values of all of them: its own error is a seventh of one key's
        ref = refs["p2p unidirectional 0->1"].get(FLEET)
        if ref.value == shared:
            assert ref.level_values > 50 * 16


def test_a_pair_that_differs_on_every_board_keeps_its_own_level():
    # GPU 0 -> GPU 4 runs 15 % under the other pairs on every host (a different path): its own
    # level is the truth, and a shared one would fail it on every node.
    refs = _fleet(16, 0.03, 5, {(0, 4): 0.85 * ONE_WAY})
    own = refs["p2p unidirectional 0->4"].get(FLEET)
    assert abs(own.value / (0.85 * ONE_WAY) - 1) < LEVEL_ERROR * 0.03 / 4 * 2


def test_a_few_pair_keys_keep_their_own_levels():
    # a board of two GPUs, one pair each way: too few keys to share a level
    rng = random.Random(4)
    found = [_p2p(f"n{i}", src, dst, "unidirectional", ONE_WAY * rng.gauss(1, 0.03))
             for i in range(16) for src, dst in ((0, 1), (1, 0))]
    refs = references(by_key(found), THRESHOLDS)
    assert len({refs[key].get(FLEET).value for key in refs}) == 2
