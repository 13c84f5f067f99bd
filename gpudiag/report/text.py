"""The plain-text report: the summary line, one line per finding (most costly first), hosts folded
by status. No markup."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..hosts import fold_hosts
from .phrasing import (
    OK,
    Document,
    _deficit_words,
    _findings,
    _hosts,
    action_words,
    basis_words,
    finding_measure,
    finding_where,
    hosts_by_status,
    sort_findings,
)
from .summary import _impact_detail, summary_line


def render_text(document: Document) -> str:
    """Summary line, one line per finding (most costly first), hosts folded by status. No markup."""
    lines = [summary_line(document)]
    impact = _impact_detail(document.get("impact"))
    if impact:
        lines.append(f"impact: {impact}")
    findings = sort_findings(_findings(document))
    lines += ["", f"findings ({len(findings)}, most costly first):" if findings else "findings: none"]
    lines += [f"  {finding_text(finding)}" for finding in findings]
    lines += ["", "hosts:"]
    lines += [f"  {line}" for line in host_group_lines(document)]
    return "\n".join(lines) + "\n"


def finding_text(finding: Mapping[str, Any]) -> str:
    """``fail slow_gpu node017:3 (GPU-1a2b3c4d…, 00000000:5D:00.0) · gemm.tflops 612.0 TFLOP/s vs fleet
    742.0 TFLOP/s (-17.5 %, z -9.8) · confirmed by re-test · action: drain — detail · evidence``."""
    head = f"{finding.get('severity', '?'):<4} {finding.get('kind', '?')} {finding_where(finding)}"
    parts = [head]
    measure = finding_measure(finding)
    if measure:
        numbers = _deficit_words(finding)
        parts.append(f"{measure} ({numbers})" if numbers else measure)
    basis = basis_words(finding)
    if basis:
        parts.append(basis)
    action = action_words(finding)
    if action:
        parts.append(f"action: {action}")
    if finding.get("evidence"):
        parts.append(str(finding["evidence"]))
    return " · ".join(parts)


def host_group_lines(document: Document) -> list[str]:
    """``ok           61  node[001-049,052-064]``; other statuses add their first host's error."""
    errors = {str(h.get("host")): h.get("error") for h in _hosts(document)}
    lines = []
    for status, labels in hosts_by_status(document).items():
        line = f"{status:<16} {len(labels):>5}  {fold_hosts(labels)}"
        if status != OK and errors.get(labels[0]):
            line += f": {errors[labels[0]]}"
        lines.append(line)
    return lines
