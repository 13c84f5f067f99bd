"""Telemetry judged against peers and the SKU, through the real pipeline (CLI, plan, analysis,
report) on simulated fleets: error counters planted in the simulator come out as warnings naming
the counter and link, every report format shows them, and NVLink slots a model does not wire are
never ``nvlink_down`` while a wired link that is down still is."""

import json
from pathlib import Path

from click.testing import CliRunner

from gpudiag.cli.main import main

FAST = ("--probes", "gemm,telemetry", "--duration", "0.2")


def _fleet(tmp_path: Path, faults=(), nodes: int = 16, **fields) -> str:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": nodes, "seed": 5, "noise": {"gemm_cv": 0.01, "membw_cv": 0.01},
                                "faults": list(faults), **fields}))
    return str(path)


def _sweep(fleet: str, out: Path) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["sweep", "--simulate", fleet, "-q", "--no-store", "--json", str(out), *FAST],
                                catch_exceptions=False)
    return result.exit_code, json.loads(out.read_text())


def _found(document: dict) -> dict[tuple, dict]:
    return {(f["kind"], f["host"], f["gpu"]): f for f in document["findings"]}


COUNTER_FAULTS = [{"kind": "pcie_replays", "host": "node005", "gpu": 3, "count": 5000},
                  {"kind": "nvlink_errors", "host": "node011", "gpu": 6, "link": 7, "counter": "crc", "count": 30000},
                  {"kind": "nvlink_errors", "host": "node011", "gpu": 6, "link": 2, "counter": "recovery",
                   "count": 9}]


def test_planted_error_counters_are_warnings_naming_counter_link_and_peers(tmp_path: Path):
    code, document = _sweep(_fleet(tmp_path, COUNTER_FAULTS), tmp_path / "sweep.json")
    assert code == 0  # warnings only: every host checked, nothing at fail
    found = _found(document)
    assert set(found) == {("degraded_pcie", "node005", 3), ("nvlink_errors", "node011", 6)}
    replays, nvlink = found[("degraded_pcie", "node005", 3)], found[("nvlink_errors", "node011", 6)]
    assert all(f["severity"] == "warn" and f["action"] == "inspect" and f["basis"] == "telemetry"
               for f in found.values())
    assert replays["evidence"] == ("PCIe replay counter 5000 since the driver loaded; peers' median 0 "
                                   "(127 GPUs of this model and driver)")
    assert (replays["metric"], replays["value"], replays["reference"]) == ("telemetry.pcie_replay_count", 5000, 0)
    assert "NVLink 7 CRC errors 30000 since the driver loaded; peers' median 0 (2303 links" in nvlink["evidence"]
    assert "NVLink 2 recovery errors 9 since the driver loaded" in nvlink["evidence"]
    assert nvlink["gpu_uuid"] and nvlink["pci_bus_id"]
    assert document["impact"]["exclude"] == []  # a warning keeps no host out of the job


def test_every_report_format_shows_the_counter_findings(tmp_path: Path):
    document = tmp_path / "sweep.json"
    _sweep(_fleet(tmp_path, COUNTER_FAULTS), document)
    for form in ("text", "md", "json", "html"):
        out = tmp_path / f"report.{form}"
        result = CliRunner().invoke(main, ["report", str(document), "--format", form, "-o", str(out)],
                                    catch_exceptions=False)
        assert result.exit_code == 0, (form, result.output)
        shown = out.read_text()
        assert "nvlink_errors" in shown and "degraded_pcie" in shown, form
        assert "NVLink 7 CRC errors 30000" in " ".join(shown.split()), form


def test_the_same_fleet_gives_byte_identical_counter_findings(tmp_path: Path):
    fleet = _fleet(tmp_path, COUNTER_FAULTS)
    _, first = _sweep(fleet, tmp_path / "first.json")
    _, second = _sweep(fleet, tmp_path / "second.json")
    assert json.dumps(first["findings"]) == json.dumps(second["findings"])


def test_link_slots_a_model_does_not_wire_are_not_down_but_a_wired_link_down_is(tmp_path: Path):
    # NVML lists 18 link slots on these A100 SXM nodes; the model wires 12: slots 12-17 read inactive.
    fleet = _fleet(tmp_path, nodes=10, gpu_model="NVIDIA A100-SXM4-80GB", nvml_link_slots=18)
    code, document = _sweep(fleet, tmp_path / "healthy.json")
    assert (code, document["findings"]) == (0, [])
    down = [{"kind": "nvlink_down", "host": "node003", "gpu": 2, "link": 5}]
    code, document = _sweep(_fleet(tmp_path, down, nodes=10, gpu_model="NVIDIA A100-SXM4-80GB", nvml_link_slots=18),
                            tmp_path / "down.json")
    assert code == 1
    (finding,) = document["findings"]
    assert (finding["kind"], finding["host"], finding["gpu"], finding["severity"]) == ("nvlink_down", "node003", 2,
                                                                                       "fail")
    assert finding["evidence"] == "NVLink 5 down; 11 of 12 up"


def test_with_a_store_counters_are_judged_on_their_growth_since_each_hosts_last_sweep(tmp_path: Path):
    store, out = tmp_path / "gpudiag.db", tmp_path / "sweep.json"

    def sweep(count: int) -> dict:
        fault = {"kind": "nvlink_errors", "host": "node011", "gpu": 6, "link": 7, "counter": "crc", "count": count}
        fleet = tmp_path / f"fleet-{count}.json"
        fleet.write_text(json.dumps({"nodes": 16, "seed": 5, "faults": [fault]}))
        result = CliRunner().invoke(main, ["sweep", "--simulate", str(fleet), "-q", "--store", str(store), "--json",
                                           str(out), *FAST], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return _found(json.loads(out.read_text()))

    first = sweep(30000)  # nothing stored yet: the count since the driver loaded is judged
    assert "30000 since the driver loaded" in first[("nvlink_errors", "node011", 6)]["evidence"]
    assert sweep(30000) == {}  # the same count a sweep later: an old burst that stopped, not flagged again
    grown = sweep(60000)[("nvlink_errors", "node011", 6)]  # it errors again: 30000 more since the last sweep
    assert "30000" in grown["evidence"] and "since the driver loaded" not in grown["evidence"]
