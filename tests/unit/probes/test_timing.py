import time

import pytest

from probes.context import Deadline
from probes.timing import DeadlineReached, cpu_timer, iterations_for, sample_for


def test_iterations_make_a_sample_of_about_the_target():
    assert iterations_for(0.001, target_sample_s=0.025) == 25
    assert iterations_for(1.0, target_sample_s=0.025) == 1
    assert iterations_for(0.0) == 1


def test_sampling_runs_for_the_duration_and_at_least_the_minimum():
    calls = []
    samples = sample_for(lambda: calls.append(1) or 0.001, duration_s=0.0, deadline=Deadline.after(10),
                         min_samples=7)
    assert len(samples) == 7 == len(calls)


def test_sampling_stops_at_the_deadline_even_before_the_minimum():
    def slow_sample() -> float:
        time.sleep(0.05)
        return 0.05

    started = time.monotonic()
    samples = sample_for(slow_sample, duration_s=60, deadline=Deadline.after(0.2), min_samples=100)
    assert 1 <= len(samples) < 100
    assert time.monotonic() - started < 1.0


def test_no_sample_after_the_deadline():
    with pytest.raises(DeadlineReached):
        sample_for(lambda: 0.0, duration_s=1, deadline=Deadline.after(-1))


def test_cpu_timer_returns_seconds_per_run():
    per_run = cpu_timer(lambda: time.sleep(0.01), 3)()
    assert 0.009 <= per_run < 0.05
