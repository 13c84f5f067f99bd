"""An unfinished sweep through the command line: a sweep the store holds without its analysis (what
a killed controller leaves: tests/integration/test_killed_sweep.py kills a real one) and one an
interrupt stopped say so on the report's first line and in the textfile, and ``baseline build``
builds from the finished sweeps only, naming the one it skipped. ``demo --output`` never follows a
planted store link into another store."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from click.testing import CliRunner, Result

from gpudiag.cli.main import main
from gpudiag.report import render_report
from gpudiag.report.prometheus import prom_text
from gpudiag.store.baselines import list_baselines, load_baseline
from gpudiag.store.store import Store


def _run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _finished_sweep(tmp_path: Path, store: Path) -> str:
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": 4, "seed": 5, "faults": [
        {"kind": "slow_gpu", "host": "node004", "gpu": 2, "factor": 0.6}]}))
    result = _run("sweep", "--simulate", str(fleet), "--store", str(store), "--links", "none", "--probes",
                  "facts,gemm", "--duration", "0.2", "-q")
    assert result.exit_code == 1, result.output
    with Store.open(store, readonly=True) as opened:
        return str(opened.latest_sweep_id())


def _killed_sweep(store: Path, finished: str) -> str:
    """A sweep that stored the slow node004, then died before its analysis (as the sweep writes it)."""
    with Store.open(store) as opened:
        slow = next(host for host in opened.load_document(finished)["hosts"] if host["host"] == "node004")
        opened.begin_sweep("20991231T000000Z-dead", "2099-12-31T00:00:00Z", {"probes": ["facts", "gemm"]},
                           ["node001", "node002", "node003", "node004"])
        opened.record_host("20991231T000000Z-dead", slow)
    return "20991231T000000Z-dead"


def test_the_report_of_a_killed_sweep_says_unfinished_first_and_never_no_findings(tmp_path: Path):
    store = tmp_path / "gpudiag.db"
    _killed_sweep(store, _finished_sweep(tmp_path, store))
    lines = _run("report", "--store", str(store)).output.splitlines()
    assert lines[0].startswith("unfinished: 1 of 4 planned hosts measured, not analysed · sweep 20991231T000000Z-dead")
    assert "0 findings" not in lines[0] and "findings not analysed" in lines[0]
    assert "findings: none" not in lines and any(line.startswith("findings: not analysed") for line in lines)


def test_baseline_build_skips_the_killed_sweep_and_says_why(tmp_path: Path):
    store = tmp_path / "gpudiag.db"
    finished = _finished_sweep(tmp_path, store)
    killed = _killed_sweep(store, finished)
    built = _run("baseline", "build", "--last", "2", "--store", str(store))
    assert built.exit_code == 0, built.output
    lines = built.output.splitlines()
    assert lines[0] == (f"skipped sweep {killed} (unfinished: 1 of 4 planned hosts measured, not analysed): a "
                        "baseline is built from finished sweeps only")
    assert lines[1].startswith("baseline default: ") and lines[1].endswith("from 1 sweep")
    alone = _run("baseline", "build", "--sweep", killed, "--name", "dead", "--store", str(store))
    assert alone.exit_code == 2 and f"skipped sweep {killed}" in alone.output
    # the slow node004 of the killed sweep never became a reference: only the finished sweep is a source
    with Store.open(store, readonly=True) as opened:
        assert load_baseline(opened, "default").source_sweeps == (finished,)
        assert "dead" not in [entry["name"] for entry in list_baselines(opened)]


def test_an_interrupted_document_and_its_textfile_say_unfinished(tmp_path: Path):
    store = tmp_path / "gpudiag.db"
    with Store.open(store) as opened:
        document = opened.load_document(_finished_sweep(tmp_path, store))
    finished_text = "".join(prom_text(document))
    assert "gpudiag_last_run_complete 1.0" in finished_text
    assert not render_report(document, "text").startswith("unfinished")
    hosts = [*document["hosts"][:3], {**document["hosts"][3], "status": "interrupted", "results": []}]
    stopped = {**document, "hosts": hosts, "summary": {**document["summary"], "exit_code": 130}}
    assert render_report(stopped, "text").startswith(
        "unfinished: interrupted, 3 of 4 planned hosts measured, what finished analysed · sweep ")
    assert "gpudiag_last_run_complete 0.0" in "".join(prom_text(stopped))


def test_demo_output_refuses_a_planted_store_link_and_leaves_that_store_as_it_was(tmp_path: Path):
    victim = tmp_path / "victim.db"
    _finished_sweep(tmp_path, victim)
    before = hashlib.sha256(victim.read_bytes()).hexdigest()
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "gpudiag.db").symlink_to(victim)
    result = _run("demo", "--output", str(folder), "-q")
    assert result.exit_code == 2
    assert result.output.strip() == (f"gpudiag: error: --output {folder}: {folder / 'gpudiag.db'} is a symbolic link "
                                     f"(to {victim}); the demo follows no link into another store: remove the "
                                     "link, or give a new DIR")
    assert hashlib.sha256(victim.read_bytes()).hexdigest() == before
    assert (folder / "gpudiag.db").is_symlink() and sorted(p.name for p in folder.iterdir()) == ["gpudiag.db"]
    (folder / "gpudiag.db").unlink()
    (folder / "gpudiag.db-wal").symlink_to(victim)  # SQLite's log beside the store would write into it
    assert _run("demo", "--output", str(folder), "-q").exit_code == 2
    assert hashlib.sha256(victim.read_bytes()).hexdigest() == before
