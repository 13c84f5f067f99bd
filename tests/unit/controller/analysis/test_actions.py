"""The action table: one entry for every cause and none besides, an action for every cause at
every severity, and causes kept apart from kinds."""

from __future__ import annotations

import pytest

from gpudiag.analysis.actions import ACTIONS, SERVICE_VERBS, Cause, action
from gpudiag.findings import Action, Kind, Severity

# The GPU a detail may name: none known, one GPU, a pair.
GPUS = ((None, None), (5, None), (2, 7))


def test_every_key_of_the_table_is_a_cause_and_every_cause_has_an_entry():
    assert [key for key in ACTIONS if type(key) is not Cause] == []  # a Kind or a string hashes as its word
    assert set(ACTIONS) == set(Cause)


@pytest.mark.parametrize("cause", list(Cause))
@pytest.mark.parametrize("severity", list(Severity))
def test_every_cause_has_an_action_at_every_severity(cause: Cause, severity: Severity):
    fail_verb = ACTIONS[cause][0]
    for gpu, peer_gpu in GPUS:
        verb, detail = action(cause, severity, gpu, peer_gpu)
        assert type(verb) is Action and detail and "{" not in detail and "}" not in detail
        if severity == Severity.WARN and fail_verb in SERVICE_VERBS:
            assert verb == Action.WATCH  # a warning never takes a node out of service
        else:
            assert verb == fail_verb
        if gpu is not None:
            assert f"GPU {gpu}" in detail or "{gpu}" not in ACTIONS[cause][1]


def test_a_kind_or_a_plain_string_is_no_cause_even_where_the_word_is_the_same():
    assert Cause.SLOW_NODE == Kind.SLOW_NODE == "slow_node" and type(Cause.SLOW_NODE) is not type(Kind.SLOW_NODE)
    for word in (Kind.SLOW_NODE, "slow_node", "starved_node"):
        with pytest.raises(TypeError, match="not a Cause"):
            action(word, Severity.FAIL)  # type: ignore[arg-type]
