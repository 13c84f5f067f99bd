"""The colour scale of the HTML report and its device grid: one row per host, one cell per GPU (and
one for the host's CPU where it was measured), showing the device's worst figure across every
measured metric (GEMM, memory bandwidth, PCIe both ways, P2P, SM clock; ``gpufigures``) as a share
of the fleet median of its key, with the metric named in the cell and every figure in its title.
A device a finding names takes the fault colour whatever its figures, and a host a finding names
has its name in that colour, so every faulty GPU shows at a glance. Hosts named by a finding come
first, in cost order. Above FOLD_ABOVE_HOSTS hosts, the others are shown worst first up to
OTHER_ROWS_SHOWN and the rest folded into one line with the range of their figures and their names
(as the link section does): a 4,096-node report stays small and quick to load. Colours are computed
here and written inline; the link section (``linkmap``) uses the same scale."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from ..hosts import fold_hosts
from ..words import fixed, plural
from .gpufigures import DeviceCell, DeviceFigure, DeviceGrid, column_label, column_order, device_grid
from .markup import _e
from .phrasing import Document, _findings, _hosts, sort_findings

# Heat-map colour scale: green at or above the reference, through yellow, red at this share of it.
HEAT_RED_RATIO = 0.80
# A device or host a finding names: a solid colour the scale never reaches, with white text.
FAULT_COLOUR = "#8e1b10"
FAULT_STYLE = f"background:{FAULT_COLOUR};color:#fff"
# A finding about a whole host (no GPU) marks the host's name; this key stands for "no GPU".
WHOLE_HOST = None
# Up to this many hosts every row is shown, in the document's order after the named hosts.
FOLD_ABOVE_HOSTS = 64
# Rows shown beyond the named hosts in a larger fleet (the worst first); the rest are folded.
OTHER_ROWS_SHOWN = 50


def heat_colour(ratio: float) -> str:
    """CSS colour of a value at ``ratio`` of its reference: green at or above it, yellow at 10 %
    below, red at HEAT_RED_RATIO and below."""
    share = min(1.0, max(0.0, (ratio - HEAT_RED_RATIO) / (1.0 - HEAT_RED_RATIO)))
    return f"hsl({round(120 * share)},70%,{round(68 + 12 * share)}%)"


def named_devices(document: Document) -> dict[str, dict[int | None, list[str]]]:
    """The kinds of the findings naming each host and GPU (WHOLE_HOST: a finding about the host, or a
    link of it), in cost order: a finding names its ``host`` and ``gpu``, a GPU pair also its
    ``peer_gpu``, a link also its ``peer`` host."""
    named: dict[str, dict[int | None, list[str]]] = defaultdict(lambda: defaultdict(list))
    for finding in sort_findings(_findings(document)):
        host, peer = finding.get("host"), finding.get("peer")
        kind = str(finding.get("kind") or "finding")
        gpus = [gpu for gpu in (finding.get("gpu"), finding.get("peer_gpu")) if isinstance(gpu, int)]
        if isinstance(host, str):
            for gpu in gpus or [WHOLE_HOST]:
                named[host][gpu].append(kind)
        if isinstance(peer, str) and peer != host:
            named[peer][WHOLE_HOST].append(kind)
    return named


def html_heatmap(document: Document) -> str:
    """The device grid: a row per host (those named by a finding first), a column per GPU index (and
    ``host`` for CPU figures), each cell the device's worst share of its fleet median and that
    metric, then the row's worst and the findings naming the host; a host without figures is a
    greyed row with its status. A muted line when the sweep measured no device at all."""
    grid = device_grid(document)
    named = named_devices(document)
    columns = sorted({*grid.columns, *(gpu for gpus in named.values() for gpu in gpus if gpu is not None)},
                     key=column_order)
    if not grid.figures:
        return '<p class="muted" id="no-device-figures">No GPU or host device figures in this sweep.</p>'
    headers = "".join(f"<th>{_e(header)}</th>" for header in ("host", *map(column_label, columns))) + (
        '<th class="worst">worst</th><th class="kinds">findings</th>')
    shown, folded = _split_rows(document, grid, named)
    rows = [_row(host, grid.cells(str(host.get("host"))), columns, named.get(str(host.get("host")), {}))
            for host in shown]
    # The style sheet's narrow layout (a phone) puts each row's worst and findings right after the host,
    # before the device columns, whose count it reads from --devices.
    return (_legend(grid) + f'<div class="grid-scroll"><table id="gpu-heatmap" class="heatmap" '
            f'style="--devices:{len(columns)}"><thead><tr>{headers}</tr></thead>\n<tbody>\n'
            + "\n".join(rows) + "\n</tbody></table></div>" + _folded_line(grid, folded))


def _split_rows(document: Document, grid: DeviceGrid, named: Mapping[str, Any]
                ) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """(shown, folded): hosts named by a finding first (in the cost order of their first finding),
    then the rest, in the document's order up to FOLD_ABOVE_HOSTS hosts, else the OTHER_ROWS_SHOWN
    worst (a host without any figure first) and the others folded."""
    hosts = _hosts(document)
    rank = {host: index for index, host in enumerate(named)}
    flagged = sorted((host for host in hosts if str(host.get("host")) in rank), key=lambda h: rank[str(h.get("host"))])
    others = [host for host in hosts if str(host.get("host")) not in rank]
    if len(hosts) <= FOLD_ABOVE_HOSTS:
        return flagged + others, []
    others.sort(key=lambda host: grid.worst_ratio(str(host.get("host"))) or 0.0)
    return flagged + others[:OTHER_ROWS_SHOWN], others[OTHER_ROWS_SHOWN:]


def _folded_line(grid: DeviceGrid, folded: Sequence[Mapping[str, Any]]) -> str:
    """How many hosts were folded, the range of their worst devices and their names."""
    if not folded:
        return ""
    ratios = [ratio for host in folded if (ratio := grid.worst_ratio(str(host.get("host")))) is not None]
    text = f"{plural(len(folded), 'more host')} folded, none named by a finding"
    if ratios:
        text += f"; their worst devices {100 * min(ratios):.1f}–{100 * max(ratios):.1f} % of the fleet median"
    names = fold_hosts(str(host.get("host")) for host in folded)
    return (f'<p class="legend" id="gpu-folded">{_e(text)}.</p>'
            f"<details><summary>folded hosts</summary><p>{_e(names)}</p></details>")


def _row(host: Mapping[str, Any], cells: Mapping[int, DeviceCell], columns: Sequence[int],
         named: Mapping[int | None, list[str]]) -> str:
    label = str(host.get("host"))
    head_style = f' style="{FAULT_STYLE}"' if named else ""
    parts = [f"<th{head_style}>{_e(label)}</th>"]
    if not cells:
        status = str(host.get("status"))
        text = f"{status}: {host.get('error')}" if host.get("error") else f"{status}: no device figure"
        parts.append(f'<td class="status" colspan="{len(columns) + 1}">{_e(text)}</td>')
        parts.append(_findings_cell(named))
        return '<tr class="nodata">' + "".join(parts) + "</tr>"
    for column in columns:
        parts.append(_device_cell(label, column, cells.get(column), named.get(column, [])))
    worst = min((cell.worst for cell in cells.values() if cell.worst is not None), key=lambda f: f.ratio,
                default=None)
    parts.append('<td class="worst">-</td>' if worst is None else
                 f'<td class="worst" style="background:{heat_colour(worst.ratio)}">{_share_words(worst)}</td>')
    parts.append(_findings_cell(named))
    return "<tr>" + "".join(parts) + "</tr>"


def _device_cell(host: str, column: int, cell: DeviceCell | None, kinds: Sequence[str]) -> str:
    where = f"{host} {column_label(column)}"
    found = f"; finding: {', '.join(kinds)}" if kinds else ""
    fault = ' class="fault"' if kinds else ""
    if cell is None or cell.worst is None:
        marked = f' class="missing fault" style="{FAULT_STYLE}"' if kinds else ' class="missing"'
        return f'<td{marked} title="{_e(f"{where}: no figure{found}")}">-</td>'
    worst = cell.worst
    style = FAULT_STYLE if kinds else f"background:{heat_colour(worst.ratio)}"
    title = f"{where}: " + ", ".join(_figure_words(figure) for figure in cell.figures) + found
    return f'<td{fault} style="{style}" title="{_e(title)}">{_share_words(worst)}</td>'


def _findings_cell(named: Mapping[int | None, list[str]]) -> str:
    words = [f"{kind} GPU {gpu}" if gpu is not None else kind
             for gpu, kinds in sorted(named.items(), key=lambda item: (item[0] is not None, item[0] or 0))
             for kind in dict.fromkeys(kinds)]
    return f'<td class="kinds">{_e(", ".join(words))}</td>'


def _share_words(figure: DeviceFigure) -> str:
    """``50 %<small>H2D</small>``: the share of the fleet median, whole, and the metric."""
    return f"{100 * figure.ratio:.0f} %<small> {_e(figure.label)}</small>"


def _figure_words(figure: DeviceFigure) -> str:
    return f"{figure.label} {fixed(figure.value)} {figure.unit} ({100 * figure.ratio:.1f} %)"


def heat_swatches() -> str:
    """Swatches of the colour scale, 100 % down to HEAT_RED_RATIO, as inline HTML."""
    steps = [1.0, 0.95, 0.9, 0.85, HEAT_RED_RATIO]
    return "".join(f'<span class="swatch" style="background:{heat_colour(r)}">{100 * r:.0f} %</span>'
                   for r in steps)


def _legend(grid: DeviceGrid) -> str:
    medians = "".join(f"<li>{_e(model)}: {_e(label)} {_e(fixed(value))} {_e(unit)}</li>"
                      for (model, label, unit), value in grid.references.items())
    return (f'<p class="legend">Each cell: the device\'s worst figure (GEMM, memory, PCIe H2D/D2H, P2P, SM clock) '
            f"as a share of the fleet median of its key (model, probe, parameters), and which metric it is; "
            f"every figure in the cell's title. {heat_swatches()} "
            f'<span class="swatch" style="{FAULT_STYLE}">finding</span> named by a finding.</p>'
            f"<details><summary>fleet medians</summary><ul>{medians}</ul></details>")
