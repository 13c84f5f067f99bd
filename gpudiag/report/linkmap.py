"""The HTML report's node-to-node link section, readable from 4 hosts to 1,000 and more.

A screen gives each host two to six partners, so a host × host matrix is mostly empty and, at
1,000 nodes, unreadable. The section is instead one row per host — suspects first (see
``linkfigures``) — with the host's own partners as cells: the partner, its figure on the worst
rail, coloured by the ratio to the reference of its group (backend, rail, line rate), every
rail in the cell's title; a pair that could not be tested is a dark ``error`` cell with the
reason in its title. Every suspect row is shown, then at most OTHER_ROWS_SHOWN others; one line
says how many hosts were folded and the range of their figures, and hosts no pair test reached
are listed with the reason. Up to LINK_MATRIX_MAX_HOSTS hosts the true symmetric matrix is drawn
as well. No JavaScript; colours are inline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..findings import Kind
from ..hosts import fold_hosts
from ..words import deficit_text, fixed, plural, share_text
from .heatmap import heat_colour, heat_swatches
from .linkfigures import (
    HostRow,
    LinkView,
    PairFigures,
    RailFigure,
    link_view,
    not_tested_groups,
    rail_label,
    rails_text,
)
from .markup import _e, _html_table
from .phrasing import Document, _hosts

# Up to this many hosts the symmetric host × host matrix is drawn as well as the rows.
LINK_MATRIX_MAX_HOSTS = 64
# Rows shown beyond the suspects (the hosts with the worst pairs); the rest are folded into one line.
OTHER_ROWS_SHOWN = 50
# Partner cells in one row (a full round-robin gives N - 1 partners); the rest are counted.
PARTNER_CELLS_SHOWN = 12
NOT_TESTED_ROWS_SHOWN = 50
# A pair that could not be tested: dark, so it never reads as a slow figure or as an empty cell.
ERROR_STYLE = "background:#4a5163;color:#fff;text-align:center"
# Words in a grid of figures (the heat-map cells are right-aligned and monospaced).
TEXT_CELL_STYLE = "text-align:left;font-family:inherit;white-space:nowrap"
HOST_COLUMNS = ["host", "link finding", "rails", "partners", "worst", "of reference", "of line rate"]
# The header of the worst column says what it leaves out (linkfigures: a partner's own finding).
WORST_HEADER_TITLE = "the worst pair, leaving out partners whose own finding (a slow NIC) explains it"


def html_links(document: Document) -> str:
    """The link section: counts, the groups and their references, the matrix (small fleets), one
    row per host with its partners (suspects first, the rest folded past OTHER_ROWS_SHOWN), and
    the hosts no pair test reached. A muted line when the sweep measured no links."""
    view = link_view(document)
    if not view.pairs:
        return '<p class="muted" id="no-links">no link measurements in this sweep</p>'
    shown, folded = _split_rows(view.rows)
    parts = [_counts_line(document, view, shown, folded), *_shift_lines(view), _groups_table(view),
             f'<p class="legend">Each pair figure is the median of its runs on one rail; a cell shows the pair\'s '
             f"worst rail, coloured by its share of the reference of its group (the level the sweep judged "
             f"the pairs of the same backend, rail and line rate against): {heat_swatches()} "
             f'<span class="swatch" style="{ERROR_STYLE}">error</span> could not be tested.</p>']
    matrix_hosts = [row.host for row in view.rows if row.partners]
    if len(matrix_hosts) <= LINK_MATRIX_MAX_HOSTS:
        parts.append(_matrix(view, matrix_hosts))
    parts += [_hosts_table(view, shown), _folded_line(view, folded), _not_tested(view)]
    return "\n".join(part for part in parts if part)


def _split_rows(rows: Sequence[HostRow]) -> tuple[list[HostRow], list[HostRow]]:
    """(shown, folded): every suspect and the OTHER_ROWS_SHOWN next rows; nothing is folded when
    all rows fit (a small fleet)."""
    suspects = [row for row in rows if row.suspect]
    others = [row for row in rows if not row.suspect]
    if len(rows) <= LINK_MATRIX_MAX_HOSTS:
        return suspects + others, []
    return suspects + others[:OTHER_ROWS_SHOWN], others[OTHER_ROWS_SHOWN:]


def _counts_line(document: Document, view: LinkView, shown: Sequence[HostRow], folded: Sequence[HostRow]) -> str:
    tested = sum(1 for row in view.rows if row.partners)
    error_pairs = view.error_pairs
    error_rails = sum(len(pair.errors) for pair in error_pairs)
    suspects = sum(1 for row in shown if row.suspect)
    parts = [f"{plural(len(_hosts(document)), 'host')} in the sweep: {tested} pair-tested, "
             f"{len(view.not_tested)} not tested",
             f"{plural(len(view.pairs), 'pair')} measured ({plural(view.figures, 'pair-rail figure')}) in "
             f"{plural(len(view.groups), 'group')}",
             f"{plural(len(error_pairs), 'pair')} could not be tested ({plural(error_rails, 'pair-rail')})",
             f"rows: {suspects} suspect, {len(shown) - suspects} more shown, {len(folded)} folded"]
    if view.other_metric_entries:
        parts.append(f"{view.other_metric_entries} entries of another metric not shown")
    return f'<p class="legend" id="link-counts">{_e(" · ".join(parts))}</p>'


def _shift_lines(view: LinkView) -> list[str]:
    """One line per link ``fleet_shift`` finding: a whole group below its line rate or baseline."""
    lines = []
    for shift in view.shifts:
        text = (f"{shift.get('severity', '')} fleet shift {shift.get('metric', '')}: the fabric's median pair "
                f"{fixed(float(shift['value']))} vs {shift.get('reference_source') or 'reference'} "
                f"{fixed(float(shift['reference']))} {view.unit}" if _has_figures(shift)
                else f"{shift.get('severity', '')} fleet shift {shift.get('metric', '')}")
        if shift.get("evidence"):
            text += f" — {shift['evidence']}"
        lines.append(f'<p class="legend"><strong class="alert">{_e(text)}</strong></p>')
    return lines


def _groups_table(view: LinkView) -> str:
    rows = []
    for group in view.groups:
        line = "" if group.line_rate_gbps is None else f"{group.line_rate_gbps:g} Gb/s"
        reference = "" if group.reference_gbps is None else f"{fixed(group.reference_gbps)} {view.unit}"
        of_line = ("" if group.reference_gbps is None or group.line_rate_gbps is None
                   else f"{100 * group.reference_gbps / group.line_rate_gbps:.1f} %")
        cells = [group.backend, "-" if group.rail is None else str(group.rail), line, str(group.pairs),
                 str(group.error_pairs), reference, of_line]
        rows.append("<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in cells) + "</tr>")
    headers = ["backend", "rail", "line rate", "pairs", "could not be tested", "reference (judged against)",
               "reference of line rate"]
    return _html_table("link-groups", headers, rows)


def _matrix(view: LinkView, hosts: Sequence[str]) -> str:
    """The symmetric host × host matrix of each pair's worst rail, in row order (suspects first)."""
    rows = []
    for host in hosts:
        cells = [f"<th>{_e(host)}</th>"]
        for other in hosts:
            if other == host:
                cells.append('<td class="self">-</td>')
                continue
            pair = view.pairs.get((host, other) if host <= other else (other, host))
            cells.append('<td class="missing"></td>' if pair is None else _pair_cell(pair, view.unit, ""))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return _html_table("link-matrix", ["", *hosts], rows, css_class="heatmap links")


