"""gpudiag/report/tables.py: tables laid out for a console width keep every name and number whole."""

import pytest
from tablecheck import WIDE, WIDTHS, assert_readable, render

from gpudiag.report.tables import (
    Column,
    TableSpec,
    fit_table,
    narrowest_width,
    print_tables,
    split_table,
    wrapped_line_count,
)

HOSTS = ("node001", "gpu002.r17.example.com", "n3")
SPREADS = ("724.1 / 739.6 / 752.6", "2884.8 / 2918.1 / 2932.5", "54.4 / 55.1 / 55.5", "52.2 / 53 / 53.7",
           "1977.7 / 1978.2 / 1978.5")
COLUMNS = (Column("host", "name"), Column("gemm TFLOP/s"), Column("membw GB/s"), Column("h2d GB/s", drop_rank=2),
           Column("d2h GB/s", drop_rank=3), Column("SM MHz", drop_rank=1), Column("note", "text"))


def _spec(hosts: tuple[str, ...] = HOSTS, note: str = "throttled: sw_power_cap since 12:04") -> TableSpec:
    rows = tuple((host, *SPREADS, note) for host in hosts)
    return TableSpec("Per host", COLUMNS, rows, caption="1 more host in --json")


def test_wrapping_counts_lines_at_spaces():
    assert wrapped_line_count("724.1 / 739.6 / 752.6", 21) == 1
    assert wrapped_line_count("724.1 / 739.6 / 752.6", 13) == 2
    assert wrapped_line_count("724.1 / 739.6 / 752.6", 7) == 3
    assert wrapped_line_count("724.1 / 739.6 / 752.6", 5) == 5
    assert narrowest_width("724.1 / 739.6 / 752.6", 2) == 13
    assert narrowest_width("2884.8", 1) == 6


@pytest.mark.parametrize("width", WIDTHS)
def test_a_fitted_table_keeps_every_name_and_number_whole(width: int):
    wide = render(lambda console: console.print(fit_table(_spec(), WIDE)), WIDE)
    narrow = render(lambda console: console.print(fit_table(_spec(), width, hint="see --json")), width)
    assert_readable(narrow, wide, width, names=HOSTS)
    assert "1 more host in --json" in narrow


def test_columns_are_left_out_by_drop_rank_and_named_in_the_caption():
    narrow = render(lambda console: console.print(fit_table(_spec(), 80, hint="see --json")), 80)
    flat = " ".join(narrow.split())
    assert "h2d GB/s, d2h GB/s, SM MHz left out at 80 columns; see --json" in flat
    for kept in ("gemm", "membw", "note"):
        assert kept in narrow
    wide = render(lambda console: console.print(fit_table(_spec(), 200, hint="see --json")), 200)
    assert "left out" not in wide and "d2h GB/s" in wide


def test_at_its_natural_width_a_table_draws_one_line_per_row():
    text = render(lambda console: console.print(fit_table(_spec(), WIDE)), WIDE)
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert len(rows) == len(HOSTS)
    assert all(spread in rows[0] for spread in SPREADS)


def test_a_table_too_wide_for_its_names_runs_past_the_console_whole():
    host = "a-very-long-host-name-that-no-terminal-of-sixty-columns-can-hold.example.com"
    text = render(lambda console: print_tables(console, [fit_table(_spec(hosts=(host,)), 60)]), 60)
    assert host in text and "…" not in text and all(spread in text for spread in ("724.1", "2884.8"))
    assert max(len(line) for line in text.splitlines()) > 60


def test_free_text_folds_a_long_word_rather_than_leave_out_a_column():
    path = "/var/lib/gpudiag/bundles/20261124T231729Z-287f/probes/telemetry/nvml_fallback.log"
    spec = TableSpec("Errors", (Column("host", "name"), Column("error", "text")), (("node001", f"read {path}"),))
    text = render(lambda console: console.print(fit_table(spec, 60)), 60)
    assert max(len(line) for line in text.splitlines()) <= 60 and "…" not in text
    assert "".join(line.strip("│ ") for line in text.splitlines() if line.startswith("│")).endswith(
        path.replace(" ", ""))


@pytest.mark.parametrize("width", WIDTHS)
def test_a_split_table_repeats_the_names_and_shows_every_column(width: int):
    columns = (Column("GPU", "name"), *(Column(f"counter {i} MiB") for i in range(12)), Column("why", "text"))
    rows = tuple((f"gpu:{g}", *(f"{1000 * g + i}/{99999 - i}" for i in range(12)), "hw_power_brake_slowdown")
                 for g in range(8))
    spec = TableSpec("Telemetry", columns, rows)
    wide = render(lambda console: [console.print(t) for t in split_table(spec, WIDE)], WIDE)
    narrow = render(lambda console: [console.print(t) for t in split_table(spec, width)], width)
    assert_readable(narrow, wide, width, names=[f"gpu:{g}" for g in range(8)])
    parts = narrow.count("┏")
    assert parts > 1 and narrow.count("Telemetry, continued") == parts - 1
    assert narrow.count("gpu:7") == parts


def test_short_titles_replace_all_titles_or_none():
    devices = [f"cuda:{i}" for i in range(8)]
    columns = (Column("", "name"), *(Column(d, short_title=d.rpartition(":")[2]) for d in devices))
    rows = tuple((source, *("-" if s == t else "371.2" for t in devices)) for s, source in enumerate(devices))
    spec = TableSpec("P2P", columns, rows)
    narrow = render(lambda console: console.print(split_table(spec, 80)[0]), 80)
    header = next(line for line in narrow.splitlines() if line.startswith("┃"))
    assert header.replace("┃", " ").split() == [str(i) for i in range(8)]
    wide = render(lambda console: console.print(split_table(spec, 132)[0]), 132)
    assert all(device in next(line for line in wide.splitlines() if line.startswith("┃")) for device in devices)
