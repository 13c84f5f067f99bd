"""The Prometheus alerting rules and the Grafana dashboard of ``examples/`` against the textfile
a simulated sweep really writes (``gpudiag sweep --prom-file``).

``promtool`` (Debian's ``prometheus`` package; scripts/install-test-deps installs it) checks the
rules and runs them with ``promtool test rules`` over input series made from the textfile's
samples, one series per sample, as node_exporter would expose them (plus its ``instance`` and
``job``). promtool's clock starts at 0, so the last-run timestamp is moved to 0: "the sweep
finished when the test began". The dashboard's PromQL is checked against the same textfile: the
metric and label names it reads, that promtool parses it, and what three of its panels show.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from gpudiag.cli.main import main

pytestmark = pytest.mark.integration

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is missing: it comes with Debian's "
                                    "prometheus package (run scripts/install-test-deps as root)")
ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "examples" / "prometheus" / "gpudiag-rules.yml"
DASHBOARD = ROOT / "examples" / "grafana" / "gpudiag.json"
# What node_exporter on the controller adds to every series of the textfile.
SCRAPE_LABELS = {"instance": "controller:9100", "job": "node"}
FAULTS = [{"kind": "slow_gpu", "host": "node003", "gpu": 5, "factor": 0.8},
          {"kind": "gpu_lost", "host": "node004", "gpu": 2},
          {"kind": "unreachable", "host": "node008"},
          {"kind": "slow_nic", "host": "node006", "factor": 0.5},
          {"kind": "slow_link", "a": "node001", "b": "node002", "factor": 0.5}]
# The hosts of the faults above that get a fail finding; node008 (unreachable) is a warn.
FAILING = {"node001", "node003", "node004", "node006"}
STALE_HOURS = 26  # the rules' GpudiagSweepStale threshold

Sample = tuple[str, dict[str, str], float]


def _sweep(folder: Path, fleet: dict[str, Any], links: str) -> tuple[int, list[Sample], dict[str, Any]]:
    """A simulated sweep of ``fleet``: its exit code, the textfile's samples and the sweep document."""
    folder.mkdir()
    (folder / "fleet.json").write_text(json.dumps(fleet))
    prom, document = folder / "gpudiag.prom", folder / "sweep.json"
    result = CliRunner().invoke(main, ["sweep", "--simulate", str(folder / "fleet.json"), "-q", "--no-store",
                                       "--probes", "gemm,membw,pcie,telemetry", "--duration", "0.2", "--links", links,
                                       "--prom-file", str(prom), "--json", str(document)], catch_exceptions=False)
    samples = [(sample.name, dict(sample.labels), sample.value)
               for family in text_string_to_metric_families(prom.read_text()) for sample in family.samples]
    return result.exit_code, samples, json.loads(document.read_text())


@pytest.fixture(scope="module")
def faulty(tmp_path_factory) -> tuple[int, list[Sample], dict[str, Any]]:
    """An 8-node sweep with a slow GPU, a lost GPU, a slow NIC, a slow link and an unreachable node."""
    return _sweep(tmp_path_factory.mktemp("rules") / "faulty", {"nodes": 8, "seed": 5, "faults": FAULTS}, "screen")


def _selector(name: str, labels: dict[str, str]) -> str:
    """``name{label="value",...}`` in PromQL's quoting."""
    pairs = ",".join(f"{key}={json.dumps(value)}" for key, value in sorted(labels.items()))
    return f"{name}{{{pairs}}}"


def _input_series(samples: list[Sample], points: int, finished_s: float = 0.0) -> list[dict[str, str]]:
    """Each sample as a series of ``points`` equal values a minute apart, with node_exporter's
    labels; the last-run timestamp set to ``finished_s`` on promtool's clock."""
    series = []
    for name, labels, value in samples:
        if name == "gpudiag_last_run_timestamp_seconds":
            value = finished_s
        series.append({"series": _selector(name, {**labels, **SCRAPE_LABELS}),
                       "values": f"{float(value)!r}+0x{points}"})
    return series


