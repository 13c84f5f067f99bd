"""The HTML report: one self-contained file from the template and style sheet of ``gpudiag.report.templates``,
with links to its sections, the summary, the impact estimate, the findings table (what to do about
each finding shown, its evidence one click away; the page grows with the list, never a scroll box of
its own), the colour grid of devices (``heatmap``), hosts by status and the link section
(``linkmap``). It needs no network and no JavaScript; on a narrow screen (a phone, a tablet) the
findings table turns into one card per finding, and on a phone the device grid leads each row with
the host's worst figure and its findings."""

from __future__ import annotations

import importlib.util
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InstallationError
from ..words import plural
from .folding import fold_findings
from .heatmap import html_heatmap
from .linkmap import html_links
from .markup import _e, _html_table
from .phrasing import (
    HOST_COLUMNS,
    Document,
    _findings,
    action_verb,
    finding_location,
    finding_row,
    gpu_ids,
    host_group_rows,
    sort_findings,
)
from .summary import NOT_ANALYSED, _impact_rows, focus_line, not_analysed, summary_parts

TEMPLATE_FILES = ("report.html", "report.css")


def render_html(document: Document) -> str:
    """One self-contained HTML file: summary and impact, the findings, the device grid (host × GPU,
    each device's worst figure), hosts by status and the node-to-node links. Raises
    InstallationError without templates."""
    template, css = (_read_template(name) for name in TEMPLATE_FILES)
    title = f"gpudiag sweep {document.get('sweep_id', '?')}"
    return string.Template(template).substitute(
        title=_e(title), css=css, contents=html_contents(document), summary=html_summary(document),
        impact=html_impact(document.get("impact")), hosts=html_hosts(document),
        findings=html_findings(fold_findings(sort_findings(_findings(document))), not_analysed(document)),
        heatmap=html_heatmap(document),
        links=html_links(document), footer=_e(_footer(document)))


def html_contents(document: Document) -> str:
    """The page's sections as links, under its title: however long the findings, the device grid,
    hosts and links are one tap away."""
    findings = "findings not analysed" if not_analysed(document) else plural(len(_findings(document)), "finding")
    sections = [("findings", findings), ("heatmap", "device grid"),
                ("hosts", "hosts by status"), ("links", "links")]
    return " · ".join(f'<a href="#{anchor}">{_e(words)}</a>' for anchor, words in sections)


def html_summary(document: Document) -> str:
    """The summary line, escaped, its alarms (nothing could be compared, ...) set in ``<strong>``;
    a ``--suspects`` sweep's focus (suspects and references) after it."""
    summary = " · ".join(f'<strong class="alert">{_e(text)}</strong>' if alarm else _e(text)
                         for text, alarm in summary_parts(document))
    focus = focus_line(document)
    return summary + (f'<br><span id="focus">{_e(focus)}</span>' if focus else "")


def html_impact(impact: Mapping[str, Any] | None) -> str:
    """The impact block of the header, or a muted line when the document carries no estimate."""
    rows = _impact_rows(impact)
    if not rows:
        return '<p class="muted">No job-impact estimate in this sweep.</p>'
    cells = "".join(f"<tr><th>{_e(label)}</th><td>{_e(value)}</td></tr>" for label, value in rows)
    return f'<table class="impact" id="impact">{cells}</table>'


def html_hosts(document: Document) -> str:
    """Hosts folded by status: status, hosts (a narrow screen may wrap them after a comma, never inside
    a name or a range), count, first error."""
    rows = [f'<tr class="status-{_e(row[0])}">' + "".join(
        f"<td>{_e(cell).replace(',', ',<wbr>') if column == 1 else _e(cell)}</td>" for column, cell in enumerate(row))
        + "</tr>" for row in host_group_rows(document)]
    return _html_table("host-status", HOST_COLUMNS, rows)


# The findings table's columns. What to do about a finding (its action detail: the instruction and
# the command) is shown in the last column without a click; its figures, basis and evidence are one
# click away there (a <details>).
FINDING_TABLE_COLUMNS = ["severity", "action", "kind", "where", "metric", "deficit", "evidence"]


