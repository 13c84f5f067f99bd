"""Commands over the store: ``report``, ``baseline`` and ``store prune`` (``history`` is in
gpudiag.cli.history, and exported here for the CLI). Read-only commands open the store
read-only, so they never create or change it."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import click
from rich.table import Table

from ..analysis.keys import LINK_PROBE, describe_key
from ..errors import InputError, read_json_file
from ..exitcodes import ExitCode
from ..findings import SWEEP_SCHEMA
from ..report import render_report, write_report
from ..report.summary import unfinished_words
from ..report.tables import Column, TableSpec, fit_table, make_console, print_tables
from ..schema.jsonout import dumps as strict_dumps
from ..store.baselines import (
    Baseline,
    baseline_samples,
    baseline_sources,
    build_baseline,
    export_baseline,
    import_baseline,
    list_baselines,
    load_baseline,
    save_baseline,
)
from ..store.prune import PruneResult, check_rules, open_for_prune, prune
from ..store.store import Store
from ..words import plural
from .helptext import DONE_CODES, USAGE_ROW, WholeHelpGroup, epilog
from .history import history  # noqa: F401 - gpudiag.cli.main registers it from here
from .options import WIDER_HINT, store_location, store_option
from .textout import echo_text

FORMATS = ("text", "md", "json", "html")


@click.command(epilog=epilog(
    ["gpudiag report --store demo/gpudiag.db      # the latest stored sweep",
     "gpudiag report --store demo/gpudiag.db --format html -o report.html",
     "gpudiag report demo/sweep.json --format md   # a document from --json"],
    [(ExitCode.OK, "written"), USAGE_ROW]))
@click.argument("source", required=False, metavar="[SWEEP_ID | FILE.json]")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True)
@click.option("-o", "--output", default=None, metavar="PATH", help="Write here instead of stdout.")
@store_option
def report(source: str | None, fmt: str, output: str | None, store_path: str | None) -> ExitCode:
    """A sweep's report: a stored sweep (the latest by default) or a sweep document file."""
    document = _document(source, store_path)
    text = render_report(document, fmt)
    if output is None and fmt == "text":
        echo_text(text)
    elif output is None:
        click.echo(text, nl=not text.endswith("\n"))
    else:
        write_report(text, output)
        click.echo(f"wrote {output}", err=True)
    return ExitCode.OK


def _document(source: str | None, store_path: str | None) -> dict:
    if source is not None and (source.endswith(".json") or os.path.sep in source) and not Path(source).is_file():
        raise InputError(f"{source}: no such sweep document")
    if source is not None and Path(source).is_file():
        data = read_json_file(source, "the sweep document")
        if not isinstance(data, dict) or data.get("schema") != SWEEP_SCHEMA:
            raise InputError(f"{source}: not a gpudiag sweep document (schema {SWEEP_SCHEMA})")
        return data
    with Store.open(store_location(store_path), readonly=True) as store:
        sweep_id = source or store.latest_sweep_id()
        if sweep_id is None:
            raise InputError(f"{store_location(store_path)}: no sweep is stored yet; run gpudiag sweep first")
        return store.load_document(sweep_id)


@click.group(cls=WholeHelpGroup, epilog=epilog(
    ["gpudiag baseline build --last 3 --name default --store demo/gpudiag.db",
     "gpudiag baseline show default --store demo/gpudiag.db",
     "gpudiag baseline export default baseline.json --store demo/gpudiag.db"], DONE_CODES))
def baseline() -> None:
    """Fleet baselines: robust references (median, MAD) per baseline key, from stored sweeps."""


@baseline.command("build", epilog=epilog(
    ["gpudiag baseline build --last 3 --replace --store demo/gpudiag.db",
     "gpudiag baseline build --last 1 --name h100 --store demo/gpudiag.db"],
    [(ExitCode.OK, "built and stored"), USAGE_ROW]))
