"""``gpudiag history``: the stored sweeps, or one host's verdict, figures and pair figures in
each of them (as the sweep judged them), their trend since its last repair and its verdict, a slow
degradation (fail) or a slide toward the warn deficit (watch) (gpudiag.store.trend); ``--repaired``
records a repair (gpudiag.store.repairs)."""

from __future__ import annotations

import os
import statistics
from datetime import datetime, timezone
from pathlib import Path

import click
from rich.table import Table

from ..analysis.keys import LINK_UNIT
from ..analysis.thresholds import load_thresholds
from ..errors import InputError
from ..exitcodes import ExitCode
from ..findings import Severity
from ..links.attribution import HostLinkFigures, LinkResult, host_link_figures, pair_means
from ..links.rounds import link_results
from ..report.phrasing import finding_location
from ..report.tables import Column, TableSpec, fit_table, make_console, print_tables
from ..schema.jsonout import dumps as strict_dumps
from ..store.historyrows import judged_figures
from ..store.repairs import Repair, host_repairs, operator_name, record_repair
from ..store.schema import refuse_unusable
from ..store.store import Store
from ..store.sweeptrends import store_fleet_noise
from ..store.trend import (
    MIN_FIT_SWEEPS,
    SIBLING_WATCH_MARGIN,
    WATCH_HORIZON,
    FigureTrend,
    HostTrends,
    host_trends,
    own_watch_z,
)
from ..store.trendseries import figure_name
from ..store.trendwords import degradation_words, unfitted_words, watch_words
from ..words import deficit_text, plural
from ..words import figure as figure_text
from .helptext import USAGE_ROW, epilog
from .options import WIDER_HINT, check_outputs, emit_json, json_option, store_location, store_option


@click.command(
    short_help="A host's verdict and figures in each stored sweep, and their trend.",
    epilog=epilog(
    ["gpudiag history --store demo/gpudiag.db             # the stored sweeps",
     "gpudiag history node017 --store demo/gpudiag.db --json -",
     "gpudiag history node017 --store demo/gpudiag.db --gpu 3 --repaired RMA-12345"],
    [(ExitCode.OK, "shown or recorded (a slow degradation or a watch is information, not a verdict)"), USAGE_ROW]))
@click.argument("host", required=False)
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Sweeps to show.")
@click.option("--repaired", "repair_text", default=None, metavar="TEXT",
              help="Record a repair of HOST (what was done, e.g. 'replaced GPU 3 (RMA 12345)'): its trend starts "
                   "again after it.")
@click.option("--gpu", type=click.IntRange(min=0), default=None, metavar="N",
              help="With --repaired: the repair was of GPU N alone (its index as gpudiag shows it, cuda:N).")
@json_option("The history (each sweep's verdict, findings and figures), repairs and trend as JSON (for scripts), "
             "instead of the tables.")
@click.option("--thresholds", "thresholds_path", default=None, metavar="FILE",
              help="Thresholds overriding the shipped defaults (history_degradation, history_min_sweeps, "
                   "history_slope_z; deficit_warn, the line a watch slides toward).")
@store_option
def history(host: str | None, limit: int, repair_text: str | None, gpu: int | None, json_path: str | None,
            thresholds_path: str | None, store_path: str | None) -> ExitCode:
    """A host's verdict and figures in each stored sweep, as the sweep judged them, their trend
    since its last repair, and any slow degradation (fail) or slide toward the warn deficit (watch)
    (without HOST: the stored sweeps).

    With --repaired, records a repair instead.
    """
    if repair_text is not None or gpu is not None:
        return _record(host, repair_text, gpu, store_location(store_path))
    thresholds = load_thresholds(thresholds_path)  # a bad file is named before the store is read
    check_outputs(json_path)
    with Store.open(store_location(store_path), readonly=True) as store:
        if host is None:
            _show_sweeps(store.list_sweeps(limit), json_path)
            return ExitCode.OK
        rows = store.host_history(host, limit)
        if not rows:
            raise InputError(f"{host}: not in any stored sweep of {store_location(store_path)}")
        repairs = host_repairs(store, host)
        fleet = store_fleet_noise(store, len(rows))
    trends = host_trends(host, rows, repairs, thresholds.history_degradation_pct, thresholds.history_min_sweeps,
                         thresholds.history_slope_z, warn_pct=thresholds.deficit_warn_pct, fleet_noise=fleet)
    if json_path is not None:
        emit_json(strict_dumps({"host": host, "sweeps": [_json_row(host, row) for row in rows],
                                "repairs": [r.to_dict() for r in repairs], "trend": trends.to_dict()}, indent=1)
                  + "\n", json_path)
        return ExitCode.OK
    console = make_console()
    links = _link_history_table(host, rows, console.width)
    print_tables(console, [_history_table(host, rows, repairs, console.width), *([links] if links else []),
                           *_trend_tables(trends, console.width)])
    for line in _trend_words(trends):
        console.print(line, markup=False, highlight=False)
    return ExitCode.OK


