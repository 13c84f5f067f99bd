"""The three references of a key: the fleet's healthy level, found from the top so a slow share of
the fleet neither drags it down nor inflates its spread; the baseline; the SKU figure."""

import random
import statistics
from types import SimpleNamespace

import pytest

from gpudiag.analysis.reference import fleet_reference, key_references
from gpudiag.analysis.thresholds import default_thresholds


def _fleet(slow_share: float, deficit: float, seed: int = 1, count: int = 512) -> list[float]:
    rng = random.Random(seed)
    return [740 * rng.gauss(1, 0.01) * (1 - deficit if i < slow_share * count else 1) for i in range(count)]


@pytest.mark.parametrize(("slow_share", "deficit"), [(0.0, 0.0), (0.33, 0.08), (0.4, 0.08), (0.5, 0.12), (0.45, 0.3)])
def test_the_fleet_level_stays_on_the_healthy_cluster_and_its_spread_does_not_inflate(slow_share, deficit):
    reference = fleet_reference(_fleet(slow_share, deficit), 64, 0.5)
    assert reference.value == pytest.approx(740, rel=0.004)
    assert reference.spread < 740 * 0.013  # about the 1 % noise, not the gap to the slow cluster
    thresholds = default_thresholds()
    flagged = sum(reference.flags(v, thresholds) for v in _fleet(slow_share, deficit))
    assert flagged == pytest.approx(slow_share * 512, abs=3)


def test_a_plain_median_and_mad_would_have_missed_half_a_fleet():
    values = _fleet(0.5, 0.12)
    median = statistics.median(values)
    assert median < 730  # in the gap: the old reference could not see either half as slow
    assert fleet_reference(values, 64, 0.5).value > 735


def test_a_key_needs_min_peers_hosts_for_a_fleet_reference_and_says_when_the_fleet_is_below_the_others():
    thresholds = default_thresholds()
    values = _fleet(0.0, 0.0)
    assert key_references(values, 7, None, None, thresholds) is None  # 512 values, but only 7 hosts
    stored = SimpleNamespace(median=800.0, mad=3.0, count=100)
    refs = key_references(values, 64, stored, 740.0, thresholds)
    assert [r.source for r in refs.references] == ["fleet", "baseline", "sku"]
    assert [r.fleet_below for r in refs.references] == [False, True, False]  # 7.5 % under the baseline
    assert refs.expected().source == "baseline"


def test_the_cutoff_never_changes_which_values_are_flagged():
    thresholds = default_thresholds()
    rng = random.Random(4)
    for trial in range(200):
        level = rng.uniform(10, 1000)
        values = [level * rng.gauss(1, rng.uniform(0.001, 0.05)) for _ in range(40)]
        stored = SimpleNamespace(median=level * rng.uniform(0.9, 1.1), mad=level * 0.01, count=50)
        refs = key_references(values, 40, stored if trial % 2 else None, level * rng.uniform(0.9, 1.1), thresholds)
        for value in values + [level * f for f in (0.5, 0.8, 0.9, 0.95, 0.97, 0.99)]:
            slow = next((r for r in refs.references if r.flags(value, thresholds)), None)
            assert refs.flagging(value, thresholds) is slow
