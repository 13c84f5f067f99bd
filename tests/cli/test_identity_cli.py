"""A host's identity is the controller's, through the whole command line on simulated fleets: a
node whose facts give another host's name, or whose GPUs carry another host's UUIDs, is set aside
(``identity_conflict``, an ``unchecked`` finding, exit 3), and the host it poses as keeps its own
records and verdict in the document, the textfile, the store, the HTML and markdown reports, the
pair tests and a pre-flight."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from gpudiag.cli.main import main
from gpudiag.sim import SimulatedFleet
from gpudiag.sim.fleetfile import parse_fleet

FAST = ("--probes", "facts,gemm,telemetry", "--duration", "0.2")
IMPOSTOR = {"kind": "impostor", "host": "node002", "as": "node003"}
CLONE = {"kind": "cloned_gpus", "host": "node002", "as": "node003"}
SERIES = re.compile(r'^(\w+)\{(.*)\} (\S+)$')


def _fleet(tmp_path: Path, *faults: dict[str, Any], name: str = "fleet.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"nodes": 4, "seed": 5, "noise": {"gemm_cv": 0.01, "membw_cv": 0.01},
                                "faults": list(faults)}))
    return path


def _run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _sweep(tmp_path: Path, fleet: Path, *args: str, store: str | None = None) -> tuple[Result, dict, Path]:
    out, prom = tmp_path / "sweep.json", tmp_path / "sweep.prom"
    stored = ("--store", store) if store else ("--no-store",)
    result = _run("sweep", "--simulate", str(fleet), "--json", str(out), "--prom-file", str(prom), *stored, *FAST,
                  *args)
    return result, json.loads(out.read_text()), prom


def _uuids(fleet: Path, host: str) -> set[str]:
    """The UUIDs of ``host``'s own GPUs in the simulated fleet (for the test; the sweep never sees them)."""
    healthy = json.loads(fleet.read_text()) | {"faults": []}
    state = SimulatedFleet(parse_fleet(healthy, str(fleet))).node_state(host)
    return {gpu.gpu_uuid for gpu in state.gpus}


def _series(prom: Path) -> list[tuple[str, dict[str, str]]]:
    """Each sample of the textfile: its name and labels."""
    found = []
    for line in prom.read_text().splitlines():
        match = SERIES.match(line)
        if match:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2)))
            found.append((match.group(1), labels))
    return found


def test_a_node_posing_as_another_is_set_aside_and_the_other_is_untouched_in_every_output(tmp_path: Path):
    # the impostor's own GPU 3 is slow too: nothing of it may reach a finding, a re-test or node003's verdict
    fleet = _fleet(tmp_path, IMPOSTOR, {"kind": "slow_gpu", "host": "node002", "gpu": 3, "factor": 0.7})
    store = str(tmp_path / "gpudiag.db")
    result, document, prom = _sweep(tmp_path, fleet, "--links", "full", store=store)
    assert result.exit_code == 3, result.output
    hosts = {host["host"]: host for host in document["hosts"]}
    impostor, victim = hosts["node002"], hosts["node003"]
    assert impostor["status"] == "identity_conflict" and impostor["facts"] == {} and impostor["results"] == []
    assert "'node003', the name of node003" in impostor["error"]
    # the host it posed as keeps its own name, GPUs, records and verdict
    assert victim["status"] == "ok" and victim["facts"]["hostname"] == "node003"
    assert {gpu["gpu_uuid"] for gpu in victim["facts"]["gpus"]} == _uuids(fleet, "node003")
    assert {r["gpu_uuid"] for r in victim["results"] if r["probe"] == "gemm"} == _uuids(fleet, "node003")
    assert [(f["kind"], f["host"]) for f in document["findings"]] == [("unchecked", "node002")]
    assert "identity_conflict" in document["findings"][0]["evidence"]
    assert document["impact"]["exclude"] == ["node002"]
    # no pair test with the impostor: it is no reference peer of anyone's link
    assert document["links"] and all("node002" not in (link["a"], link["b"]) for link in document["links"])
    # the textfile: the impostor is only a status; no series of another host carries node003's name or GPUs
    series = _series(prom)
    assert sorted((name, labels.get("status") or labels.get("kind")) for name, labels in series
                  if labels.get("host") == "node002") == [("gpudiag_finding", "unchecked"),
                                                          ("gpudiag_host_status", "identity_conflict")]
    assert all(labels.get("host") == "node003" for _, labels in series
               if labels.get("Hostname") == "node003" or labels.get("UUID") in _uuids(fleet, "node003"))
    # the screen: its hosts row keeps the counts in one column, and it was probed: its records were set aside
    rows = [line for line in result.output.splitlines() if re.match(r"  (ok|identity_conflict) +\d+  ", line)]
    assert len(rows) == 2 and len({re.match(r"  \S+ +\d+", row).end() for row in rows}) == 1, result.output
    unchecked_line = next(line for line in result.output.splitlines() if "unchecked node002" in line)
    assert "could not be probed" not in unchecked_line and "no usable measurements" in unchecked_line
    # the store, and the reports read back from it
    report = _run("report", "--store", store)
    assert "node002 identity_conflict" in report.output.splitlines()[0]
    for fmt in ("md", "html"):
        text = _run("report", "--store", store, "--format", fmt).output
        assert "identity_conflict" in text and "the name of node003" in text
    history = json.loads(_run("history", "node002", "--store", store, "--json", "-").output)
    assert [row["status"] for row in history["sweeps"]] == ["identity_conflict"]
    assert history["sweeps"][0]["figures"] == []
    victim_history = json.loads(_run("history", "node003", "--store", store, "--json", "-").output)
    assert victim_history["sweeps"][0]["verdict"]["severity"] == "ok"
    assert victim_history["sweeps"][0]["figures"]


