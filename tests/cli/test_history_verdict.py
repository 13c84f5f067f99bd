"""``gpudiag history HOST`` tells each sweep's verdict on the host (issue 29, item 3): the worst
finding naming it with the figure and deficit the sweep judged, ``ok (no finding)`` for a host that
answered and has none, its status for one that did not answer; ``--json`` carries the verdict and
the findings naming the host; the GPU figures are the ones the sweep's findings quote (after the
re-test), and the pair figures the ones the sweep judged (gpudiag.links.groups.judged_gbps).

A store of two simulated sweeps made by the real CLI: the first with a slow GPU, a slow NIC, a slow
link and an unreachable node, the second of the same fleet healthy."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from tablecheck import BOX

from gpudiag.cli.main import main
from gpudiag.findings import cost_order
from gpudiag.links.groups import judged_gbps
from gpudiag.words import deficit_text, figure

FAULTS = [{"kind": "slow_gpu", "host": "node003", "gpu": 1, "factor": 0.8},
          {"kind": "slow_nic", "host": "node007", "factor": 0.5},
          {"kind": "slow_link", "a": "node002", "b": "node009", "factor": 0.5},
          {"kind": "unreachable", "host": "node012"}]
SHARED = {"fleet_shift", "software_regression", "slow_network", "slow_fabric_link", "slow_switch"}


def _run(*args: str, columns: int = 80) -> Result:
    return CliRunner(env={"COLUMNS": str(columns)}).invoke(main, list(args), catch_exceptions=False)


def _flat(text: str) -> str:
    return " ".join(BOX.sub(" ", text).split())


def _sweep(folder: Path, store: Path, name: str, faults: list[dict[str, Any]]) -> dict[str, Any]:
    """One simulated sweep of 12 nodes with pair tests into ``store``; its JSON document."""
    fleet, document = folder / f"{name}.json", folder / f"{name}.out.json"
    fleet.write_text(json.dumps({"nodes": 12, "seed": 5, "faults": faults}))
    swept = _run("sweep", "--simulate", str(fleet), "--store", str(store), "--links", "full", "-q",
                 "--json", str(document))
    assert swept.exit_code in (0, 1, 3), swept.output
    return json.loads(document.read_text())


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """The store, the faulty sweep's document and the healthy one's (the newer)."""
    folder = tmp_path_factory.mktemp("verdict")
    store = folder / "gpudiag.db"
    faulty = _sweep(folder, store, "faulty", FAULTS)
    healthy = _sweep(folder, store, "healthy", [])
    return store, faulty, healthy


def _history_json(store: Path, host: str) -> dict[str, Any]:
    result = _run("history", host, "--store", str(store), "--json", "-")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _naming(document: dict[str, Any], host: str) -> list[dict[str, Any]]:
    """The document's findings that name ``host``, most costly first."""
    return sorted((f for f in document["findings"] if host in (f["host"], f.get("peer")) and f["kind"] not in SHARED),
                  key=cost_order)


def _finding(document: dict[str, Any], kind: str, host: str) -> dict[str, Any]:
    return next(f for f in document["findings"] if f["kind"] == kind and f["host"] == host)


def _first_pass(document: dict[str, Any], host: str, probe: str, device: str) -> float:
    entry = next(h for h in document["hosts"] if h["host"] == host)
    return next(r["value"] for r in entry["results"] if r["probe"] == probe and r["device"] == device)


def test_the_slow_gpus_row_says_fail_slow_gpu_with_the_figure_and_deficit_the_sweep_judged(swept):
    store, faulty, healthy = swept
    slow = _finding(faulty, "slow_gpu", "node003")
    assert slow["severity"] == "fail" and slow["gpu"] == 1 and slow["confirmed"]
    result = _run("history", "node003", "--store", str(store))
    assert result.exit_code == 0, result.output
    text = _flat(result.output)
    assert (f"sweep {faulty['sweep_id']}: fail slow_gpu node003:1 gemm.tflops {figure(slow['value'], 'TFLOP/s')} "
            f"{deficit_text(slow['deficit_pct'])}; findings: 1 fail, 0 warn") in text
    assert f"sweep {healthy['sweep_id']}: ok (no finding)" in text