def _hosts_table(view: LinkView, rows: Sequence[HostRow]) -> str:
    widest = max((min(len(row.partners), PARTNER_CELLS_SHOWN + 1) for row in rows), default=1)
    head = "".join(f'<th title="{_e(WORST_HEADER_TITLE)}">{_e(header)}</th>' if header == "worst"
                   else f"<th>{_e(header)}</th>" for header in HOST_COLUMNS)
    head += f'<th colspan="{max(1, widest)}">partners, worst first</th>'
    body = "\n".join(_host_row(row, view.unit) for row in rows)
    return (f'<table id="link-hosts" class="heatmap links"><thead><tr>{head}</tr></thead>\n<tbody>\n'
            f"{body}\n</tbody></table>")


def _host_row(row: HostRow, unit: str) -> str:
    cells = [f"<th>{_e(row.host)}</th>", _finding_cell(row), f"<td>{_e(rails_text(row.rails) or '-')}</td>",
             f"<td>{len(row.partners)}</td>"]
    worst = row.worst
    rail = None if worst is None else worst.worst
    if worst is None or rail is None:
        cells.append('<td class="missing" colspan="3">no figure</td>')
    else:
        ratio = rail.ratio
        colour = f' style="background:{heat_colour(ratio)}"' if ratio is not None else ""
        title = _pair_title(worst, unit)
        if row.explained:
            title += f" · leaving out {', '.join(row.explained)}: explained by their own finding"
        cells.append(f'<td class="worst"{colour} title="{_e(title)}">{_e(fixed(rail.gbps or 0.0))}</td>')
        cells.append(f"<td>{'' if ratio is None else f'{100 * ratio:.1f} %'}</td>")
        cells.append(f"<td>{'' if rail.line_rate_pct is None else f'{rail.line_rate_pct:.1f} %'}</td>")
    partners = row.partners
    cells += [_pair_cell(pair, unit, pair.partner(row.host)) for pair in partners[:PARTNER_CELLS_SHOWN]]
    if len(partners) > PARTNER_CELLS_SHOWN:
        cells.append(f'<td class="missing">+{len(partners) - PARTNER_CELLS_SHOWN} more</td>')
    if not partners:
        cells.append('<td class="missing">no pair measured</td>')
    klass = ' class="suspect"' if row.suspect else ""
    return f"<tr{klass}>" + "".join(cells) + "</tr>"


