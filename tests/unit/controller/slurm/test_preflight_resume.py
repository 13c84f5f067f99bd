"""NHC's rule for --undrain: a node gpudiag drained returns to service only after a run that made
again, and the node passed, each check its drain reason names; only gpudiag's own drain (its
marker, Slurm's stamp naming gpudiag's user at the marker's time), and only a drain Slurm already
showed when the check began. What a run says about each host (gpudiag.preflight.checked) and the
decision (gpudiag.slurm.resume), on hand-made sweep results and node states."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from gpudiag.findings import Finding
from gpudiag.preflight.checked import host_checks, hosts_named
from gpudiag.records import ProbeResult
from gpudiag.run.fanout import SweepResult
from gpudiag.run.outcome import HostOutcome
from gpudiag.slurm.nodes import NodeState, ReasonStamp
from gpudiag.slurm.reason import mark_reason
from gpudiag.slurm.resume import CheckStart, HostChecks, resume_problem

MOMENT = datetime(2026, 11, 25, tzinfo=timezone.utc)
FACTS = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8}


def _record(probe: str, status: str = "ok", device: str = "cuda:0") -> ProbeResult:
    return ProbeResult(probe=probe, device=device, metric="m", value=1.0 if status == "ok" else None, unit="u",
                       status=status, reason=None if status == "ok" else "CUDA error")


def _host(name: str, *records: ProbeResult, status: str = "ok", error: str | None = None) -> HostOutcome:
    return HostOutcome(name, status, error, 1.0, facts=FACTS if status == "ok" else {}, results=records)


def _result(hosts: list[HostOutcome], findings: tuple[Finding, ...] = (), links: tuple[dict, ...] = ()) -> SweepResult:
    return SweepResult("20261125T000000Z-0000", MOMENT, MOMENT, tuple(hosts), findings, links=links)


def _unchecked(host: str, evidence: str) -> Finding:
    return Finding(kind="unchecked", severity="warn", host=host, evidence=evidence, action="inspect")


USER = "gpudiag-user"
DRAINED_AT = datetime(2026, 11, 29, 10, 0, tzinfo=timezone.utc)


def _stamp(when: datetime = DRAINED_AT, user: str = USER) -> ReasonStamp:
    return ReasonStamp(user, when.timestamp(), f"{user}@{int(when.timestamp())}")


def _drained(reason: str, name: str = "n1", stamp: ReasonStamp | None = None) -> NodeState:
    """The node as gpudiag's own drain leaves it: the reason marked when written, Slurm's stamp
    naming gpudiag's user a second later (``stamp`` another one)."""
    marked = mark_reason(reason, DRAINED_AT, "3f2a") if reason.startswith("gpudiag:") else reason
    return NodeState(name=name, state="IDLE+DRAIN", reason=marked,
                     stamp=stamp or _stamp(DRAINED_AT + timedelta(seconds=1)))


def _start(*nodes: NodeState, error: str | None = None) -> CheckStart:
    """Slurm's view when the check began (after the drain), as the check running as USER saw it."""
    return CheckStart({node.name: node for node in nodes}, at=(DRAINED_AT + timedelta(minutes=5)).timestamp(),
                      error=error, user=USER)


def _problem(node: NodeState, checks: HostChecks | None, start: CheckStart | None = None) -> str | None:
    """Why ``node`` stays drained after a check that saw it so at its start (``start``)."""
    return resume_problem(node, checks, start if start is not None else _start(node))


GEMM_REASON = "gpudiag: gemm: slow_gpu GPU 3 gemm.tflops -30%: x"


def test_a_host_passes_the_probes_that_answered_ok_with_no_error_and_the_links_it_measured() -> None:
    result = _result([_host("n1", _record("telemetry"), _record("telemetry", "skipped"), _record("gemm"),
                            _record("membw"), _record("membw", "error", "cuda:1")),
                      _host("n2", _record("telemetry"))],
                     links=({"a": "n1", "b": "n2", "value": 9.4}, {"a": "n2", "b": "n3", "value": None}))
    checks = host_checks(result)
    assert checks["n1"].passed == {"facts", "telemetry", "gemm", "links"}  # membw errored on cuda:1
    assert checks["n2"].passed == {"facts", "telemetry", "links"}