@click.option("--last", type=click.IntRange(min=1), default=None, help="Use the last N stored sweeps.")
@click.option("--sweep", "sweep_ids", multiple=True, metavar="ID", help="Use this sweep (repeatable).")
@click.option("--name", default="default", show_default=True)
@click.option("--replace", is_flag=True, help="Replace a stored baseline of the same name.")
@store_option
def baseline_build(last: int | None, sweep_ids: tuple[str, ...], name: str, replace: bool,
                   store_path: str | None) -> ExitCode:
    """Build a baseline from results that were not themselves findings."""
    if last is not None and sweep_ids:
        raise InputError("give --last N or --sweep ID, not both")
    with Store.open(store_location(store_path)) as store:
        chosen = list(sweep_ids) or [s["sweep_id"] for s in store.list_sweeps(last or 1)]
        if not chosen:
            raise InputError(f"{store_location(store_path)}: no sweep is stored yet; run gpudiag sweep first")
        chosen, unfinished = baseline_sources(store, chosen)
        skipped = [f"skipped sweep {sweep_id} ({unfinished_words(progress.to_dict())}): a baseline is built from "
                   "finished sweeps only" for sweep_id, progress in unfinished.items()]
        if not chosen:
            raise InputError("; ".join(skipped) + "; run a sweep to its end, or name finished ones with --sweep ID")
        built = build_baseline(name, baseline_samples(store, chosen))
        save_baseline(store, built, replace=replace)
    for line in skipped:
        click.echo(line)
    click.echo(f"baseline {name}: {plural(len(built.entries), 'key')} from {plural(len(chosen), 'sweep')}"
               + (f"; {plural(len(built.skipped_keys), 'key')} had too few results" if built.skipped_keys else ""))
    return ExitCode.OK


@baseline.command("show", epilog=epilog(
    ["gpudiag baseline show --store demo/gpudiag.db          # every baseline",
     "gpudiag baseline show default --store demo/gpudiag.db  # one's entries"], DONE_CODES))
@click.argument("name", required=False)
@store_option
def baseline_show(name: str | None, store_path: str | None) -> ExitCode:
    """List the stored baselines, or one baseline's entries."""
    console = make_console()
    with Store.open(store_location(store_path), readonly=True) as store:
        if name is None:
            print_tables(console, [_baselines_table(list_baselines(store), console.width)])
            return ExitCode.OK
        shown = load_baseline(store, name)
    print_tables(console, [_baseline_table(shown, console.width)])
    return ExitCode.OK


BASELINES_COLUMNS = (Column("name", "name"), Column("created", "name", drop_rank=1), Column("keys", justify="left"),
                     Column("from sweeps", "text"))
BASELINE_COLUMNS = (Column("key", "text"), Column("median"), Column("MAD"), Column("count"),
                    Column("unit", "text", drop_rank=1, justify="right"))


def _baselines_table(entries: list[dict], width: int) -> Table:
    """The stored baselines (list_baselines) within ``width`` characters."""
    rows = tuple((entry["name"], entry["created_at"], str(entry["entries"]), ", ".join(entry["source_sweeps"]))
                 for entry in entries)
    return fit_table(TableSpec("Stored baselines", BASELINES_COLUMNS, rows), width, WIDER_HINT)


def _baseline_table(shown: Baseline, width: int) -> Table:
    """One baseline's entries within ``width`` characters: results first, then the link groups
    (their count is of pair figures), each part by key."""
    parts: tuple[list, list] = ([], [])
    for key, entry in sorted(shown.entries.items()):
        parts[json.loads(key).get("probe") == LINK_PROBE].append((key, entry))
    rows: list[tuple[str, ...] | None] = []
    for index, part in enumerate(parts):
        if index and part and parts[0]:
            rows.append(None)
        rows.extend((describe_key(key), f"{entry.median:.4g}", f"{entry.mad:.3g}", str(entry.count),
                     entry.unit or "") for key, entry in part)
    spec = TableSpec(f"Baseline {shown.name} ({shown.created_at})", BASELINE_COLUMNS, tuple(rows))
    return fit_table(spec, width, WIDER_HINT)


@baseline.command("export", epilog=epilog(
    ["gpudiag baseline export default baseline.json --store demo/gpudiag.db",
     "gpudiag baseline export h100 h100.json --store demo/gpudiag.db"],
    [(ExitCode.OK, "written"), USAGE_ROW]))
@click.argument("name")
@click.argument("path", metavar="FILE.json")
@store_option
def baseline_export(name: str, path: str, store_path: str | None) -> ExitCode:
    """Write a stored baseline to FILE.json, to share it with another controller."""
    with Store.open(store_location(store_path), readonly=True) as store:
        data = export_baseline(load_baseline(store, name))
    write_report(strict_dumps(data, indent=1) + "\n", path)
    click.echo(f"wrote baseline {name} ({plural(len(data['entries']), 'key')}) to {path}")
    return ExitCode.OK


@baseline.command("import", epilog=epilog(
    ["gpudiag baseline import baseline.json --replace --store demo/gpudiag.db",
     "gpudiag baseline import h100.json --replace --store demo/gpudiag.db"],
    [(ExitCode.OK, "stored"), USAGE_ROW]))