def _promtool_test(folder: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    """``promtool test rules`` of the rules with these test groups (a JSON file: YAML reads it)."""
    unit = folder / "gpudiag-rules.test.json"
    unit.write_text(json.dumps({"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": tests}, indent=1))
    return subprocess.run([PROMTOOL, "test", "rules", str(unit)], capture_output=True, text=True, timeout=120)


def _fail_alert(labels: dict[str, str]) -> dict[str, Any]:
    """The GpudiagFailFinding alert a fail finding's series should raise, as an operator reads it."""
    gpu = f" GPU {labels['gpu']}" if labels["gpu"] else ""
    peer = f" to {labels['peer']}" if labels["peer"] else ""
    metric = f" ({labels['metric']})" if labels["metric"] else ""
    uuid = f" {labels['UUID']}" if labels["UUID"] else ""
    host, instance = labels["Hostname"], SCRAPE_LABELS["instance"]
    present = {key: value for key, value in labels.items() if value}  # Prometheus drops a label with no value
    return {"exp_labels": {**present, **SCRAPE_LABELS, "severity": "critical"},
            "exp_annotations": {
                "summary": f"gpudiag: {labels['kind']} on {host}{gpu}{peer}",
                "description": f"The last gpudiag sweep found {labels['kind']}{metric} on {host}{gpu}{uuid}{peer}; "
                               f"action: {labels['action']}. gpudiag report on {instance} shows the evidence."}}


def _exit_alert(code: int) -> dict[str, Any]:
    instance = SCRAPE_LABELS["instance"]
    return {"exp_labels": {**SCRAPE_LABELS, "severity": "warning"},
            "exp_annotations": {
                "summary": f"gpudiag's last sweep on {instance} exited {code}",
                "description": f"Exit status {code}: 1 a fail finding, 3 something could not be checked, 4 gpudiag "
                               "failed, 130 interrupted. The findings are gpudiag_finding (nodes) and "
                               "gpudiag_network_finding (the network), the hosts not checked "
                               'gpudiag_host_status{status!="ok"}.'}}


def _network_alert(labels: dict[str, str]) -> dict[str, Any]:
    """The GpudiagNetworkFinding alert a fail finding of no host should raise, as an operator reads it."""
    metric = f" ({labels['metric']})" if labels["metric"] else ""
    switch = f": switch {labels['switch']}" if labels["switch"] else ""
    switch += f" port {labels['port']}" if labels["switch"] and labels["port"] else ""
    peer = f" to switch {labels['peer_switch']}" if labels["peer_switch"] else ""
    peer += f" port {labels['peer_port']}" if labels["peer_switch"] and labels["peer_port"] else ""
    present = {key: value for key, value in labels.items() if value}
    return {"exp_labels": {**present, **SCRAPE_LABELS, "severity": "critical"},
            "exp_annotations": {
                "summary": f"gpudiag: {labels['kind']} at {labels['where']}",
                "description": f"The last gpudiag sweep found {labels['kind']}{metric} at {labels['where']}{switch}"
                               f"{peer}; no node is at fault (none is drained): for the network team; action: "
                               f"{labels['action']}. gpudiag report on {SCRAPE_LABELS['instance']} shows the "
                               "evidence and the commands that read the ports."}}


def _alert_tests(samples: list[Sample], fail_alerts: list[dict[str, Any]], exit_alerts: list[dict[str, Any]],
                 network_alerts: list[dict[str, Any]] | None = None):
    """One test group: the sweep's series for 20 minutes, the alerts expected after 10."""
    return {"interval": "1m", "input_series": _input_series(samples, 20), "alert_rule_test": [
        {"eval_time": "10m", "alertname": "GpudiagFailFinding", "exp_alerts": fail_alerts},
        {"eval_time": "10m", "alertname": "GpudiagNetworkFinding", "exp_alerts": network_alerts or []},
        {"eval_time": "10m", "alertname": "GpudiagExitCode", "exp_alerts": exit_alerts},
        {"eval_time": "10m", "alertname": "GpudiagSweepStale", "exp_alerts": []},
        {"eval_time": "10m", "alertname": "GpudiagMetricsAbsent", "exp_alerts": []}]}


@needs_promtool
def test_the_rules_file_passes_promtool_check():
    checked = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 5 rules found" in checked.stdout


@needs_promtool
def test_a_fail_finding_alerts_for_its_host_and_gpu_only_and_the_exit_code_alerts(faulty, tmp_path: Path):
    code, samples, document = faulty
    fail = [labels for name, labels, value in samples
            if name == "gpudiag_finding" and labels["severity"] == "fail" and value == 1]
    assert {labels["Hostname"] for labels in fail} == FAILING == {
        finding["host"] for finding in document["findings"] if finding["severity"] == "fail"}
    assert ("node003", "5", "slow_gpu") in {(labels["Hostname"], labels["gpu"], labels["kind"]) for labels in fail}
    assert code == 1 and any(name == "gpudiag_finding" and labels["Hostname"] == "node008"
                             for name, labels, _ in samples)  # a warn, which raises no alert
    result = _promtool_test(tmp_path, [_alert_tests(samples, [_fail_alert(labels) for labels in fail],
                                                    [_exit_alert(code)])])
    assert result.returncode == 0, result.stdout + result.stderr
    # promtool fails on an alert it did not expect: drop node003's and its alert is reported as unexpected
    others = [_fail_alert(labels) for labels in fail if labels["Hostname"] != "node003"]
    result = _promtool_test(tmp_path, [_alert_tests(samples, others, [_exit_alert(code)])])
    assert result.returncode != 0 and "node003" in result.stdout + result.stderr


# A fabric of 8 leaves and 4 spines per rail with one slow uplink on rail 2, and a slow NIC.
FABRIC_FLEET = {"nodes": 64, "seed": 11, "noise": {"link_cv": 0.02}, "fabric": {"leaves": 8, "spines": 4},
                "faults": [{"kind": "slow_uplink", "a": "r2-leaf03", "b": "r2-spine04", "factor": 0.7},
                           {"kind": "slow_nic", "host": "node050", "factor": 0.7}]}


@needs_promtool
def test_a_slow_switch_link_alerts_as_a_network_finding_naming_its_switches_and_no_host(tmp_path: Path):
    code, samples, document = _sweep(tmp_path / "fabric", FABRIC_FLEET, "screen")
    network = [labels for name, labels, value in samples
               if name == "gpudiag_network_finding" and labels["severity"] == "fail" and value == 1]
    assert [(labels["switch"], labels["port"], labels["peer_switch"], labels["peer_port"], labels["fabric_rail"])
            for labels in network] == [("r2-leaf03", "12", "r2-spine04", "3", "2")]
    assert all("Hostname" not in labels and "host" not in labels for labels in network)
    fail = [labels for name, labels, value in samples
            if name == "gpudiag_finding" and labels["severity"] == "fail" and value == 1]
    assert {labels["Hostname"] for labels in fail} == {"node050"} and code == 1
    assert [finding["kind"] for finding in document["findings"] if finding["host"] is None] == ["slow_fabric_link"]
    alerts = _alert_tests(samples, [_fail_alert(labels) for labels in fail], [_exit_alert(code)],
                          [_network_alert(labels) for labels in network])
    result = _promtool_test(tmp_path, [alerts])
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_a_healthy_sweep_raises_no_alert(tmp_path: Path):
    code, samples, _ = _sweep(tmp_path / "healthy", {"nodes": 4, "seed": 5, "faults": []}, "none")
    assert code == 0 and not [name for name, _, _ in samples if name == "gpudiag_finding"]
    assert ("gpudiag_last_run_exit_code", {}, 0.0) in samples
    result = _promtool_test(tmp_path, [_alert_tests(samples, [], [])])
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_a_sweep_older_than_the_threshold_alerts_stale_and_a_missing_textfile_alerts_absent(faulty, tmp_path: Path):
    _, samples, _ = faulty
    last_run = [sample for sample in samples if sample[0].startswith("gpudiag_last_run_")]
    assert {name for name, _, _ in last_run} == {"gpudiag_last_run_timestamp_seconds", "gpudiag_last_run_exit_code",
                                                 "gpudiag_last_run_info", "gpudiag_last_run_complete"}
    hours = STALE_HOURS + 1
    instance = SCRAPE_LABELS["instance"]
    stale = {"exp_labels": {**SCRAPE_LABELS, "severity": "warning"}, "exp_annotations": {
        "summary": f"gpudiag has not swept from {instance} for {hours:.1f} hours",
        "description": f"The last sweep on {instance} finished {hours:.1f} hours ago: the figures, findings and exit "
                       "code shown are that old. Check the job that runs gpudiag sweep --prom-file there."}}
    absent = {"exp_labels": {"severity": "warning"}, "exp_annotations": {
        "summary": "gpudiag's textfile metrics are absent",
        "description": "No node_exporter exposes gpudiag_last_run_timestamp_seconds: write the textfile (gpudiag "
                       "sweep --prom-file PATH.prom) into the folder of node_exporter's "
                       "--collector.textfile.directory."}}
    tests = [{"interval": "1m", "input_series": _input_series(last_run, hours * 60 + 5), "alert_rule_test": [
                 {"eval_time": f"{STALE_HOURS - 1}h", "alertname": "GpudiagSweepStale", "exp_alerts": []},
                 {"eval_time": f"{hours}h", "alertname": "GpudiagSweepStale", "exp_alerts": [stale]},
                 {"eval_time": f"{hours}h", "alertname": "GpudiagMetricsAbsent", "exp_alerts": []}]},
             {"interval": "1m", "input_series": [{"series": 'up{job="node"}', "values": "1+0x180"}],
              "alert_rule_test": [
                 {"eval_time": "30m", "alertname": "GpudiagMetricsAbsent", "exp_alerts": []},
                 {"eval_time": "2h", "alertname": "GpudiagMetricsAbsent", "exp_alerts": [absent]}]}]
    result = _promtool_test(tmp_path, tests)
    assert result.returncode == 0, result.stdout + result.stderr


# --- the dashboard ------------------------------------------------------------------------------

# PromQL words that are no metric name: functions, aggregations and keywords the dashboard may use.
PROMQL_WORDS = {"sum", "min", "max", "avg", "count", "quantile", "topk", "bottomk", "count_values", "stddev",
                "group", "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
                "bool", "offset", "vector", "scalar", "time", "abs", "clamp_min", "clamp_max", "label_values",
                "sort", "sort_desc", "absent", "round", "e"}
LABEL_CLAUSE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*\"")


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """Every (PromQL, legend format) the dashboard sends: its panels' targets and its host variable."""
    found = [(target["expr"], target.get("legendFormat", "")) for panel in dashboard["panels"]
             for target in panel.get("targets", [])]
    return found + [(variable["definition"], "") for variable in dashboard["templating"]["list"]
                    if variable["type"] == "query"]


