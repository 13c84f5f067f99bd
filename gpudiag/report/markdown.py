"""The markdown report: summary, impact, findings, links and hosts-by-status as GitHub tables."""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

from ..hosts import fold_hosts
from ..schema.text import clean_text
from .folding import fold_findings
from .linkfigures import (
    BACKEND_COLUMNS,
    ERROR_PAIR_COLUMNS,
    NOT_TESTED_COLUMNS,
    SLOWEST_PAIR_COLUMNS,
    backend_rows,
    counts_text,
    error_pair_rows,
    link_view,
    not_tested_groups,
    slowest_pair_rows,
)
from .phrasing import FINDING_COLUMNS, HOST_COLUMNS, Document, _findings, finding_row, host_group_rows, sort_findings
from .summary import NOT_ANALYSED, _impact_rows, focus_line, not_analysed, summary_parts


def render_markdown(document: Document) -> str:
    """Markdown: summary, impact, findings table, links (when measured), hosts-by-status table
    (GitHub tables, ``|`` escaped)."""
    headline = " · ".join(f"**{_md_cell(text)}**" if alarm else _md_cell(text)
                          for text, alarm in summary_parts(document))
    sections = [f"# gpudiag sweep {_md_cell(document.get('sweep_id', '?'))}", headline,
                f"Started {document.get('started_at', '?')}, finished {document.get('finished_at', '?')}."]
    focus = focus_line(document)
    if focus:
        sections.append(_md_cell(focus))
    impact_rows = _impact_rows(document.get("impact"))
    if impact_rows:
        sections += ["## Impact on a synchronous job", _md_table(["estimate", "value"], impact_rows)]
    findings = sort_findings(_findings(document))
    sections.append("## Findings, most costly first")
    sections.append(_md_table(FINDING_COLUMNS, [finding_row(f) for f in fold_findings(findings)]) if findings
                    else f"{NOT_ANALYSED[0].upper()}{NOT_ANALYSED[1:]}." if not_analysed(document) else "None.")
    sections += link_sections(document)
    sections += ["## Hosts by status", _md_table(HOST_COLUMNS, host_group_rows(document))]
    return "\n\n".join(sections) + "\n"


NOT_TESTED_ROWS = 20


def link_sections(document: Document) -> list[str]:
    """The links section: counts, pairs per backend, the slowest pairs (worst rail, its group's
    reference, the deficit below it and the share of the line rate), the pairs that could not be tested and the hosts no
    pair test reached. Empty when the sweep measured no links."""
    view = link_view(document)
    if not view.pairs:
        return []
    sections = ["## Links", _md_cell(f"{counts_text(view)}. A figure is the median of a pair's runs on one rail; "
                                     "its reference is the level the sweep judged the same backend, rail and "
                                     "line rate against."),
                _md_table(BACKEND_COLUMNS, backend_rows(view)),
                _md_table(SLOWEST_PAIR_COLUMNS, slowest_pair_rows(view))]
    errors = error_pair_rows(view)
    if errors:
        sections.append(_md_table(ERROR_PAIR_COLUMNS, errors))
    groups = not_tested_groups(view)
    if groups:
        rows = [[fold_hosts(hosts), str(len(hosts)), reason] for reason, hosts in groups[:NOT_TESTED_ROWS]]
        rest = [host for _, hosts in groups[NOT_TESTED_ROWS:] for host in hosts]
        if rest:
            rows.append([fold_hosts(rest), str(len(rest)), f"{len(groups) - NOT_TESTED_ROWS} other reasons"])
        sections.append(_md_table(NOT_TESTED_COLUMNS, rows))
    return sections


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return tabulate([[_md_cell(cell) for cell in row] for row in rows], headers=list(headers),
                    tablefmt="github", disable_numparse=True)


# Node-supplied text is data, never markdown or HTML: a '|' would end the cell and a line break
# the row; '<' starts raw HTML and autolinks, '&' an entity, '*' and '`' emphasis and code; and
# '](' an inline link or image (``[x](javascript:...)``). Brackets alone are left as they are: a
# folded host list (node[001-032]) is full of them, and without '](' (or a definition, which
# cannot stand in a cell) they make no link. An '_' inside a word is no emphasis in GitHub's
# markdown, and names such as slow_gpu are full of them: it is left as it is too.
_MARKDOWN_ESCAPES = str.maketrans({"\\": "\\\\", "|": "\\|", "`": "\\`", "*": "\\*", "<": "&lt;", ">": "&gt;",
                                   "&": "&amp;"})
# A cell of a document read from a file is cut to this many characters.
CELL_CHARS = 4000


def _md_cell(value: object) -> str:
    """``value`` as the text of one markdown cell or line: one line, no control character, and
    every character markdown or HTML would read as markup escaped."""
    return clean_text(str(value), CELL_CHARS).translate(_MARKDOWN_ESCAPES).replace("](", "]\\(")
