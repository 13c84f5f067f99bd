"""A node speaks only for itself, over real sshd hosts: a node Python (``--python`` wrapper) that
runs the real bundle and then lies — a measurement printed twice, GEMM records for 100 GPUs it does
not have at 1,500 TFLOP/s, escape sequences, rich markup, HTML and a ``javascript:`` link in its
words — changes only its own verdict; one that prints a wrong type in its facts is ``probe_error``
naming the line and the field; nothing either prints reaches the terminal or a report as markup,
and the sweep document is strict JSON.

The controller runs in a child process under an address-space limit (limited_run.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ClusterShell.NodeSet import NodeSet
from limited_run import run_limited
from sshd_hosts import SshdFleet

ROOT = Path(__file__).resolve().parents[2]
# Three CPU hosts are too few for a fleet level, and this machine's load is no host's fault: these
# tests are about what a node prints, not about judging its figures.
THRESHOLDS = ('{"schema": "gpudiag.thresholds/1", "min_peers": {"value": 100000, "unit": "count"}, '
                 '"small_fleet_min_hosts": {"value": 100000, "unit": "count"}, '
              '"host_load_per_cpu": {"value": 1000000, "unit": "ratio"}}')
HOSTILE_TEXT = ("\x1b]0;owned\x07\x1b[2J[bold red]red[/] [link=https://evil.example]x[/link] "
                "<script>alert(1)</script> [click](javascript:alert(1)) "
                "hid\u3164den\u115f\u2800\u034f\ufe0f node\u0435017 \uff4e\uff4f\uff44\uff45")
# What no output may show of it: characters drawn as nothing, and look-alike letters as letters.
INVISIBLE = "\u3164\u115f\u2800\u034f\ufe0f"
# Reads the real bundle's records on stdin and prints them with the lies of the module docstring.
LIAR = f'''
import copy, json, sys
hostile = {HOSTILE_TEXT!r}
for line in sys.stdin:
    print(line, end="")
    record = json.loads(line)
    if record["probe"] == "facts":
        continue
    if record["probe"] == "gemm" and record["status"] == "ok":
        twin = dict(record, value=record["value"] * 1.5)
        print(json.dumps(twin))
        for number in range(8, 108):
            print(json.dumps(dict(copy.deepcopy(record), device=f"cuda:{{number}}", gpu_uuid=f"GPU-{{number}}",
                                  value=1500.0)))
print(json.dumps({{"probe": "membw", "device": "host", "metric": "bandwidth", "value": None, "unit": None,
                  "status": "error", "reason": hostile}}))
'''
# Prints the real bundle's records with the facts' CPU count a word.
WRONG_TYPE = '''
import json, sys
for line in sys.stdin:
    record = json.loads(line)
    if record["probe"] == "facts":
        record["details"]["cpu_count"] = "two"
    print(json.dumps(record))
'''


def _wrapper(tmp_path: Path, fleet: SshdFleet, filters: dict[str, str]) -> str:
    """A node Python that runs the real bundle everywhere, its output piped through
    ``filters[name]`` (a Python script) on host ``name``."""
    branches = []
    for name, script in filters.items():
        path = tmp_path / f"{name}.py"
        path.write_text(script)
        branches.append(f'  *" {fleet.host(name).address} "*) {sys.executable} "$@" | {sys.executable} {path} ;;\n')
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\ncase "$SSH_CONNECTION" in\n{"".join(branches)}  *) exec {sys.executable} "$@" ;;\n'
                       "esac\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def _sweep(fleet: SshdFleet, tmp_path: Path, python: str, name: str) -> tuple[dict, str]:
    known = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=known)
    hosts = fleet.write_hosts_file(tmp_path / "hosts.txt")
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text(THRESHOLDS)
    document = tmp_path / f"{name}.json"
    run = run_limited([sys.executable, "-m", "gpudiag", "sweep", "--hosts", str(hosts), "--ssh-config", str(config),
                       "--known-hosts", str(known), "--thresholds", str(thresholds), "--no-store", "--python", python,
                       "--probes", "facts,gemm,membw", "--duration", "0.2", "--links", "none", "--json-detail",
                       "full", "--json", str(document), "-q"], timeout_s=240, cwd=ROOT)
    assert run.returncode in (1, 3), run.stderr[-3000:]

    def refuse(token: str) -> None:
        raise ValueError(f"not JSON: {token}")

    return json.loads(document.read_text(), parse_constant=refuse), run.stdout + run.stderr


def _verdicts(document: dict, host: str) -> list[tuple]:
    """(kind, severity, GPU, metric) of each finding that names ``host`` (alone or among others)."""
    return sorted((f["kind"], f["severity"], f["gpu"], f["metric"]) for f in document["findings"]
                  if host in NodeSet(f["host"]) or f.get("peer") == host)


def test_a_lying_node_changes_only_its_own_verdict_and_none_of_its_words_is_markup(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(3)
    clean, _ = _sweep(fleet, tmp_path, sys.executable, "clean")
    python = _wrapper(tmp_path, fleet, {"node02": LIAR, "node03": WRONG_TYPE})
    document, terminal = _sweep(fleet, tmp_path, python, "hostile")
    hosts = {host["host"]: host for host in document["hosts"]}
    assert {name: host["status"] for name, host in hosts.items()} == {
        "node01": "ok", "node02": "ok", "node03": "probe_error"}
    assert hosts["node03"]["error"].startswith("node03 line 1: facts.gpu_count record: field 'details.cpu_count' "
                                               "must be an integer from 1")
    assert _verdicts(document, "node01") == _verdicts(clean, "node01")
    evidence = [f["evidence"] for f in document["findings"] if f["host"] == "node02" and f["kind"] == "unchecked"]
    assert any("gemm records for 100 GPUs it does not have (cuda:8..cuda:107; it has 0 by torch's count)" in text
               for text in evidence)
    assert any("printed 2 records of gemm.tflops on cpu" in text for text in evidence)
    assert not [r for r in hosts["node02"]["results"] if str(r["device"]).startswith("cuda:")]
    assert "\x1b" not in terminal and "\x07" not in terminal
    said = next(text for text in evidence if "alert(1)" in text)
    assert "\x1b" not in said and "[bold red]red[/]" in said  # kept as text, cleaned of control characters
    assert "hidden" in said and "node\\u0435017" in said and "\\uff4e\\uff4f\\uff44\\uff45" in said
    assert not set(INVISIBLE + "\u0435\uff4e") & set(terminal + json.dumps(document, ensure_ascii=False))
    report = run_limited([sys.executable, "-m", "gpudiag", "report", str(tmp_path / "hostile.json"), "--format",
                          "md"], timeout_s=120, cwd=ROOT)
    assert report.returncode == 0, report.stderr[-2000:]
    assert "<script>" not in report.stdout and "&lt;script&gt;" in report.stdout
    assert "](javascript:" not in report.stdout and "\x1b" not in report.stdout
    assert not set(INVISIBLE + "\u0435\uff4e") & set(report.stdout)