def test_the_gpu_figures_are_the_ones_the_findings_quote_after_the_re_test(swept):
    store, faulty, _ = swept
    slow = _finding(faulty, "slow_gpu", "node003")
    first_pass = _first_pass(faulty, "node003", "gemm", "cuda:1")
    assert round(first_pass, 3) != slow["value"]  # the re-test moved it: the first pass is not what was judged
    row = _history_json(store, "node003")["sweeps"][1]
    assert row["sweep_id"] == faulty["sweep_id"]
    gemm = next(f for f in row["figures"] if f["metric"] == "gemm.tflops")
    assert dict(map(tuple, gemm["per_gpu"]))[1] == slow["value"] and gemm["min"] == slow["value"]
    # (the document's records carry 3 decimals, the store's the figure as measured)
    assert [(j["metric"], j["gpu"], j["first_pass"], j["value"]) for j in row["judged"]] == [
        ("gemm.tflops", 1, pytest.approx(first_pass, abs=5e-4), slow["value"])]
    # the table's row of that figure shows the judged figure as its min
    table = _run("history", "node003", "--store", str(store), columns=120).output
    table = table[:table.index("node003: trend since")]  # the trend table follows
    rows = [line for line in table.splitlines() if line.startswith("│ gemm.tflops bf16")]
    assert [row.split("│")[2].strip() for row in rows] == [
        f"{_history_json(store, 'node003')['sweeps'][0]['figures'][0]['min']:.4g}", f"{slow['value']:.4g}"]


def test_a_healthy_host_is_ok_with_no_finding(swept):
    store, faulty, healthy = swept
    assert _naming(faulty, "node005") == []
    text = _flat(_run("history", "node005", "--store", str(store)).output)
    assert text.count(": ok (no finding)") == 2
    verdicts = [row["verdict"] for row in _history_json(store, "node005")["sweeps"]]
    assert [(v["status"], v["severity"], v["kind"], v["fail"], v["warn"]) for v in verdicts] == [
        ("ok", "ok", None, 0, 0)] * 2


def test_an_unreachable_host_says_so_and_not_ok(swept):
    store, faulty, healthy = swept
    text = _flat(_run("history", "node012", "--store", str(store)).output)
    assert (f"sweep {faulty['sweep_id']}: unreachable: port 22: no answer within 10 s (simulated); "
            "findings: 0 fail, 1 warn") in text
    assert f"sweep {healthy['sweep_id']}: ok (no finding)" in text
    newest, oldest = _history_json(store, "node012")["sweeps"]
    assert oldest["verdict"]["status"] == "unreachable" and oldest["verdict"]["kind"] == "unchecked"
    assert oldest["verdict"]["severity"] == "warn" and newest["verdict"]["severity"] == "ok"


@pytest.mark.parametrize("host", ["node003", "node007", "node002", "node009", "node012", "node001"])
def test_json_gives_the_verdict_and_the_documents_findings_naming_the_host(swept, host: str):
    store, faulty, healthy = swept
    newest, oldest = _history_json(store, host)["sweeps"]
    for row, document in ((oldest, faulty), (newest, healthy)):
        assert row["sweep_id"] == document["sweep_id"]
        expected = _naming(document, host)
        assert row["findings"] == expected
        worst = expected[0] if expected else {}
        verdict = row["verdict"]
        assert (verdict["severity"], verdict["kind"], verdict["value"], verdict["deficit_pct"]) == (
            worst.get("severity", "ok"), worst.get("kind"), worst.get("value"), worst.get("deficit_pct"))
        assert (verdict["fail"], verdict["warn"]) == (sum(f["severity"] == "fail" for f in expected),
                                                      sum(f["severity"] == "warn" for f in expected))
    # node001 is a partner of the slow NIC's: its pairs with node007 are slow, but no finding names it
    assert (host == "node001") == (oldest["findings"] == [])


