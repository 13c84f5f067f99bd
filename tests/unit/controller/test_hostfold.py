"""Folding host labels back into a node set (gpudiag.hosts.fold): ClusterShell's text for labels
with one run of digits, a text that expands to exactly the labels for any, and memory that grows
with the labels (a fleet of addresses folds in megabytes, not hundreds of them)."""

from __future__ import annotations

import random
import tracemalloc

import pytest
from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

from gpudiag.hosts import fold_hosts
from gpudiag.hosts.fold import fold_labels


def _clustershell(labels: list[str]) -> str:
    return str(NodeSet.fromlist(labels, resolver=RESOLVER_NOGROUP))


def _run(rng: random.Random) -> str:
    value = rng.randrange(0, rng.choice([3, 12, 120, 1200]))
    return f"{value:0{rng.choice([0, 0, 1, 2, 3, 4])}d}"


def _labels(rng: random.Random, runs: int) -> list[str]:
    prefixes = rng.sample(["node", "gpu-", "a", "b.x", "r", "n", ""], rng.randint(1, 2))
    labels = set()
    for _ in range(rng.randint(1, 40)):
        digits = [_run(rng) for _ in range(runs)]
        label = rng.choice(prefixes) + (digits[0] + rng.choice(["", "", "-ib"]) if runs == 1 else ".".join(digits))
        labels.add(label if label[0] not in ".-" else "h" + label)
    return sorted(labels) + (["login"] if rng.random() < 0.1 else [])


@pytest.mark.parametrize("seed", range(4))
def test_labels_with_one_run_of_digits_fold_as_clustershell_writes_them(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(150):
        labels = _labels(rng, 1)
        rng.shuffle(labels)
        assert fold_labels(labels) == _clustershell(labels), labels


@pytest.mark.parametrize("seed", range(4))
def test_any_labels_fold_to_a_text_that_expands_to_exactly_them(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(150):
        labels = _labels(rng, rng.choice([1, 2, 3, 4]))
        assert set(NodeSet(fold_labels(labels), resolver=RESOLVER_NOGROUP)) == set(labels), labels


@pytest.mark.parametrize(("labels", "folded"), [
    (["node9", "node10", "node01", "node1"], "node[1,9,01,10]"),  # padded and unpadded apart
    (["n099", "n100", "n9", "n09"], "n[9,09,099-100]"),
    (["r1n5", "r2n5", "r3n5", "r1n6"], "r[2-3]n5,r1n[5-6]"),  # the larger vector first
    ([f"rack{r}-node{n:02d}" for r in range(1, 5) for n in range(1, 17)], "rack[1-4]-node[01-16]"),
    ([f"10.0.{a}.{b}" for a in range(4) for b in range(256) if (a, b) != (2, 7)],
     "10.0.[0-1,3].[0-255],10.0.2.[0-6,8-255]"),  # a grid with a hole: the hole's row beside it
    ([f"h{i}:22" for i in range(1, 4)] + ["h1:23"], "h[2-3]:22,h1:[22-23]"),  # the last run first
    (["x", "node1", "y"], "node1,x,y"),
])
def test_labels_of_several_runs_fold_into_grids(labels: list[str], folded: str) -> None:
    assert fold_labels(labels) == folded
    assert fold_hosts(reversed(labels)) == folded


def test_a_fleet_of_addresses_folds_in_little_memory() -> None:
    """65,536 addresses and ports: one fold, a few MiB (ClusterShell's multi-dimensional folding
    takes over 300 MiB for the same labels); the text is the grid."""
    labels = [f"127.1.{i // 256}.{i % 256}:22" for i in range(65536)]
    tracemalloc.start()
    try:
        folded = fold_hosts(labels)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert folded == "127.1.[0-255].[0-255]:22"
    assert peak < 40 * 2**20, peak