def _record(host: str | None, text: str | None, gpu: int | None, path: str) -> ExitCode:
    """Record a repair (``history HOST --repaired TEXT [--gpu N]``) and say so."""
    if host is None:
        raise InputError('--repaired needs the HOST that was repaired: gpudiag history HOST --repaired "..."')
    if text is None:
        raise InputError(f'--gpu goes with --repaired: gpudiag history {host} --repaired "..." --gpu {gpu}')
    refuse_unusable(Path(path).expanduser(), readonly=True)  # never create a store to record a repair in
    with Store.open(path) as store:
        repair = record_repair(store, host, text, gpu, operator_name(os.environ), datetime.now(timezone.utc))
    what = "its trends start" if repair.gpu is None else f"GPU {repair.gpu}'s trend starts"
    click.echo(f"recorded a repair of {host} ({repair.describe()}); {what} again with the sweeps after "
               f"{repair.after_sweep_id}")
    return ExitCode.OK


def _show_sweeps(sweeps: list[dict], json_path: str | None) -> None:
    """The stored sweeps (Store.list_sweeps) as a table, or as JSON to ``json_path`` (``-``: stdout)."""
    if json_path is not None:
        emit_json(strict_dumps({"sweeps": sweeps}, indent=1) + "\n", json_path)
    else:
        console = make_console()
        print_tables(console, [_sweeps_table(sweeps, console.width)])


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
        hosts, findings = f"{sweep['hosts_ok']}/{sweep['hosts_total']}", str(sweep["findings"])
        progress = sweep.get("completeness")
        if progress is not None:  # a killed sweep's stored hosts are no sweep of its planned ones
            hosts += f"\nof {progress['planned_hosts']} planned" if progress["planned_hosts"] is not None else ""
            findings = findings if progress["analysed"] else "not analysed"
            exit_code = "unfinished" if not progress["analysed"] else exit_code
        rows.append((sweep["sweep_id"], hosts, findings, _link_count(sweep), _slowest_link(sweep.get("slowest_link")),
                     exit_code))
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


# Where a finding names one of a GPU's figures, that GPU counts at the figure the sweep judged
# (Store.host_history); the verdict quotes its worst finding's figure in any case.
JUDGED_CAPTION = ("a GPU's figure that a finding names is the one the finding quotes (after a re-test, the one that "
                  "confirmed it)")
# The sweep and the host's verdict in it head each sweep's rows, in the figure column: a column of
# their own (21 characters of sweep id) would not leave the figures room in 80 columns.
HISTORY_COLUMNS = (Column("sweep, verdict, figure", "text"), Column("min"), Column("median"), Column("max"),
                   Column("unit", "text", drop_rank=1))


def _history_table(host: str, rows: list[dict], repairs: list[Repair], width: int) -> Table:
    """The host's figures per stored sweep within ``width`` characters: a line naming the sweep
    and the host's verdict in it (``verdict_text``), then one line per figure (min, median, max
    over its GPUs, unit); each repair a line of its own where it came, between two sweeps."""
    cells: list[tuple[str, ...] | None] = []
    pending = list(reversed(repairs))  # newest first, as the sweeps
    for row in rows:
        cells.extend(_repair_cells([r for r in pending if not r.precedes(row["sweep_id"], row["started_at"])]))
        pending = [r for r in pending if r.precedes(row["sweep_id"], row["started_at"])]
        cells.append((f"sweep {row['sweep_id']}: {verdict_text(row)}", "", "", "", ""))
        for name, (low, middle, high, unit) in sorted(_fold_figures(judged_figures(row)).items()):
            cells.append((name, f"{low:.4g}", f"{middle:.4g}", f"{high:.4g}", unit or ""))
        cells.append(None)
    cells.extend(_repair_cells(pending))
    spec = TableSpec(f"{host}: its verdict, then min / median / max over its GPUs, newest sweep first",
                     HISTORY_COLUMNS, tuple(cells),
                     caption=JUDGED_CAPTION if any(row.get("judged") for row in rows) else "")
    return fit_table(spec, width, WIDER_HINT)