def test_a_host_that_printed_no_record_passes_nothing_and_says_why() -> None:
    result = _result([_host("n1", status="probe_error",
                            error="the probe bundle exited with status 0 and printed no record at all")])
    checks = host_checks(result)["n1"]
    assert checks.passed == frozenset()
    assert checks.failed == "probe_error: the probe bundle exited with status 0 and printed no record at all"


def test_a_fail_or_an_unchecked_finding_naming_a_host_as_host_peer_or_in_a_folded_set_fails_it() -> None:
    hosts = [_host(name, _record("gemm")) for name in ("n1", "n2", "n3", "n4", "n5")]
    findings = (Finding(kind="slow_gpu", severity="fail", host="n1", evidence="e", action="drain", gpu=3,
                        metric="gemm.tflops", deficit_pct=30.0),
                Finding(kind="link_error", severity="warn", host="n5", peer="n2", evidence="no answer",
                        action="inspect"),
                _unchecked("n[3-4]", "gemm.tflops measured on 2 hosts: not compared, not passed"),
                Finding(kind="fleet_shift", severity="fail", host="n[1-5]", evidence="all", action="inspect"))
    checks = host_checks(_result(hosts, findings))
    assert checks["n1"].failed == "fail slow_gpu GPU 3 gemm.tflops -30 % below"
    assert checks["n2"].failed == checks["n5"].failed == "warn link_error with n2: no answer"
    assert checks["n3"].failed is not None and "not compared" in checks["n3"].failed
    assert checks["n4"].failed == checks["n3"].failed


def test_hosts_named_reads_a_host_a_folded_set_and_a_list() -> None:
    names = {"n1", "n2", "n3", "gpu10"}
    assert hosts_named("n[1-2]", names) == {"n1", "n2"}
    assert hosts_named("n1,gpu[09-10]", names) == {"n1", "gpu10"}
    assert hosts_named("tcp fabric", names) == set() and hosts_named(None, names) == set()


def test_a_node_drained_for_gemm_resumes_after_a_run_that_made_and_passed_gemm() -> None:
    assert _problem(_drained(GEMM_REASON), HostChecks("n1", frozenset({"facts", "gemm"}))) is None


def test_a_node_drained_for_gemm_stays_drained_after_a_run_whose_budget_planned_no_gemm() -> None:
    why = _problem(_drained(GEMM_REASON), HostChecks("n1", frozenset({"facts", "telemetry"})))
    assert why == ("drained by gpudiag for gemm; this run made and passed no gemm check on it, so it could not see "
                   "that fault: left drained")


def test_a_node_drained_for_a_slow_nic_stays_drained_after_a_run_with_no_link_test() -> None:
    checks = HostChecks("n1", frozenset({"facts", "telemetry", "gemm", "membw"}))
    for reason in ("gpudiag: links: slow_nic link.tcp -40%: slow with every partner",
                   "gpudiag: slow_nic link.tcp -40%: slow with every partner"):  # before checks were named
        why = _problem(_drained(reason), checks)
        assert why is not None and "no links check" in why, why


def test_a_node_that_does_not_pass_this_run_stays_drained_with_the_cause() -> None:
    checks = HostChecks("n1", frozenset(), failed="probe_error: printed no record at all")
    why = _problem(_drained(GEMM_REASON), checks)
    assert why == ("drained by gpudiag for gemm; it does not pass this run (probe_error: printed no record at all): "
                   "left drained")
    assert _problem(_drained(GEMM_REASON), None) == "drained by gpudiag for gemm; this run did not probe it: " \
                                                          "left drained"


