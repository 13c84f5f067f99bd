"""The markdown report: summary, impact, findings and hosts-by-status as GitHub tables."""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

from .phrasing import FINDING_COLUMNS, HOST_COLUMNS, Document, _findings, finding_row, host_group_rows, sort_findings
from .summary import _impact_rows, summary_parts


def render_markdown(document: Document) -> str:
    """Markdown: summary, impact, findings table, hosts-by-status table (GitHub tables, ``|`` escaped)."""
    headline = " · ".join(f"**{_md_cell(text)}**" if alarm else _md_cell(text)
                          for text, alarm in summary_parts(document))
    sections = [f"# gpudiag sweep {_md_cell(document.get('sweep_id', '?'))}", headline,
                f"Started {document.get('started_at', '?')}, finished {document.get('finished_at', '?')}."]
    impact_rows = _impact_rows(document.get("impact"))
    if impact_rows:
        sections += ["## Impact on a synchronous job", _md_table(["estimate", "value"], impact_rows)]
    findings = sort_findings(_findings(document))
    sections.append("## Findings, most costly first")
    sections.append(_md_table(FINDING_COLUMNS, [finding_row(f) for f in findings]) if findings else "None.")
    sections += ["## Hosts by status", _md_table(HOST_COLUMNS, host_group_rows(document))]
    return "\n\n".join(sections) + "\n"


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return tabulate([[_md_cell(cell) for cell in row] for row in rows], headers=list(headers),
                    tablefmt="github", disable_numparse=True)


def _md_cell(value: object) -> str:
    # A '|' would end the cell and a newline the row.
    return str(value).replace("|", "\\|").replace("\r", " ").replace("\n", " ")