def verdict(row: dict) -> dict:
    """The host's verdict in one sweep (a Store.host_history row): its status; the worst finding
    naming it (its findings come most costly first): severity, kind, where, metric, value, unit,
    deficit_pct; how many fail and warn findings name it; and ``text``, as history prints it.
    ``severity`` is ``ok`` where the host answered and no finding names it, None where it did not
    answer (or its sweep stopped before its analysis) and none does."""
    findings = row.get("findings") or []
    worst = findings[0] if findings else {}
    answered = row["status"] == "ok" and row.get("analysed") is not False  # measured and judged
    severity = worst.get("severity") or ("ok" if answered else None)
    return {"status": row["status"], "severity": severity, "kind": worst.get("kind"),
            "where": finding_location(worst) if worst else None,
            **{name: worst.get(name) for name in ("gpu", "peer", "metric", "value", "unit", "deficit_pct")},
            "fail": _count(findings, Severity.FAIL), "warn": _count(findings, Severity.WARN), "text": verdict_text(row)}


def verdict_text(row: dict) -> str:
    """``fail slow_gpu node017:3 gemm.tflops 585.8 TFLOP/s −14.2 % below; findings: 1 fail, 0 warn``:
    the worst finding naming the host, with the figure and deficit the sweep judged; ``ok (no
    finding)``; or, for a host that did not answer, its status and error."""
    findings = row.get("findings") or []
    if row["status"] != "ok":
        text = row["status"] if not row.get("error") else f"{row['status']}: {row['error']}"
    elif row.get("analysed") is False:
        return "measured, not judged (the sweep stopped before its analysis)"
    elif not findings:
        return "ok (no finding)"
    else:
        text = _finding_words(findings[0])
    if not findings:
        return text
    return f"{text}; findings: {_count(findings, Severity.FAIL)} fail, {_count(findings, Severity.WARN)} warn"


def _finding_words(finding: dict) -> str:
    """``fail slow_gpu node017:3 gemm.tflops 585.8 TFLOP/s −14.2 % below`` (what the finding has of it)."""
    words = [str(finding.get("severity")), str(finding.get("kind")), finding_location(finding)]
    if finding.get("value") is not None:
        words += [str(finding.get("metric") or "value"), figure_text(finding["value"], finding.get("unit"))]
    if finding.get("deficit_pct") is not None:
        words.append(deficit_text(finding["deficit_pct"]))
    return " ".join(words)


def _count(findings: list[dict], severity: Severity) -> int:
    return sum(1 for finding in findings if finding.get("severity") == severity)


def _json_row(host: str, row: dict) -> dict:
    """A sweep of ``history HOST --json``: the stored row (Store.host_history) with the host's
    ``verdict`` after its status, its figures as the table shows them (each GPU at the value the
    sweep judged: ``judged`` keeps the first pass's), and its pair figures (``link_figures``) after
    its links."""
    head = {name: row[name] for name in ("sweep_id", "started_at", "status", "error")}
    rest = {name: value for name, value in row.items() if name not in head}
    return {**head, "verdict": verdict(row), **rest, "figures": judged_figures(row),
            "link_figures": link_figures_json(host, link_results(row.get("links") or ()))}


def link_figures_json(host: str, results: list[LinkResult]) -> list[dict]:
    """``host``'s pair figures per backend and rail, as its pair table shows them, and each
    partner's pair figure (``pairs``: ``[partner, Gbit/s]``, the median of the pair's runs, the
    mean of two: gpudiag.links.groups.judged_gbps, as the sweep judged it)."""
    pairs = pair_means(result for result in results if host in (result.a, result.b))
    return [{"backend": f.group.backend, "rail": f.group.rail, "line_rate_gbps": f.group.line_rate_gbps,
             "partners": f.partners, "unmeasured": f.unmeasured, "worst_gbps": f.worst_gbps,
             "worst_peer": f.worst_peer, "median_gbps": f.median_gbps, "best_gbps": f.best_gbps,
             "pairs": sorted([b if a == host else a, gbps] for (a, b), gbps in pairs.get(f.group, {}).items())}
            for f in host_link_figures(host, results)]


def _repair_cells(repairs: list[Repair]) -> list[tuple[str, ...] | None]:
    """A line per repair, then a section line."""
    return [cell for repair in repairs for cell in ((f"repair of {repair.describe()}", "", "", "", ""), None)]


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
    spec = TableSpec(f"{host}: pair figures in {LINK_UNIT} (a pair's figure is the median of its runs, the mean of "
                     "two, as the sweep judged it), newest sweep first", LINK_HISTORY_COLUMNS, tuple(cells))
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
        groups.setdefault(figure_name(figure), []).append(figure)
    return {name: (min(f["min"] for f in group), statistics.median(f["median"] for f in group),
                   max(f["max"] for f in group), group[0].get("unit"))
            for name, group in groups.items()}