@click.argument("path", metavar="FILE.json")
@click.option("--replace", is_flag=True, help="Replace a stored baseline of the same name.")
@store_option
def baseline_import(path: str, replace: bool, store_path: str | None) -> ExitCode:
    """Store a baseline exported by 'gpudiag baseline export'."""
    imported = import_baseline(read_json_file(path, "the baseline file"), path)
    with Store.open(store_location(store_path)) as store:
        save_baseline(store, imported, replace=replace)
    click.echo(f"imported baseline {imported.name} ({plural(len(imported.entries), 'key')})")
    return ExitCode.OK


@click.group("store", cls=WholeHelpGroup, epilog=epilog(
    ["gpudiag store prune --keep 20 --dry-run --store demo/gpudiag.db",
     "gpudiag store prune --keep-days 90 --store demo/gpudiag.db"], DONE_CODES))
def store_group() -> None:
    """Look after the store file."""


@store_group.command("prune", epilog=epilog(
    ["gpudiag store prune --keep 20 --dry-run --store demo/gpudiag.db  # what goes",
     "gpudiag store prune --keep-days 90 --keep 20 --store demo/gpudiag.db",
     "gpudiag store prune --keep 5 --store demo/gpudiag.db"],
    [(ExitCode.OK, "pruned (or, with --dry-run, said what would go)"), USAGE_ROW]))
@click.option("--keep-days", type=click.IntRange(min=1), default=None, metavar="N",
              help="Keep the sweeps started within the last N days.")
@click.option("--keep", type=click.IntRange(min=1), default=None, metavar="N", help="Keep the newest N sweeps.")
@click.option("--dry-run", is_flag=True, help="Say what would go; change nothing.")
@store_option
def store_prune(keep_days: int | None, keep: int | None, dry_run: bool, store_path: str | None) -> ExitCode:
    """Delete old sweeps and give their space back (VACUUM).

    Given both options, keeps the union. Never deletes the newest sweep, a sweep a stored
    baseline was built from, or a sweep still running (unfinished, started within a day).
    """
    check_rules(keep_days, keep)  # before the store is opened: a bad option is named first
    path = store_location(store_path)
    with open_for_prune(path, dry_run=dry_run) as store:
        result = prune(store, keep_days, keep, datetime.now(timezone.utc), dry_run)
    click.echo(_prune_line(result, path, keep_days))
    for sweep_id in result.pruned if dry_run else ():
        click.echo(f"  {sweep_id}")
    return ExitCode.OK


def _prune_line(result: PruneResult, path: str, keep_days: int | None) -> str:
    """``pruned 37 sweeps (kept 12: the newest 10, 2 sources of baselines); 412.3 MB → 96.1 MB``."""
    count = len(result.pruned)
    done = f"{'would prune' if result.dry_run else 'pruned'} {count} sweep{'' if count == 1 else 's'}"
    head = f"{done if count or result.dry_run else 'nothing to prune'} ({_kept_words(result, keep_days)})"
    before, after = _mb(result.size_before_bytes), _mb(result.size_after_bytes)
    if result.vacuum_failure is not None:
        return (f"{head}; the store stays {after}: VACUUM failed ({result.vacuum_failure}); the freed space will "
                f"be reused by later sweeps; to shrink the file later, run `gpudiag store prune` again or "
                f"`sqlite3 {path} VACUUM`")
    return f"{head}; {before} → {after}" if result.vacuumed else f"{head}; the store is {before}"


def _kept_words(result: PruneResult, keep_days: int | None) -> str:
    """``kept 12: the newest 10, 2 sources of baselines``."""
    if not result.kept:
        return "the store holds no sweeps"
    days = f"{keep_days} day{'' if keep_days == 1 else 's'}"
    sources = result.kept_baseline_sources
    parts = ((result.kept_newest_n, _newest(result.kept_newest_n)),
             (result.kept_recent, f"{result.kept_recent} from the last {days}"),
             (result.kept_running, f"{result.kept_running} still running"),
             (sources, "1 source of a baseline" if sources == 1 else f"{sources} sources of baselines"),
             (result.kept_newest, _newest(result.kept_newest)),
             (result.kept_undated, f"{result.kept_undated} with an unreadable start time"))
    return f"kept {result.kept}: " + ", ".join(words for count, words in parts if count)


def _newest(count: int) -> str:
    return "the newest sweep" if count == 1 else f"the newest {count}"


def _mb(size_bytes: int) -> str:
    return f"{size_bytes / 1e6:.1f} MB"
