"""The scontrol commands that drain the nodes of fail findings, and the drain reason they carry
(built here, run against a real Slurm in tests/integration/test_slurm.py)."""

from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest

from gpudiag.findings import Finding
from gpudiag.slurm.drain import MAX_REASON_CHARS, drain, drain_commands, drain_reason
from gpudiag.slurm.reason import finding_checks, mark_reason, read_marker, read_reason, safe_line, safe_text, unmarked

# What a reason or a summary line may hold: no shell metacharacter, quote, backslash, $ or backtick.
SAFE = re.compile(r"[A-Za-z0-9 .,:=_+/%@-]*")
HOSTILE = "CUDA error: `reboot` $(touch /tmp/x) \\x1b;|&<>()'\"*?!{}~#\n\r\t\x1b[2J\x00 —é\u202e"


NOW = datetime(2026, 11, 29, 10, 0, 0, tzinfo=timezone.utc)
MARKER = re.compile(r" gpudiag-drain=20261129T100000Z-[0-9a-f]{4}")


def _unmarked(commands: list[list[str]]) -> list[list[str]]:
    """The commands with each reason's drain marker (written NOW, a random tail) checked and left out."""
    for argv in commands:
        found = MARKER.search(argv[4])
        assert found is not None and argv[4].endswith(found.group(0)), argv
    return [[*argv[:4], MARKER.sub("", argv[4])] for argv in commands]


def _finding(host: str, severity: str = "fail", kind: str = "slow_gpu", action: str = "drain",
             **fields: object) -> Finding:
    defaults: dict[str, object] = {"gpu": 3, "metric": "gemm.tflops", "deficit_pct": 17.7,
                                   "evidence": "HW thermal slowdown active; SM clock 1410 of 1980 MHz"}
    defaults.update(fields)
    return Finding(kind=kind, severity=severity, host=host, action=action, **defaults)  # type: ignore[arg-type]


def test_only_findings_that_take_a_node_out_of_service_drain_and_nodes_sharing_a_reason_fold() -> None:
    findings = [_finding("gpu07"), _finding("gpu03"), _finding("gpu04"), _finding("gpu09", severity="warn"),
                _finding("gpu05", kind="ecc", action="reset_gpu", gpu=0, metric=None, deficit_pct=None,
                         evidence="uncorrectable: 2", basis="telemetry")]
    assert _unmarked(drain_commands(findings, now=NOW)) == [
        ["scontrol", "update", "NodeName=gpu05", "State=DRAIN",
         "Reason=gpudiag: telemetry: ecc GPU 0: uncorrectable: 2"],
        ["scontrol", "update", "NodeName=gpu[03-04,07]", "State=DRAIN",
         "Reason=gpudiag: gemm: slow_gpu GPU 3 gemm.tflops -18 % below: HW thermal slowdown active, SM clock 1410 of "
         "1980 MHz"],
    ]


@pytest.mark.parametrize("action", ["inspect", "watch"])
def test_a_fail_whose_action_is_not_to_take_the_node_out_of_service_drains_neither_end(action: str) -> None:
    """A slow link that cannot say which end is at fault is a fail with the action inspect: it
    drains neither the host nor the peer."""
    findings = [_finding("n1", kind="slow_link", action=action, gpu=None, peer="n2", metric="link.tcp"),
                _finding("n3", kind="slow_node", action=action, gpu=None)]
    assert drain_commands(findings) == []


def test_a_missing_gpu_or_a_downed_nvlink_drains_the_node_they_ask_to_reboot_or_reset() -> None:
    findings = [_finding("n1", kind="missing_gpu", action="reboot", metric=None, deficit_pct=None, basis="facts"),
                _finding("n2", kind="nvlink_down", action="reset_gpu", metric=None, deficit_pct=None,
                         basis="telemetry")]
    reasons = {argv[2]: argv[4] for argv in _unmarked(drain_commands(findings, now=NOW))}
    assert reasons["NodeName=n1"].startswith("Reason=gpudiag: facts,telemetry: missing_gpu GPU 3")
    assert reasons["NodeName=n2"].startswith("Reason=gpudiag: telemetry: nvlink_down GPU 3")


def test_fleet_wide_findings_and_hosts_that_are_no_node_names_drain_nothing() -> None:
    findings = [_finding("gpu01", kind="fleet_shift"), _finding("gpu02:2222"), _finding("[::1]:22")]
    assert drain_commands(findings) == []


def test_findings_from_a_sweep_document_drain_as_finding_objects_do() -> None:
    findings = [_finding("n1"), _finding("n2", kind="slow_nic", gpu=None, metric="link.tcp.rail0")]
    assert _unmarked(drain_commands([finding.to_dict() for finding in findings], now=NOW)) == _unmarked(
        drain_commands(findings, now=NOW))
    assert _unmarked(drain_commands(findings, now=NOW))[1][4] == (
        "Reason=gpudiag: links: slow_nic link.tcp.rail0 -18 % below: HW thermal slowdown active, SM clock 1410 of "
        "1980 MHz")


def test_a_node_with_several_findings_names_the_first_counts_the_rest_and_names_every_check() -> None:
    reason = drain_reason([_finding("n1"), _finding("n1", kind="ecc", metric=None, basis="telemetry"),
                           _finding("n1", kind="throttled", metric=None, basis="telemetry"),
                           _finding("n1", kind="slow_gpu", metric="membw.gbps")])
    assert reason.startswith("gpudiag: telemetry,gemm,membw: slow_gpu GPU 3") and reason.endswith(", and 3 more")
    assert read_reason(reason).checks == ("telemetry", "gemm", "membw")  # type: ignore[union-attr]


