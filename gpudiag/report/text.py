"""The plain-text report: the summary line, one line per finding (most costly first), the links
measured, hosts folded by status. No markup, and no control character: every line is cleaned
(gpudiag.schema.text), so that nothing a node printed moves a terminal's cursor or sets its title."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from ..hosts import fold_hosts
from ..schema.text import clean_text
from ..words import plural
from .folding import fold_findings
from .linkfigures import (
    counts_text,
    error_pair_rows,
    link_view,
    not_tested_groups,
    slowest_pair_rows,
)
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
from .summary import NOT_ANALYSED, _impact_detail, focus_line, not_analysed, summary_line, verdict_line

# A line of the text report is cut to this many characters (a finding's evidence is far shorter).
LINE_CHARS = 20_000


def render_text(document: Document, outputs: Sequence[str] | None = ()) -> str:
    """The summary line, the impact, the links measured (when any), hosts folded by status, then,
    last where a terminal leaves them in view, one line per finding (most costly first) and the
    verdict line (``outputs``: where the outputs went, in words; None: no verdict line, where the
    caller ends with its own). No markup."""
    lines = [summary_line(document)]
    impact = _impact_detail(document.get("impact"))
    if impact:
        lines.append(f"impact: {impact}")
    focus = focus_line(document)
    if focus:
        lines.append(focus)
    links = link_lines(document)
    if links:
        lines += ["", *links]
    lines += ["", "hosts:"]
    lines += [f"  {line}" for line in host_group_lines(document)]
    lines += [f"  {line}" for line in stray_output_lines(document)]
    findings = sort_findings(_findings(document))
    folded = fold_findings(findings)
    alike = ", those alike but for their host on one line" if len(folded) < len(findings) else ""
    lines += ["", f"findings ({len(findings)}, most costly first{alike}):" if findings
              else f"findings: {NOT_ANALYSED}" if not_analysed(document) else "findings: none"]
    lines += [f"  {finding_text(finding)}" for finding in folded]
    if outputs is not None:
        lines += ["", verdict_line(document, outputs)]
    # A document read from a file may hold anything: no escape sequence reaches the terminal.
    return "\n".join(clean_text(line, LINE_CHARS) for line in lines) + "\n"


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


TEXT_WIDTH = 80
NOT_TESTED_LINES = 5


def link_lines(document: Mapping[str, Any]) -> list[str]:
    """The links section: counts, pairs per backend, the slowest pairs (worst rail against the
    reference of its backend, rail and line rate, and its share of the line rate), the pairs that could not
    be tested and the hosts no pair test reached. Empty when the sweep measured no links."""
    view = link_view(document)
    if not view.pairs:
        return []
    lines = textwrap.wrap(f"links: {counts_text(view)}", TEXT_WIDTH, subsequent_indent="  ")
    for counts in view.backends():
        rails = [rail for rail in counts.rails if rail is not None]
        on = f" on {plural(len(rails), 'rail')}" if rails else ""
        untested = (f"{plural(counts.error_pairs, 'pair')} ({plural(counts.error_rails, 'rail')}) not tested"
                    if counts.error_pairs else "every pair tested")
        lines.append(f"  {counts.backend}: {plural(counts.pairs, 'pair')}{on}, {plural(counts.figures, 'figure')}, "
                     f"{untested}")
    slowest = slowest_pair_rows(view)
    if slowest:
        lines.append("  slowest pairs, worst rail vs its group's reference (backend, rail, line rate):")
        width = max(len(row[0]) for row in slowest)
        for pair, rail, value, reference, deficit, line in slowest:
            text = f"    {pair:<{width}}  {rail}  {value.rsplit(' ', 1)[0]} vs {reference}"
            text += f" ({deficit})" if deficit else ""
            whole = text + (f", {line}" if line else "")
            # the share of the line rate goes on a line of its own where the whole would not fit
            lines += [whole] if len(whole) <= TEXT_WIDTH or not line else [f"{text},", f"      {line}"]
    errors = error_pair_rows(view)
    if errors:
        lines.append(f"  could not be tested ({plural(len(view.error_pairs), 'pair')}, first {len(errors)}):"
                     if len(view.error_pairs) > len(errors) else "  could not be tested:")
        lines += [_cut(f"    {pair}  {rails}: {reason}") for pair, rails, reason in errors]
    groups = not_tested_groups(view)
    for reason, hosts in groups[:NOT_TESTED_LINES]:
        lines.append(_cut(f"  not tested: {fold_hosts(hosts)} ({len(hosts)}): {reason}"))
    if len(groups) > NOT_TESTED_LINES:
        rest = [host for _, hosts in groups[NOT_TESTED_LINES:] for host in hosts]
        lines.append(_cut(f"  not tested, other reasons: {fold_hosts(rest)} ({len(rest)})"))
    return lines


def _cut(line: str) -> str:
    """A line of free text (an error reason) cut to TEXT_WIDTH."""
    return line if len(line) <= TEXT_WIDTH else line[:TEXT_WIDTH - 1] + "…"


def host_group_lines(document: Document) -> list[str]:
    """``ok           61  node[001-049,052-064]``; other statuses add their first host's error."""
    errors = {str(h.get("host")): h.get("error") for h in _hosts(document)}
    groups = hosts_by_status(document)
    width = max([16, *(len(status) for status in groups)])  # the counts stay in one column
    lines = []
    for status, labels in groups.items():
        line = f"{status:<{width}} {len(labels):>5}  {fold_hosts(labels)}"
        if status != OK and errors.get(labels[0]):
            line += f": {errors[labels[0]]}"
        lines.append(line)
    return lines


def stray_output_lines(document: Document) -> list[str]:
    """``stray output  2  node[003,007]: 5 lines that are not records; node003's first: '...'``, from
    ``hosts[].stray_output`` (``{"count", "lines"}``); empty when no host printed any."""
    hosts = [host for host in _hosts(document)
             if isinstance(host.get("stray_output"), Mapping) and host["stray_output"].get("count")]
    if not hosts:
        return []
    total = sum(int(host["stray_output"]["count"]) for host in hosts)
    what = "line that is not a record" if total == 1 else "lines that are not records"
    first = hosts[0]
    first_line = (first["stray_output"].get("lines") or [""])[0]
    return [f"{'stray output':<16} {len(hosts):>5}  {fold_hosts(str(h.get('host')) for h in hosts)}: "
            f"{total} {what}; {first.get('host')}'s first: {str(first_line)!r}"]