def test_a_slow_link_is_the_verdict_of_both_its_ends(swept):
    store, faulty, _ = swept
    link = next(f for f in faulty["findings"] if f["kind"] == "slow_link")
    assert {link["host"], link["peer"]} == {"node002", "node009"}
    for host in ("node002", "node009"):
        text = _flat(_run("history", host, "--store", str(store)).output)
        assert (f"sweep {faulty['sweep_id']}: fail slow_link {link['host']} ↔ {link['peer']} link.perftest "
                f"{figure(link['value'], 'Gbit/s')} {deficit_text(link['deficit_pct'])}") in text


def _judged_pairs(document: dict[str, Any], host: str) -> dict[tuple[str, int | None], dict[str, float]]:
    """The host's pair figures per (backend, rail) from the document's links[]: each pair's runs
    combined as the sweep judges them."""
    runs: dict[tuple[str, int | None], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for link in document["links"]:
        if host in (link["a"], link["b"]) and link["value"] is not None:
            peer = link["b"] if link["a"] == host else link["a"]
            runs[(link["backend"], link["rail"])][peer].append(link["value"])
    return {group: {peer: judged_gbps(values) for peer, values in pairs.items()} for group, pairs in runs.items()}


@pytest.mark.parametrize("host", ["node007", "node002"])
def test_the_pair_figures_are_the_ones_the_sweep_judged(swept, host: str):
    store, faulty, _ = swept
    oldest = _history_json(store, host)["sweeps"][1]
    expected = _judged_pairs(faulty, host)
    if host == "node002":  # the slow link's pairs were re-tested: a figure of two runs is their mean
        runs = [link["value"] for link in faulty["links"] if {link["a"], link["b"]} == {"node002", "node009"}]
        assert len(runs) > len(expected) and expected[("perftest", 0)]["node009"] not in runs
    got = {(g["backend"], g["rail"]): g for g in oldest["link_figures"]}
    assert set(got) == set(expected)
    for group, pairs in expected.items():
        assert dict(map(tuple, got[group]["pairs"])) == pairs
        worst = min(pairs.items(), key=lambda item: item[1])
        assert (got[group]["worst_gbps"], got[group]["worst_peer"]) == (worst[1], worst[0])
        assert got[group]["median_gbps"] == statistics.median(pairs.values())
    text = _run("history", host, "--store", str(store), columns=120).output
    section = text[text.index(f"{host}: pair figures"):]
    section = section[section.index(faulty["sweep_id"]):]
    for (backend, rail), pairs in expected.items():
        peer, worst = min(pairs.items(), key=lambda item: item[1])
        line = next(line for line in section.splitlines() if line.startswith(f"│ {backend} r{rail} "))
        assert line.split("│")[2].strip() == f"{worst:.1f} {peer}"


def test_the_slow_nics_history_lists_its_finding(swept):
    store, faulty, _ = swept
    nic = _finding(faulty, "slow_nic", "node007")
    oldest = _history_json(store, "node007")["sweeps"][1]
    assert nic in oldest["findings"] and oldest["verdict"]["kind"] == "slow_nic"
    text = _flat(_run("history", "node007", "--store", str(store)).output)
    assert (f"sweep {faulty['sweep_id']}: fail slow_nic node007 link.perftest {figure(nic['value'], 'Gbit/s')} "
            f"{deficit_text(nic['deficit_pct'])}") in text


@pytest.mark.parametrize("width", [60, 80, 120])
def test_every_line_of_the_verdicts_fits_the_console(swept, width: int):
    store, _, _ = swept
    for host in ("node003", "node007", "node002", "node012"):
        result = _run("history", host, "--store", str(store), columns=width)
        assert result.exit_code == 0 and max(len(line) for line in result.output.splitlines()) <= width