def test_two_hosts_with_one_gpus_uuids_and_no_store_to_tell_them_apart_are_both_set_aside(tmp_path: Path):
    result, document, _ = _sweep(tmp_path, _fleet(tmp_path, CLONE))
    assert result.exit_code == 3, result.output
    status = {host["host"]: host["status"] for host in document["hosts"]}
    assert status == {"node001": "ok", "node002": "identity_conflict", "node003": "identity_conflict",
                      "node004": "ok"}
    assert sorted(f["host"] for f in document["findings"]) == ["node002", "node003"]
    assert all("cannot be told" in f["evidence"] for f in document["findings"])


def test_the_store_that_saw_a_gpu_on_one_host_keeps_it_there_and_sets_the_copy_aside(tmp_path: Path):
    store = str(tmp_path / "gpudiag.db")
    clean, _, _ = _sweep(tmp_path, _fleet(tmp_path), store=store, )
    assert clean.exit_code == 0, clean.output
    result, document, _ = _sweep(tmp_path, _fleet(tmp_path, CLONE, name="cloned.json"), store=store)
    assert result.exit_code == 3, result.output
    status = {host["host"]: host["status"] for host in document["hosts"]}
    assert status == {"node001": "ok", "node002": "identity_conflict", "node003": "ok", "node004": "ok"}
    (finding,) = document["findings"]
    assert finding["host"] == "node002" and "the store last saw it on node003" in finding["evidence"]


def test_a_preflight_sets_the_impostor_aside_and_passes_the_host_it_posed_as(tmp_path: Path):
    fleet = tmp_path / "pf.json"
    fleet.write_text(json.dumps({"nodes": 4, "name_format": "n{}",
                                 "faults": [{"kind": "impostor", "host": "n2", "as": "n3"}]}))
    out = tmp_path / "preflight.json"
    result = CliRunner().invoke(main, ["preflight", "--no-store", "-q", "--simulate", str(fleet), "--json", str(out)],
                                catch_exceptions=False, env={"SLURM_JOB_NODELIST": "", "SLURM_NODELIST": ""})
    assert result.exit_code == 3, result.output
    document = json.loads(out.read_text())
    assert {h["host"]: h["status"] for h in document["hosts"]} == {"n1": "ok", "n2": "identity_conflict",
                                                                   "n3": "ok", "n4": "ok"}
    assert [f["host"] for f in document["findings"]] == ["n2"]
    tested = {end for link in document["links"] for end in (link["a"], link["b"])}
    assert "n3" in tested and "n2" not in tested
    assert result.output.splitlines()[-1].startswith("gpudiag preflight: inconclusive, exit 3")
    assert "n2 unchecked: identity_conflict" in result.output.splitlines()[-1]
