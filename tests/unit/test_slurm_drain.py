"""The scontrol commands that drain the nodes of fail findings (built here, run against a real Slurm in
tests/integration/test_slurm.py)."""

from __future__ import annotations

from gpudiag.findings import Finding
from gpudiag.slurm.drain import MAX_REASON_CHARS, drain, drain_commands, drain_reason


def _finding(host: str, severity: str = "fail", kind: str = "slow_gpu", **fields: object) -> Finding:
    defaults: dict[str, object] = {"gpu": 3, "metric": "gemm.tflops", "deficit_pct": 17.7,
                                   "evidence": "HW thermal slowdown active; SM clock 1410 of 1980 MHz"}
    defaults.update(fields)
    return Finding(kind=kind, severity=severity, host=host, action="drain", **defaults)  # type: ignore[arg-type]


def test_only_fail_findings_drain_and_nodes_sharing_a_reason_fold_into_one_command() -> None:
    findings = [_finding("gpu07"), _finding("gpu03"), _finding("gpu04"), _finding("gpu09", severity="warn"),
                _finding("gpu05", kind="ecc", gpu=0, metric=None, deficit_pct=None, evidence="uncorrectable: 2")]
    assert drain_commands(findings) == [
        ["scontrol", "update", "NodeName=gpu05", "State=DRAIN", "Reason=gpudiag: ecc GPU 0: uncorrectable: 2"],
        ["scontrol", "update", "NodeName=gpu[03-04,07]", "State=DRAIN",
         "Reason=gpudiag: slow_gpu GPU 3 gemm.tflops -18%: HW thermal slowdown active; SM clock 1410 of 1980 MHz"],
    ]


def test_fleet_wide_findings_and_hosts_that_are_no_node_names_drain_nothing() -> None:
    findings = [_finding("gpu01", kind="fleet_shift"), _finding("gpu02:2222"), _finding("[::1]:22")]
    assert drain_commands(findings) == []


def test_findings_from_a_sweep_document_drain_as_finding_objects_do() -> None:
    findings = [_finding("n1"), _finding("n2", kind="slow_link", gpu=None, peer="n5")]
    assert drain_commands([finding.to_dict() for finding in findings]) == drain_commands(findings)
    assert "Reason=gpudiag: slow_link with n5 gemm.tflops -18%" in drain_commands(findings)[1][4]


def test_a_node_with_several_findings_names_the_first_and_counts_the_rest() -> None:
    reason = drain_reason([_finding("n1"), _finding("n1", kind="ecc"), _finding("n1", kind="throttled")])
    assert reason.startswith("gpudiag: slow_gpu GPU 3") and reason.endswith(" (+2 more)")


def test_the_reason_is_one_printable_line_without_double_quotes_and_trimmed() -> None:
    reason = drain_reason([_finding("n1", evidence='NVLink "7" down\nsince boot \u2014 ' + "x" * 400),
                           _finding("n1")])
    assert len(reason) == MAX_REASON_CHARS
    assert reason.endswith("... (+1 more)")
    assert '"' not in reason and "\n" not in reason and reason.isascii()
    assert "NVLink '7' down since boot" in reason


def test_without_run_the_commands_come_back_unrun_to_be_printed() -> None:
    outcomes = drain(drain_commands([_finding("n1")]), run=False)
    assert [(outcome.ran, outcome.ok) for outcome in outcomes] == [(False, True)]
    assert outcomes[0].command == ("scontrol update NodeName=n1 State=DRAIN 'Reason=gpudiag: slow_gpu GPU 3 "
                                   "gemm.tflops -18%: HW thermal slowdown active; SM clock 1410 of 1980 MHz'")