def _finding_cell(row: HostRow) -> str:
    if not row.findings:
        return "<td></td>"
    words, evidence = [], []
    for finding in row.findings:
        text = f"{finding.get('kind')} {finding.get('severity', '')}".strip()
        ends = {str(finding.get("host")), str(finding.get("peer"))} - {row.host, "None"}
        if finding.get("kind") != Kind.SLOW_NIC and ends:
            text += f" ↔ {', '.join(sorted(ends))}"
        words.append(text)
        if finding.get("evidence"):
            evidence.append(f"{text}: {finding['evidence']}")
    title = f' title="{_e("; ".join(evidence))}"' if evidence else ""
    return f'<td style="{TEXT_CELL_STYLE}"{title}>{_e("; ".join(words))}</td>'


def _pair_cell(pair: PairFigures, unit: str, label: str) -> str:
    """A cell of one pair: ``label`` (the partner, or nothing in the matrix) and the worst rail's
    figure coloured by its ratio; a dark ``error`` cell when a rail could not be tested."""
    prefix = f"{label} " if label else ""
    title = _e(_pair_title(pair, unit))
    worst = pair.worst
    if pair.errors or worst is None or worst.gbps is None:
        return f'<td class="error" style="{ERROR_STYLE}" title="{title}">{_e(prefix)}error</td>'
    ratio = worst.ratio
    colour = f' style="background:{heat_colour(ratio)}"' if ratio is not None else ""
    return f'<td{colour} title="{title}">{_e(prefix + fixed(worst.gbps))}</td>'


def _pair_title(pair: PairFigures, unit: str) -> str:
    """``a ↔ b · worst tcp rail 3: 88.2 Gbit/s, 93.1 % of reference 94.7 ... · rails: 0 94.1 (99 %), ...``."""
    parts = [f"{pair.a} ↔ {pair.b}"]
    worst = pair.worst
    if worst is not None:
        parts.append(f"worst {rail_label(worst.backend, worst.rail)}: {_rail_words(worst, unit)}")
    for rail in pair.errors:
        reasons = "; ".join(sorted(set(rail.errors))) or "no figure"
        parts.append(f"{rail_label(rail.backend, rail.rail)} could not be tested: {reasons}")
    if len(pair.rails) > 1:
        several = len({rail.backend for rail in pair.rails}) > 1
        parts.append("rails: " + ", ".join(_rail_brief(rail, several) for rail in pair.rails))
    return " · ".join(parts)