TREND_COLUMNS = (Column("figure, unit", "text"), Column("first → latest", drop_rank=2), Column("a sweep"),
                 Column("fitted"), Column("worst GPU"), Column("sweeps", drop_rank=1))


def _trend_tables(trends: HostTrends, width: int) -> list[Table]:
    """The trend of each figure within ``width`` characters (none when no figure has one): the
    median of the host's GPUs in its first and latest sweep since the last repair, its fitted
    slope a sweep and change over the window, the GPU whose fitted figure fell the most, and the
    sweeps; a slow degradation (fail) and a watch named under its figure."""
    rows = tuple(_trend_row(figure) for figure in trends.figures
                 if len(figure.median.points) > 1 or figure.worst_gpu is not None)
    if not rows:
        return []
    spec = TableSpec(f"{trends.host}: trend since the last repair, a line fitted through every sweep (median of its "
                     f"GPUs; '-': fewer than {MIN_FIT_SWEEPS} sweeps, not fitted)", TREND_COLUMNS, rows)
    return [fit_table(spec, width, WIDER_HINT)]


def _trend_row(figure: FigureTrend) -> tuple[str, ...]:
    """``gemm.tflops bf16 TFLOP/s`` (and the slow degradations and watches under it), the median's first and
    latest figure (``741.2 → 738.4``), its fitted slope a sweep and fitted change, the GPU whose
    fitted figure fell the most and its fitted change, the sweeps."""
    median, worst = figure.median, figure.worst_gpu
    name = f"{figure.figure} {figure.unit}" if figure.unit else figure.figure
    flagged = _parts(figure.degraded)
    watched = _parts(figure.watched)
    span = f"{median.points[0].value:.4g} → {median.points[-1].value:.4g}" if median.points else "-"
    fit = median.fit
    return (name + (f"\nslow degradation: {flagged}" if flagged else "") + (f"\nwatch: {watched}" if watched else ""),
            span,
            _pct(None if fit is None else fit.slope_pct), _pct(None if fit is None else fit.change_pct),
            "-" if worst is None or worst.fit is None else f"{worst.gpu}: {_pct(worst.fit.change_pct)}",
            str(len(median.points)))


def _parts(trends: tuple) -> str:
    """``median, GPU 3``."""
    return ", ".join("median" if trend.gpu is None else f"GPU {trend.gpu}" for trend in trends)


def _pct(change: float | None) -> str:
    """``-6.0 %`` (``-`` for no change measured)."""
    return "-" if change is None else f"{change:+.1f} %"


def _trend_words(trends: HostTrends) -> list[str]:
    """Each slow degradation (fail) and each watch in plain words, else one line saying there is
    neither (or no trend yet); then the trends too short to fit, where others were fitted."""
    short = unfitted_words(trends.host, trends)
    if trends.degradations or trends.watches:
        return [*(degradation_words(trends.host, trend, trends.threshold_pct, trends.slope_z)
                  for trend in trends.degradations),
                *(watch_words(trends.host, trend, trends.watch_z) for trend in trends.watches), *short]
    series = [trend for figure in trends.figures for trend in (figure.median, *figure.gpus)]
    longest = max((len(trend.points) for trend in series), default=0)
    since = "since its last repair" if any(trend.repair for trend in series) else "in the sweeps shown"
    rule = (f"a fitted fall of {trends.threshold_pct:g} % or more over {trends.min_sweeps} or more sweeps, "
            f"its slope {trends.slope_z:g} times its noise")
    watch = (f"its slope {trends.watch_z:g} times its noise ({trends.watch_z + SIBLING_WATCH_MARGIN:g} against its "
             f"siblings, {own_watch_z(trends.watch_z, None):g} for the node's median) and its line "
             f"{trends.warn_pct:g} % down within {plural(WATCH_HORIZON, 'sweep')}")
    if longest < trends.min_sweeps:
        return [f"no trend judged yet: {longest} sweep{'' if longest == 1 else 's'} of {trends.host} {since}; "
                f"slow degradation ({rule}) and watch ({watch}) need {max(trends.min_sweeps, MIN_FIT_SWEEPS)}"]
    return [f"no slow degradation: no figure of {trends.host} shows {rule}, {since}; verdict none: no watch "
            f"either ({watch})", *short]