def _metric_names(expr: str) -> set[str]:
    """The words of ``expr`` outside strings, label matchers and label lists that are no PromQL word."""
    bare = re.sub(r"label_values\(\s*(\w+)\s*,\s*\w+\s*\)", r"\1", expr)
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', bare)
    bare = LABEL_CLAUSE.sub(" ", re.sub(r"\{[^}]*\}", " ", bare))
    bare = re.sub(r"\$\w+|\[[^\]]*\]|\b\d+(?:\.\d+)?\b", " ", bare)
    return set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", bare)) - PROMQL_WORDS


def _label_names(expr: str, legend: str) -> set[str]:
    """The label names ``expr`` matches or groups on and ``legend`` shows."""
    names = set(MATCHER.findall(expr))
    names |= {name.strip() for clause in LABEL_CLAUSE.findall(expr) for name in clause.split(",") if name.strip()}
    names |= set(re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", legend))
    names |= set(re.findall(r"label_values\(\s*\w+\s*,\s*(\w+)\s*\)", expr))
    return names


def test_the_dashboard_is_a_grafana_dashboard_over_a_datasource_variable():
    dashboard = _dashboard()
    assert dashboard["uid"] and dashboard["title"] and isinstance(dashboard["schemaVersion"], int)
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert (variables["datasource"]["type"], variables["datasource"]["query"]) == ("datasource", "prometheus")
    assert variables["host"]["datasource"]["uid"] == "${datasource}" and variables["host"]["includeAll"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], int] = {}
    for panel in dashboard["panels"]:
        place = panel["gridPos"]
        assert place["x"] + place["w"] <= 24, panel["title"]
        for x in range(place["x"], place["x"] + place["w"]):
            for y in range(place["y"], place["y"] + place["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps panel {cells[(x, y)]}"
                cells[(x, y)] = panel["id"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(refs) == len(set(refs)) and all(target["expr"] for target in panel["targets"])
        host_filtered = [target for target in panel["targets"] if '=~"$host"' in target["expr"]]
        assert host_filtered or "last_run" in panel["targets"][0]["expr"], panel["title"]


def test_the_dashboard_reads_only_metrics_and_labels_the_textfile_has(faulty):
    _, samples, _ = faulty
    names = {name for name, _, _ in samples}
    labels = {label for _, sample_labels, _ in samples for label in sample_labels} | set(SCRAPE_LABELS)
    read: dict[str, set[str]] = defaultdict(set)
    for expr, legend in _queries(_dashboard()):
        metrics = _metric_names(expr)
        assert metrics, f"no metric in {expr}"
        assert metrics <= names, f"{expr}: {sorted(metrics - names)} not in the textfile"
        assert _label_names(expr, legend) <= labels, f"{expr}: {sorted(_label_names(expr, legend) - labels)}"
        for metric in metrics:
            read[metric].add(expr)
    # the figures, their references, the findings and the last run are all on it
    assert {"gpudiag_gemm_tflops", "gpudiag_membw_gbps", "gpudiag_pcie_gbps", "gpudiag_link_gbps", "gpudiag_finding",
            "gpudiag_finding_value", "gpudiag_finding_reference", "gpudiag_host_status",
            "gpudiag_last_run_timestamp_seconds", "gpudiag_last_run_exit_code"} <= set(read)
    # and a misspelt name would be seen
    assert _metric_names('gpudiag_gemm_tflop{Hostname=~"$host"} / on (gpu) x') == {"gpudiag_gemm_tflop", "x"}


def _prometheus_quantile(q: float, values: list[float]) -> float:
    """PromQL's quantile(): linear interpolation between the closest ranks."""
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    lower = int(rank)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] * (1 - (rank - lower)) + ordered[upper] * (rank - lower)


@needs_promtool
def test_the_dashboards_queries_parse_and_its_panels_show_the_sweep(faulty, tmp_path: Path):
    _, samples, _ = faulty
    queries = [expr.replace("$host", ".*") for expr, _ in _queries(_dashboard()) if "label_values" not in expr]
    recording = tmp_path / "dashboard-queries.yml"
    recording.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{index}", "expr": expr} for index, expr in enumerate(queries)]}]}))
    checked = subprocess.run([PROMTOOL, "check", "rules", str(recording)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # Three panels evaluated: the count of fail findings; GEMM of the fleet median, where the
    # slowest GPU is node003's GPU 5 at about 0.8; the findings' deficits against their references.
    fails = next(expr for expr in queries if expr.startswith('count(gpudiag_finding{severity="fail"'))
    slowest = next(expr for expr in queries if expr.startswith("bottomk(16, gpudiag_gemm_tflops"))
    gemm = [(labels, value) for name, labels, value in samples if name == "gpudiag_gemm_tflops"]
    median = _prometheus_quantile(0.5, [value for _, value in gemm])  # one model, one dtype
    ratios = sorted(((value / median, labels) for labels, value in gemm), key=lambda pair: pair[0])[:16]
    assert (ratios[0][1]["Hostname"], ratios[0][1]["gpu"]) == ("node003", "5") and 0.75 < ratios[0][0] < 0.85
    expected = [{"labels": _selector("", {**labels, **SCRAPE_LABELS}), "value": ratio} for ratio, labels in ratios]
    # and each finding's figure joins its reference one to one: how far below it, in percent
    below = next(expr for expr in queries if expr.startswith("100 * (1 - gpudiag_finding_value"))
    references = {tuple(sorted(labels.items())): value for name, labels, value in samples
                  if name == "gpudiag_finding_reference"}
    deficits = [{"labels": _selector("", {**{key: value for key, value in labels.items() if value}, **SCRAPE_LABELS}),
                 "value": 100 * (1 - value / references[tuple(sorted(labels.items()))])}
                for name, labels, value in samples if name == "gpudiag_finding_value"]
    assert len(deficits) == 3 and all(15 < deficit["value"] < 60 for deficit in deficits)
    unit = tmp_path / "dashboard.test.json"
    unit.write_text(json.dumps({"rule_files": [str(recording)], "tests": [
        {"interval": "1m", "input_series": _input_series(samples, 20), "promql_expr_test": [
            {"expr": fails, "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": len(FAILING)}]},
            {"expr": slowest, "eval_time": "5m", "exp_samples": expected},
            {"expr": below, "eval_time": "5m", "exp_samples": deficits}]}]}))
    result = subprocess.run([PROMTOOL, "test", "rules", str(unit)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
