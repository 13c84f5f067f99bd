"""``gpudiag history``: the stored sweeps, or one host's figures and pair figures across them."""

from __future__ import annotations

import statistics

import click
from rich.console import Console
from rich.table import Table

from .cli_options import WIDER_HINT, store_location, store_option
from .errors import InputError
from .exitcodes import ExitCode
from .keys import LINK_UNIT
from .links.attribution import HostLinkFigures, host_link_figures
from .links.rounds import link_results
from .store import Store
from .tables import Column, TableSpec, fit_table, print_tables


@click.command()
@click.argument("host", required=False)
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Sweeps to show.")
@store_option
def history(host: str | None, limit: int, store_path: str | None) -> ExitCode:
    """A host's key figures across stored sweeps (without HOST: the stored sweeps)."""
    console = Console()
    with Store.open(store_location(store_path), readonly=True) as store:
        if host is None:
            print_tables(console, [_sweeps_table(store.list_sweeps(limit), console.width)])
        else:
            rows = store.host_history(host, limit)
            if not rows:
                raise InputError(f"{host}: not in any stored sweep of {store_location(store_path)}")
            links = _link_history_table(host, rows, console.width)
            print_tables(console, [_history_table(host, rows, console.width), *([links] if links else [])])
    return ExitCode.OK


SWEEPS_COLUMNS = (Column("sweep", "name"), Column("ok/all", justify="left"), Column("findings", justify="left"),
                  Column("links", justify="left", drop_rank=1), Column("slowest link", justify="left", drop_rank=2),
                  Column("exit", "text"))


def _sweeps_table(sweeps: list[dict], width: int) -> Table:
    """The stored sweeps within ``width`` characters."""
    # The sweep id carries its start time (gpudiag names a sweep by it): no column of its own,
    # so that the pair tests fit in 80 columns.
    rows = []
    for sweep in sweeps:
        exit_code = "interrupted" if sweep["interrupted"] else str(sweep["exit_code"])
        rows.append((sweep["sweep_id"], f"{sweep['hosts_ok']}/{sweep['hosts_total']}", str(sweep["findings"]),
                     _link_count(sweep), _slowest_link(sweep.get("slowest_link")), exit_code))
    return fit_table(TableSpec("Stored sweeps, newest first", SWEEPS_COLUMNS, tuple(rows)), width, WIDER_HINT)


def _link_count(sweep: dict) -> str:
    """The sweep's pair tests (one per rail), and below, how many gave no figure."""
    if not sweep.get("links"):
        return ""
    failed = sweep.get("links_failed") or 0
    return f"{sweep['links']}" + (f"\n{failed} failed" if failed else "")


def _slowest_link(link: dict | None) -> str:
    """The slowest measured test: its ends, and below, its rail and figure."""
    if not link:
        return ""
    rail = "" if link.get("rail") is None else f"r{link['rail']} "
    return f"{link['a']}–{link['b']}\n{rail}{link['value']:.1f} {LINK_UNIT}"


# Parameters that name what a figure is (the rest, GPU pair or buffer size, are folded together).
HISTORY_PARAMS = ("dtype", "direction", "memory")


# The sweep and its status head each sweep's rows, in the figure column: a column of their own
# (21 characters of sweep id) would not leave the figures room in 80 columns.
HISTORY_COLUMNS = (Column("sweep, figure", "text"), Column("min"), Column("median"), Column("max"),
                   Column("unit", "text", drop_rank=1))


def _history_table(host: str, rows: list[dict], width: int) -> Table:
    """The host's figures per stored sweep within ``width`` characters: a line naming the sweep
    and its status, then one line per figure (min, median, max over its GPUs, unit)."""
    cells: list[tuple[str, ...] | None] = []
    for row in rows:
        status = row["status"] if not row.get("error") else f"{row['status']}: {row['error']}"
        cells.append((f"sweep {row['sweep_id']}: {status}", "", "", "", ""))
        for name, (low, middle, high, unit) in sorted(_fold_figures(row["figures"]).items()):
            cells.append((name, f"{low:.4g}", f"{middle:.4g}", f"{high:.4g}", unit or ""))
        cells.append(None)
    spec = TableSpec(f"{host}: min / median / max over its GPUs, newest sweep first", HISTORY_COLUMNS,
                     tuple(cells))
    return fit_table(spec, width, WIDER_HINT)


LINK_HISTORY_COLUMNS = (Column("sweep, link", "text"), Column("worst, with"), Column("median, line", drop_rank=2),
                        Column("pairs", drop_rank=1))


def _link_history_table(host: str, rows: list[dict], width: int) -> Table | None:
    """The host's pair figures per sweep and backend/rail (None when it has none) within
    ``width`` characters: a line naming the sweep, then per link the worst partner's figure and
    who, the median and its share of the line rate, and the pairs."""
    per_sweep = [(row, host_link_figures(host, link_results(row.get("links") or ()))) for row in rows]
    if not any(figures for _, figures in per_sweep):
        return None
    cells: list[tuple[str, ...] | None] = []
    for row, figures in per_sweep:
        if figures:
            cells.extend([(f"sweep {row['sweep_id']}", "", "", ""), *map(_link_cells, figures), None])
    spec = TableSpec(f"{host}: pair figures in {LINK_UNIT} (a pair's is the mean of its runs), newest sweep first",
                     LINK_HISTORY_COLUMNS, tuple(cells))
    return fit_table(spec, width, WIDER_HINT)


def _link_cells(figure: HostLinkFigures) -> tuple[str, str, str, str]:
    """``nccl r3``, ``225.8 node031``, ``236.1 59 %``, ``7`` (``7 +1 failed``)."""
    group = figure.group
    link = group.backend if group.rail is None else f"{group.backend} r{group.rail}"
    share = figure.median_line_rate_pct
    worst = "-" if figure.worst_gbps is None else f"{figure.worst_gbps:.1f} {figure.worst_peer}"
    median = "-" if figure.median_gbps is None else f"{figure.median_gbps:.1f}"
    if share is not None:
        median += f" {share:.0f} %"
    pairs = str(figure.partners) + (f" +{figure.unmeasured} failed" if figure.unmeasured else "")
    return link, worst, median, pairs


def _fold_figures(figures: list[dict]) -> dict[str, tuple[float, float, float, str | None]]:
    """Figures of one sweep by metric and naming parameters; pairs and buffer sizes folded
    (the median shown is the median of their medians)."""
    groups: dict[str, list[dict]] = {}
    for figure in figures:
        params = figure.get("params") or {}
        name = " ".join([figure["metric"], *(str(params[p]) for p in HISTORY_PARAMS if p in params)])
        groups.setdefault(name, []).append(figure)
    return {name: (min(f["min"] for f in group), statistics.median(f["median"] for f in group),
                   max(f["max"] for f in group), group[0].get("unit"))
            for name, group in groups.items()}