def test_the_reason_is_one_line_of_safe_characters_whatever_the_node_wrote_and_trimmed() -> None:
    reason = drain_reason([_finding("n1", kind="missing_gpu", action="reboot", evidence=HOSTILE + "x" * 400),
                           _finding("n1")])
    assert len(reason) == MAX_REASON_CHARS
    assert reason.endswith("..., and 1 more")
    assert SAFE.fullmatch(reason), reason
    assert "touch /tmp/x" in reason and "reboot" in reason  # the words stay; what a shell would run does not


@pytest.mark.parametrize("text", [HOSTILE, "a\nb", "$(id)", "`id`", "a\\b", "x'y\"z", "\x00\x07\x7f"])
def test_safe_text_and_safe_line_keep_no_shell_character_and_no_line_break(text: str) -> None:
    assert SAFE.fullmatch(safe_text(text))
    assert re.fullmatch(r"[A-Za-z0-9 .,:=_+/%@\[\]-]*", safe_line(text))
    assert "\n" not in safe_line(text) and len(safe_text(text * 50, 100)) <= 100


@pytest.mark.parametrize(("finding", "checks"), [
    ({"kind": "slow_gpu", "metric": "gemm.tflops", "basis": "retest"}, ("gemm",)),
    ({"kind": "slow_gpu", "metric": "p2p.gbps"}, ("p2p",)),
    ({"kind": "slow_nic", "metric": "link.rdma.rail1"}, ("links",)),
    ({"kind": "slow_nic"}, ("links",)),
    ({"kind": "throttled", "basis": "telemetry"}, ("telemetry", "gemm")),
    ({"kind": "missing_gpu", "basis": "facts"}, ("facts", "telemetry")),
    ({"kind": "something_new"}, ("all",)),
])
def test_each_finding_names_the_checks_that_must_pass_again(finding: dict[str, str], checks: tuple[str, ...]) -> None:
    assert finding_checks(finding) == checks


@pytest.mark.parametrize(("reason", "checks", "legacy"), [
    ("gpudiag: gemm: slow_gpu GPU 3 gemm.tflops -18%: x", ("gemm",), False),
    ("gpudiag: links,gemm: slow_nic link.tcp -40%", ("gemm", "links"), False),
    ("gpudiag: all: something_new", ("all",), False),
    ("gpudiag: slow_gpu GPU 3 gemm.tflops -30%", ("gemm",), True),  # before checks were named
    ("gpudiag: slow_nic link.tcp -41%: slow with every partner", ("links",), True),
    ("gpudiag: ecc GPU 0", ("telemetry",), True),
])
def test_a_reason_is_read_back_for_its_checks(reason: str, checks: tuple[str, ...], legacy: bool) -> None:
    read = read_reason(reason)
    assert read is not None and (read.checks, read.legacy) == (checks, legacy)


@pytest.mark.parametrize("reason", [None, "", "bad cable", "Prolog error", "gpudiag: something_new GPU 1",
                                    "gpudiag: gemm,nonsense: x", "gpudiag:", "gpudiag: : x"])
def test_a_reason_that_is_not_gpudiags_or_names_no_check_it_knows_is_not_read(reason: str | None) -> None:
    assert read_reason(reason) is None


def test_without_run_the_commands_come_back_unrun_to_be_printed() -> None:
    outcomes = drain(drain_commands([_finding("n1")], now=NOW), run=False)
    assert [(outcome.ran, outcome.ok, outcome.nodes) for outcome in outcomes] == [(False, True, "n1")]
    assert MARKER.sub("", outcomes[0].command) == (
        "scontrol update NodeName=n1 State=DRAIN 'Reason=gpudiag: gemm: slow_gpu GPU 3 gemm.tflops -18 % below: HW "
        "thermal slowdown active, SM clock 1410 of 1980 MHz'")


def test_a_command_with_no_time_left_in_the_budget_is_not_started_and_says_why() -> None:
    outcomes = drain([["/nonexistent/scontrol", "update"]], deadline=0.0)
    assert [(outcome.ran, outcome.error) for outcome in outcomes] == [
        (False, "not run: the --budget had no time left for it")]


def test_every_drain_reason_ends_with_gpudiag_s_marker_of_when_it_was_written_unique_per_command() -> None:
    commands = drain_commands([_finding("n1"), _finding("n2", kind="ecc", metric=None, basis="telemetry")], now=NOW)
    reasons = [argv[4][len("Reason="):] for argv in commands]
    markers = [read_marker(reason) for reason in reasons]
    assert all(marker is not None and marker.written == NOW.timestamp() for marker in markers)
    assert len({reason.rsplit("-", 1)[1] for reason in reasons}) == 2  # each its own random tail
    assert all(SAFE.fullmatch(reason) and len(unmarked(reason)) <= MAX_REASON_CHARS for reason in reasons)
    assert read_reason(reasons[0]).checks == ("gemm",)  # type: ignore[union-attr]  # read as before


@pytest.mark.parametrize("reason", ["gpudiag: gemm: x", "gpudiag: gemm: x gpudiag-drain=yesterday-3f2a",
                                    "gpudiag: gemm: x gpudiag-drain=20261129T100000Z",
                                    "gpudiag: gemm: x gpudiag-drain=20261329T100000Z-3f2a",
                                    "gpudiag: gemm: x gpudiag-drain=20261129T100000Z-3f2a and more"])
def test_a_reason_without_gpudiag_s_marker_in_its_form_has_none(reason: str) -> None:
    assert read_marker(reason) is None and unmarked(reason) == reason


def test_a_marked_reason_reads_back_its_text_and_time() -> None:
    marker = read_marker(mark_reason("gpudiag: gemm: x", NOW, "beef"))
    assert marker is not None and (marker.text, marker.written) == ("gpudiag: gemm: x", NOW.timestamp())
