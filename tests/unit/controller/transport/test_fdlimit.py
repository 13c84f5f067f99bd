"""The sweep against the open-file limit (gpudiag.transport.fdlimit): the soft limit raised where
the hard one allows, else the fan-out and the connections kept fitted to it, and the note says
only what changed. Each case runs in a child process whose limits it sets (a lowered hard limit
cannot be raised again)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PLAN = """
import json, resource, sys
from gpudiag.transport.fdlimit import plan_open_files
soft, hard, hosts, fanout = (int(value) for value in sys.argv[1:5])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
plan = plan_open_files(hosts, 1, fanout)
print(json.dumps({"fanout": plan.fanout, "pairs": plan.pairs_at_once, "max_open": plan.max_open,
                  "notes": list(plan.notes), "soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}))
"""


def _plan(soft: int, hard: int, hosts: int, fanout: int) -> dict:
    done = subprocess.run([sys.executable, "-c", PLAN, str(soft), str(hard), str(hosts), str(fanout)],
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def test_a_limit_that_holds_the_sweep_changes_nothing() -> None:
    plan = _plan(4096, 4096, 500, 64)
    assert (plan["fanout"], plan["pairs"], plan["max_open"], plan["notes"], plan["soft"]) == (64, 64, None, [], 4096)


def test_the_soft_limit_is_raised_to_what_the_sweep_needs_where_the_hard_one_allows() -> None:
    plan = _plan(1024, 8192, 3000, 64)
    assert plan["max_open"] is None and plan["fanout"] == 64
    assert 3000 < plan["soft"] <= 8192
    assert plan["notes"] == [f"raised the open-file limit from 1024 to {plan['soft']} for 3000 connections"]


@pytest.mark.parametrize(("hard", "capped"), [(2000, False), (300, True)])
def test_a_hard_limit_too_low_keeps_fewer_connections_and_says_only_what_changed(hard: int, capped: bool) -> None:
    plan = _plan(hard, hard, 20000, 64)
    (note,) = plan["notes"]
    assert plan["max_open"] is not None and plan["max_open"] < 20000
    assert f"holds {plan['max_open']} connections, not the 20000 this sweep keeps" in note
    assert "connections are closed between phases and opened again" in note
    assert (plan["fanout"] < 64) == capped
    assert ("instead of 64" in note) == capped, note  # never "fan-out 64 instead of 64"
    assert "fan-out 64" not in note
