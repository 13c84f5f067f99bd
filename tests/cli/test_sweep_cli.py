"""``gpudiag sweep`` input errors: one line naming the file, line and fix; exit 2; nothing run."""

import json
import re
from pathlib import Path

from click.testing import CliRunner

from gpudiag.cli.main import main
from gpudiag.report import check_writable


def test_a_bad_line_in_the_hosts_file_is_exit_2_with_file_and_line(tmp_path: Path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("# rack 1\nnode[001-004]\n\nnode[005-\nnode009\n")
    json_path = tmp_path / "out.json"
    result = CliRunner().invoke(main, ["sweep", "--hosts", str(hosts), "--json", str(json_path), "-q"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"gpudiag: error: {hosts}:4:")
    assert not json_path.exists()


def test_localhost_is_swept_without_ssh(tmp_path: Path):
    import json
    import sys

    json_path = tmp_path / "out.json"
    result = CliRunner().invoke(main, ["sweep", "--hosts", "localhost", "--probes", "facts", "--python",
                                       sys.executable, "--json", str(json_path), "-q"])
    assert result.exit_code == 0, result.output
    document = json.loads(json_path.read_text())
    assert [(h["host"], h["status"]) for h in document["hosts"]] == [("localhost", "ok")]


def test_json_to_stdout_keeps_the_summary_off_stdout(tmp_path: Path):
    import json
    import sys

    result = CliRunner().invoke(main, ["sweep", "--hosts", "localhost", "--probes", "facts", "--python",
                                       sys.executable, "--json", "-", "-q"])
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert document["schema"] == "gpudiag.sweep/1"


def _fleet_file(tmp_path: Path) -> Path:
    fleet = tmp_path / "fleet.json"
    fleet.write_text('{"nodes": 4}')
    return fleet


def test_an_unwritable_json_or_exclude_path_is_refused_before_any_node_is_touched(tmp_path: Path):
    store = tmp_path / "gpudiag.db"
    cases = [("--json", str(tmp_path / "no-such-folder" / "sweep.json"),
              f"the folder {tmp_path / 'no-such-folder'} does not exist; create it or give another path"),
             ("--exclude-file", str(tmp_path), "is a folder; give a file path")]
    for option, path, said in cases:
        result = CliRunner().invoke(main, ["sweep", "--simulate", str(_fleet_file(tmp_path)), "-q", "--store",
                                           str(store), option, path])
        assert result.exit_code == 2, result.output
        assert f"{option} {path}: {said}" in result.output
    assert not store.exists()  # refused before the store was opened, let alone a node touched


def test_the_writability_check_leaves_nothing_behind_and_accepts_a_new_file(tmp_path: Path):
    check_writable(tmp_path / "new.json", "--json")
    assert list(tmp_path.iterdir()) == []


def test_the_json_is_compact_by_default_full_on_request_and_both_render_as_reports(tmp_path: Path):
    fleet = tmp_path / "fleet.json"
    fleet.write_text('{"nodes": 3, "faults": [{"kind": "slow_gpu", "host": "node002", "gpu": 1, "factor": 0.7}]}')
    sizes, entries = {}, {}
    for detail in ("compact", "full"):
        out = tmp_path / f"{detail}.json"
        args = ["sweep", "--simulate", str(fleet), "-q", "--no-store", "--links", "none", "--json", str(out)]
        result = CliRunner().invoke(main, args + ([] if detail == "compact" else ["--json-detail", "full"]))
        assert result.exit_code in (1, 3), result.output
        document = json.loads(out.read_text())
        assert document["json_detail"] == detail and len(document["hosts"]) == 3
        host = document["hosts"][0]
        probes = {r["probe"] for r in host["results"]}
        if detail == "compact":
            assert "p2p" not in probes and "telemetry" not in probes and host["p2p"] and host["telemetry"]
        else:
            assert {"p2p", "telemetry", "gemm"} <= probes and "p2p" not in host
        sizes[detail] = out.stat().st_size
        entries[detail] = sum(len(json.dumps(host)) for host in document["hosts"])
        for fmt in ("text", "md", "html"):
            shown = CliRunner().invoke(main, ["report", str(out), "--format", fmt])
            assert shown.exit_code == 0 and "node002" in shown.output, (detail, fmt, shown.output[-300:])
    # each node's compact entry within its budget (tests/unit/controller/report/test_detail.py), the
    # document's findings beside them
    assert sizes["compact"] * 2.5 < sizes["full"] and entries["compact"] < 3 * 50_000


def test_after_the_node_probes_progress_says_each_phase(tmp_path: Path):
    fleet = tmp_path / "fleet.json"
    fleet.write_text('{"nodes": 8, "faults": [{"kind": "slow_gpu", "host": "node002", "gpu": 1, "factor": 0.7}]}')
    result = CliRunner().invoke(main, ["sweep", "--simulate", str(fleet), "--store", str(tmp_path / "g.db"),
                                       "--links", "screen"])
    said = [line for line in result.stderr.splitlines() if line.startswith("gpudiag: ")]
    phases = [line for line in said if "hosts done" not in line]
    assert phases[0] == "gpudiag: analysing 8 hosts", said
    assert re.fullmatch(r"gpudiag: re-testing \d+ suspects? on \d+ hosts?(, up to \d+ runs)?", phases[1]), said
    assert phases[2].startswith("gpudiag: pair tests between nodes (screen) over 8 hosts")
    assert phases[3] == f"gpudiag: storing the sweep in {tmp_path / 'g.db'}"


def test_with_no_retest_a_slow_gpu_is_unconfirmed_and_unchecked_never_a_pass(tmp_path: Path):
    """--no-retest skips the re-test that would confirm or clear a suspect: the sweep says so, keeps
    the host out of jobs, and exits 3 (could not be checked), never 0."""
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": 8, "faults": [{"kind": "slow_gpu", "host": "node003", "gpu": 2,
                                                         "factor": 0.7}]}))
    json_path, exclude = tmp_path / "sweep.json", tmp_path / "exclude.txt"
    result = CliRunner().invoke(main, ["sweep", "--simulate", str(fleet), "--no-store", "--no-retest", "-q",
                                       "--json", str(json_path), "--exclude-file", str(exclude)])
    assert result.exit_code == 3, result.output
    findings = json.loads(json_path.read_text())["findings"]
    (slow,) = [f for f in findings if f["kind"] == "slow_gpu"]
    assert (slow["host"], slow["gpu"], slow["severity"], slow["confirmed"]) == ("node003", 2, "warn", False)
    unchecked = {(f["host"], f["gpu"]): f["evidence"] for f in findings if f["kind"] == "unchecked"}
    assert "it was not re-tested (--no-retest)" in unchecked["node003", 2]
    # every suspect, the simulator's noise-level ones too, is unchecked: none was confirmed or cleared
    suspects = {f["host"] for f in findings if f["severity"] == "warn" and f["kind"] != "fleet_shift"}
    assert {host for host, _ in unchecked} == suspects
    assert "node003" in exclude.read_text().split()


def test_with_the_retest_the_same_slow_gpu_is_confirmed_and_fails(tmp_path: Path):
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": 8, "faults": [{"kind": "slow_gpu", "host": "node003", "gpu": 2,
                                                         "factor": 0.7}]}))
    json_path = tmp_path / "sweep.json"
    result = CliRunner().invoke(main, ["sweep", "--simulate", str(fleet), "--no-store", "-q", "--json",
                                       str(json_path)])
    assert result.exit_code == 1, result.output
    findings = json.loads(json_path.read_text())["findings"]
    assert [(f["kind"], f["host"], f["confirmed"]) for f in findings if f["severity"] == "fail"] == [
        ("slow_gpu", "node003", True)]
    assert not [f for f in findings if f["kind"] == "unchecked"]
