"""The pre-flight budget planner: what fits in ``--budget S`` for a number of nodes."""

from __future__ import annotations

import pytest

from gpudiag.errors import InputError
from gpudiag.preflight.planner import (
    CONTROLLER_S,
    MIN_DURATION_S,
    TARGET_DURATION_S,
    TARGET_NET_DURATION_S,
    plan_preflight,
)


@pytest.mark.parametrize("budget_s", [28, 30, 45, 60, 75, 90, 120, 300, 3600])
@pytest.mark.parametrize("hosts", [1, 2, 3, 4, 64, 1000])
def test_the_plan_never_exceeds_the_budget(budget_s: float, hosts: int):
    plan = plan_preflight(budget_s, hosts)
    assert plan.planned_s <= budget_s + 1e-9
    assert plan.host_timeout_s > plan.deadline_s >= 1.0
    assert CONTROLLER_S + plan.host_timeout_s <= budget_s


def test_the_default_budget_runs_every_part_at_its_target_for_a_job_of_four():
    plan = plan_preflight(120, 4)
    assert plan.probes == ("facts", "telemetry", "gemm", "membw")
    assert plan.links and plan.retest and not plan.dropped
    assert plan.duration_s == TARGET_DURATION_S and plan.net_duration_s == TARGET_NET_DURATION_S
    assert plan.link_rounds == 3  # two screen rounds and one confirm round


def test_one_node_has_no_link_screen_and_says_nothing_was_dropped_for_it():
    plan = plan_preflight(120, 1)
    assert not plan.links and plan.link_rounds == 0
    assert not any("link" in reason for reason in plan.dropped)
    assert not any("link screen" in line for line in plan.lines())


def test_smaller_budgets_drop_the_retest_and_the_links_before_the_load():
    both, links_only, retest_only, neither, no_load = (plan_preflight(budget, 4) for budget in (120, 80, 62, 55, 30))
    assert both.retest and both.links
    assert links_only.links and not links_only.retest
    assert retest_only.retest and not retest_only.links
    assert not neither.retest and not neither.links and neither.probes[-2:] == ("gemm", "membw")
    assert no_load.probes == ("facts", "telemetry")
    assert any("gemm, membw" in reason for reason in no_load.dropped)
    assert any("link screen" in reason for reason in neither.dropped)
    assert any("re-test" in reason for reason in links_only.dropped)


def test_one_node_keeps_its_retest_within_a_minute():
    plan = plan_preflight(60, 1)
    assert plan.retest and plan.probes == ("facts", "telemetry", "gemm", "membw")


def test_probe_durations_shrink_with_the_budget():
    # two nodes keeping the link screen without the re-test: the loads shrink as the budget does
    durations = [plan_preflight(budget, 2).duration_s for budget in (70, 65, 60)]
    assert durations == sorted(durations, reverse=True) and durations[0] > durations[-1]
    assert all(MIN_DURATION_S <= duration <= TARGET_DURATION_S for duration in durations)
    nets = [plan_preflight(budget, 2).net_duration_s for budget in (70, 65, 60)]
    assert nets == sorted(nets, reverse=True) and nets[0] > nets[-1]


def test_links_and_the_retest_can_be_left_out_by_choice():
    plan = plan_preflight(120, 4, links=False)
    assert not plan.links and plan.retest and not plan.dropped
    plan = plan_preflight(120, 4, retest=False)
    assert plan.links and not plan.retest and not plan.dropped and plan.planned_s <= 120


def test_a_budget_too_short_for_anything_is_an_input_error_naming_the_least():
    with pytest.raises(InputError, match=r"--budget 10: too short .* give at least 28 s"):
        plan_preflight(10, 4)


def test_the_plan_is_printed_in_plain_lines():
    lines = plan_preflight(60, 2).lines()
    assert lines[0] == "pre-flight plan: 2 nodes within a budget of 60 s (60 s planned)"
    assert lines[1].startswith("  node probes: facts, telemetry, gemm, membw, 1.0 s of load per probe and GPU")
    assert any(line.startswith("  link screen: 2 rounds of pair tests") for line in lines)
    assert any(line.startswith("  not planned: re-test of suspects") and "else each suspect is unchecked" in line
               for line in lines)
    assert lines[-1] == "  what does not finish within the budget is unchecked (exit 3), never passed"
    assert all(line.isascii() for line in lines)