def _rail_words(rail: RailFigure, unit: str) -> str:
    """``5.21 Gbit/s, −44.7 % below reference 9.42, 5.2 % of line rate; 2 runs, 1 failed: reason``
    (the reference is the one the rail's group was judged against: backend, rail and line rate)."""
    text = f"{fixed(rail.gbps or 0.0)} {unit}"
    if rail.ratio is not None and rail.reference_gbps is not None:
        text += f", {deficit_text(100 * (1 - rail.ratio))} reference {fixed(rail.reference_gbps)}"
    if rail.line_rate_pct is not None:
        text += f", {share_text(rail.line_rate_pct, f'line rate {rail.line_rate_gbps:g}')}"
    text += f"; {rail.runs} runs" if rail.runs != 1 else "; 1 run"
    if rail.errors:
        text += f", {len(rail.errors)} failed: {'; '.join(sorted(set(rail.errors)))}"
    return text


def _rail_brief(rail: RailFigure, with_backend: bool) -> str:
    label = (rail_label(rail.backend, rail.rail) if with_backend
             else "-" if rail.rail is None else str(rail.rail))
    if rail.gbps is None:
        return f"{label} error"
    ratio = "" if rail.ratio is None else f" ({deficit_text(100 * (1 - rail.ratio))})"
    return f"{label} {fixed(rail.gbps)}{ratio}"


def _folded_line(view: LinkView, folded: Sequence[HostRow]) -> str:
    """What the folded rows hold: how many, their worst pairs' range, and their names."""
    if not folded:
        return f'<p class="legend" id="link-folded">All {len(view.rows)} host rows are shown; none folded.</p>'
    ratios = [row.worst_ratio for row in folded if row.worst_ratio is not None]
    figures = [rail.gbps for row in folded if row.worst is not None
               and (rail := row.worst.worst) is not None and rail.gbps is not None]
    partners = sum(len(row.partners) for row in folded)
    text = (f"{plural(len(folded), 'more host')} folded ({plural(partners, 'partner cell')}), "
            "none named by a link finding and none with an error pair")
    if ratios and figures:
        text += (f"; their worst pairs: {100 * min(ratios):.1f}–{100 * max(ratios):.1f} % of the reference, "
                 f"{fixed(min(figures))}–{fixed(max(figures))} {view.unit}")
    names = fold_hosts(row.host for row in folded)
    return (f'<p class="legend" id="link-folded">{_e(text)}.</p>\n'
            f"<details><summary>folded hosts</summary><p>{_e(names)}</p></details>")


def _not_tested(view: LinkView) -> str:
    """Hosts of the sweep that no pair test reached, grouped by reason."""
    if not view.not_tested:
        return ""
    reasons = not_tested_groups(view)
    rows = [f"<tr><td>{_e(fold_hosts(hosts))}</td><td>{len(hosts)}</td><td>{_e(reason)}</td></tr>"
            for reason, hosts in reasons[:NOT_TESTED_ROWS_SHOWN]]
    rest = reasons[NOT_TESTED_ROWS_SHOWN:]
    heading = (f'<p class="legend" id="link-not-tested-count">{len(view.not_tested)} hosts of the sweep were not '
               "pair-tested:</p>")
    table = _html_table("link-not-tested", ["not tested", "count", "reason"], rows)
    if rest:
        hosts = [host for _, labels in rest for host in labels]
        table += (f'\n<p class="legend">{len(rest)} more reasons for {len(hosts)} hosts: '
                  f"{_e(fold_hosts(hosts))}</p>")
    return heading + table


def _has_figures(finding: object) -> bool:
    return (isinstance(finding, Mapping) and isinstance(finding.get("value"), int | float)
            and isinstance(finding.get("reference"), int | float))
