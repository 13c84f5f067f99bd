"""The tables of ``history``, ``baseline show`` and ``sweep`` at the console's width (issue 9:
80 columns): every line fits, every host name and every digit survives, a column left out is
named. Each narrow rendering is checked against the same command run 400 columns wide."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from tablecheck import BOX, WIDE, WIDTHS, assert_readable

from gpudiag.cli.main import main

FLEETS = {
    "short-names": {"nodes": 12, "faults": [{"kind": "slow_gpu", "host": "node003", "gpu": 1, "factor": 0.8},
                                            {"kind": "unreachable", "host": "node012"}]},
    "long-names": {"nodes": 4, "name_format": "gpu{:03d}.r17.example.com",
                   "faults": [{"kind": "slow_gpu", "host": "gpu003.r17.example.com", "gpu": 1, "factor": 0.8}]},
}
HOST = {"short-names": "node003", "long-names": "gpu003.r17.example.com"}


def _run(*args: str, columns: int | None = None):
    env = {"COLUMNS": None if columns is None else str(columns)}
    return CliRunner(env=env).invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    """Per fleet of FLEETS, a store of two sweeps with pair tests and a baseline named nightly."""
    folder = tmp_path_factory.mktemp("tables")
    built = {}
    for name, fleet in FLEETS.items():
        fleet_path, store = folder / f"{name}.json", folder / f"{name}.db"
        fleet_path.write_text(json.dumps(fleet))
        for _ in range(2):
            swept = _run("sweep", "--simulate", str(fleet_path), "--store", str(store), "--links", "full", "-q")
            assert swept.exit_code in (1, 3), swept.output  # the planted faults
        assert _run("baseline", "build", "--last", "2", "--name", "nightly", "--store", str(store)).exit_code == 0
        built[name] = store
    return built


COMMANDS = {"history HOST": ("history", "{host}"), "history": ("history",), "baseline show": ("baseline", "show"),
            "baseline show NAME": ("baseline", "show", "nightly")}


@pytest.mark.parametrize("fleet", sorted(FLEETS))
@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("width", WIDTHS)
def test_store_tables_fit_the_console_and_lose_no_digit(stores, fleet: str, command: str, width: int):
    args = [arg.format(host=HOST[fleet]) for arg in COMMANDS[command]] + ["--store", str(stores[fleet])]
    narrow, wide = _run(*args, columns=width), _run(*args, columns=WIDE)
    assert narrow.exit_code == 0 and wide.exit_code == 0, narrow.output
    # At 60 columns a baseline key's longest word (smclock.sm_fma_rate_min_ratio) leaves its figures
    # no room: the key, free text, folds it rather than lose a figure's column.
    folded = ("key",) if (command, width) == ("baseline show NAME", 60) else ()
    assert_readable(narrow.output, wide.output, width, names=[HOST[fleet]] if command == "history HOST" else (),
                    folded=folded)


def test_history_at_80_columns_shows_the_slow_gpus_figure_and_each_sweeps_status(stores):
    result = _run("history", "node003", "--store", str(stores["short-names"]), columns=80)
    assert result.exit_code == 0
    assert max(len(line) for line in result.output.splitlines()) <= 80 and "…" not in result.output
    figures_table = result.output[:result.output.index("node003: trend since")]  # the trend table follows
    figures = [line for line in figures_table.splitlines() if "gemm.tflops bf16" in line]
    # min / median / max over the host's GPUs in each sweep: the slow GPU's figure is the min, whole
    assert len(figures) == 2 and figures[0] == figures[1]
    low, median, high = (float(cell) for cell in figures[0].split("│")[2:5])
    assert low < 0.9 * median <= high
    assert "TFLOP/s" in figures[0] and "left out" not in result.output
    unreachable = _run("history", "node012", "--store", str(stores["short-names"]), columns=80).output
    assert " ".join(BOX.sub(" ", unreachable).split()).count(
        ": unreachable: port 22: no answer within 10 s (simulated)") == 2


def test_history_through_a_pipe_without_columns_takes_80(stores):
    result = _run("history", "node003", "--store", str(stores["short-names"]))
    assert result.exit_code == 0 and "pair figures" in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80 and "…" not in result.output


def test_the_sweep_prints_its_per_host_table_within_80_columns(tmp_path: Path):
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": 12, "faults": FLEETS["short-names"]["faults"][:1]}))
    args = ("sweep", "--simulate", str(fleet), "--no-store", "--links", "none")
    narrow, wide = (_run(*args, columns=width).output for width in (80, WIDE))
    table, wide_table = (text[text.index("Per host"):text.index("\n\n")] for text in (narrow, wide))
    assert_readable(table, wide_table, 80, names=[f"node{i:03d}" for i in range(1, 13)])
    assert "h2d GB/s, d2h GB/s left out at 80 columns; see --json" in " ".join(table.split())


def test_a_pci_bus_id_is_printed_as_it_is_never_as_an_emoji(tmp_path: Path):
    """rich turns ``:ab:`` into an emoji: node004:5 of this fleet sits at bus id 00000000:AB:00.0."""
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": 8, "seed": 3, "faults": [
        {"kind": "throttled", "host": "node004", "gpu": 5, "factor": 0.8, "reason": "hw_thermal"}]}))
    out = tmp_path / "sweep.json"
    swept = _run("sweep", "--simulate", str(fleet), "--no-store", "-q", "--json", str(out), columns=200)
    bus_ids = {f["pci_bus_id"] for f in json.loads(out.read_text())["findings"] if f.get("pci_bus_id")}
    assert any(":AB:" in bus_id.upper() for bus_id in bus_ids), bus_ids
    assert all(bus_id in swept.output for bus_id in bus_ids), swept.output
    assert "\N{NEGATIVE SQUARED AB}" not in swept.output