def html_findings(findings: Sequence[Mapping[str, Any]], unanalysed: bool = False) -> str:
    """The findings table (already sorted), one row per finding: severity, the action verb as a
    badge, kind, where (with the GPU's full UUID and PCI bus id; a part of the fabric, or the
    network, for a finding of no host, class ``no-host``), metric and deficit; in the last column
    the action detail, always shown (``p.action-detail``), then a ``<details>`` of its value,
    reference, robust z, basis and evidence. Every text is the text report's (``finding_row``).
    Each cell carries its column's name (``data-label``) for the narrow layout (a card per
    finding). The table is never a scroll box of its own: every finding is in the page's scroll.
    ``unanalysed``: the sweep stopped before its analysis, so no finding is no verdict (said as an alert)."""
    if not findings and unanalysed:
        return f'<p class="alert">{_e(NOT_ANALYSED[0].upper() + NOT_ANALYSED[1:])}.</p>'
    if not findings:
        return '<p class="muted">No findings.</p>'
    rows = [_finding_row(finding) for finding in findings]
    return _html_table("findings-table", FINDING_TABLE_COLUMNS, rows)


def _finding_row(finding: Mapping[str, Any]) -> str:
    severity, action, kind, where, metric, value, reference, deficit, robust_z, basis, evidence, detail = (
        finding_row(finding, full_uuid=True))
    verb = action_verb(finding)
    location = finding_location(finding)
    ids = where.removeprefix(location)  # the GPU's UUID and bus id, the share of a fleet shift
    gpu = gpu_ids(finding, full_uuid=True)
    facts = [("value", value), ("reference", reference), ("robust z", robust_z), ("basis", basis),
             ("evidence", evidence)]
    # What to do is what the person on call reads first: shown, never folded away with the evidence.
    shown = f'<p class="action-detail">{_e(detail)}</p>' if detail else ""
    body = "".join(f"<dt>{_e(name)}</dt><dd>{_e(text)}</dd>" for name, text in facts if text)
    summary = " vs ".join(part for part in (value, reference) if part) or basis or "details"
    folded = f"<details><summary>{_e(summary)}</summary><dl>{body}</dl></details>" if body else ""
    # (attributes, inner HTML) of each cell, in FINDING_TABLE_COLUMNS order
    cells = [("", _e(severity)), (f' class="action act-{verb}"' if verb else ' class="action"', _e(action)),
             ("", _e(kind)),
             (f' title="{_e(f"GPU {gpu}")}"' if gpu else "",
              _e(location) + (f'<small class="ids">{_e(ids)}</small>' if ids else "")),
             ("", _e(metric)), ("", _e(deficit)), (' class="evidence"', shown + folded)]
    row = "".join(f'<td data-label="{label}"{attributes}>{inner}</td>'
                  for label, (attributes, inner) in zip(FINDING_TABLE_COLUMNS, cells, strict=True))
    classes = _e(finding.get("severity", "")) + (" no-host" if finding.get("host") is None else "")
    return f'<tr class="{classes}">{row}</tr>'


def _footer(document: Document) -> str:
    return (f"{document.get('schema', 'gpudiag.sweep')} · started {document.get('started_at', '?')} · "
            f"finished {document.get('finished_at', '?')}")


def _read_template(name: str) -> str:
    path = reports_dir() / name
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise InstallationError(f"the report template {path} cannot be read ({error.strerror}); "
                                "reinstall gpudiag") from error


def reports_dir() -> Path:
    """The folder of the report templates: the installed ``gpudiag.report.templates`` package
    data (a link to the checkout's ``reports/``), or that ``reports/`` itself. Raises
    InstallationError when neither is there."""
    spec = importlib.util.find_spec("gpudiag.report.templates")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    # An editable install made before reports/ joined the package mapping still finds the checkout's
    # (this file is <checkout>/gpudiag/report/html.py).
    checkout = Path(__file__).resolve().parents[2] / "reports"
    if (checkout / TEMPLATE_FILES[0]).is_file():
        return checkout
    raise InstallationError("the report templates (gpudiag.report.templates) are not installed; "
                            "reinstall gpudiag")