@pytest.mark.parametrize(("reason", "words"), [
    ("bad cable", 'drained by someone else (reason: "bad cable"): left drained'),
    ("gpudiag: something_new GPU 1", "with a reason this gpudiag cannot read"),
    ("gpudiag: all: something_new GPU 1", "for a finding no single check clears"),
    ("gpudiag: gemm: x $(touch /tmp/x) `id`", None),
])
def test_reasons_that_no_run_can_clear_are_never_resumed_and_quoted_safely(reason: str, words: str | None) -> None:
    everything = HostChecks("n1", frozenset({"facts", "telemetry", "xid", "gemm", "membw", "p2p", "pcie", "smclock",
                                             "links"}))
    why = _problem(_drained(reason), everything)
    if words is None:
        assert why is None
    else:
        assert why is not None and words in why and "$" not in why and "`" not in why


# --- whose drain, and when: only gpudiag's own, and only one that predates the check ----------------------------


EVERY_CHECK = HostChecks("n1", frozenset({"facts", "telemetry", "gemm", "membw"}))


def test_a_person_s_reason_that_reads_as_gpudiag_s_but_carries_no_marker_is_never_resumed() -> None:
    typed = NodeState("n1", "IDLE+DRAIN", GEMM_REASON, stamp=_stamp(user=USER))  # by hand, as gpudiag's user
    why = _problem(typed, EVERY_CHECK)
    assert why is not None and "carries no drain marker of gpudiag's" in why and "left drained" in why


def test_a_reason_set_by_another_user_is_never_resumed() -> None:
    why = _problem(_drained(GEMM_REASON, stamp=_stamp(DRAINED_AT, user="alice")), EVERY_CHECK)
    assert why is not None and "set by alice, not by gpudiag-user, the user this gpudiag runs as" in why


@pytest.mark.parametrize("stamped", [DRAINED_AT + timedelta(days=3), DRAINED_AT - timedelta(hours=1)])
def test_a_copy_of_gpudiag_s_reason_set_far_from_its_marker_s_time_is_never_resumed(stamped: datetime) -> None:
    """A person who pastes a reason gpudiag wrote (from sinfo -R, an older drain) copies its marker
    too: Slurm's stamp then says a time the marker does not."""
    why = _problem(_drained(GEMM_REASON, stamp=_stamp(stamped)), EVERY_CHECK)
    assert why is not None and "a copy of gpudiag's reason, set by hand" in why, why


@pytest.mark.parametrize("seconds", [-290, 0, 850])
def test_clocks_minutes_apart_still_read_as_gpudiag_s_own_drain(seconds: int) -> None:
    assert _problem(_drained(GEMM_REASON, stamp=_stamp(DRAINED_AT + timedelta(seconds=seconds))), EVERY_CHECK) is None


def test_a_reason_slurm_gives_no_readable_stamp_for_is_never_resumed() -> None:
    for stamp in (None, ReasonStamp(USER, None, f"{USER}@Tomorr 10:00")):
        node = _drained(GEMM_REASON)
        node = NodeState(node.name, node.state, node.reason, stamp=stamp)
        why = _problem(node, EVERY_CHECK)
        assert why is not None and "no readable [user@time]" in why


def test_a_drain_set_while_the_check_ran_is_never_resumed_by_it() -> None:
    """Check B began with the node in service (or drained by an older drain); check A drained it
    (again) while B measured: B's measurements predate A's drain."""
    drained = _drained(GEMM_REASON)
    in_service = NodeState("n1", "IDLE")
    older = _drained(GEMM_REASON, stamp=_stamp(DRAINED_AT - timedelta(minutes=2)))
    for start in (_start(in_service), _start(older), _start()):
        why = resume_problem(drained, EVERY_CHECK, start)
        assert why is not None and "after this check began (2026-11-29T10:05:00Z)" in why, why
        assert "its measurements predate it and cannot clear it" in why


def test_a_check_that_could_not_ask_slurm_at_its_start_resumes_nothing() -> None:
    why = resume_problem(_drained(GEMM_REASON), EVERY_CHECK, _start(error="slurm_load_node error: timed out"))
    assert why is not None and "Slurm did not answer when this check began" in why
