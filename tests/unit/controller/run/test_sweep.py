"""probe_hosts's accounting: every host once, in order, with its status; findings and exit codes.

The connector is a test transport implementing the Connector protocol: some hosts fail to
connect the way SSH fails, the others run the real probe bundle on this machine.
"""

import io
import json
import sys
import threading
from pathlib import Path

from gpudiag.bundle import locate_bundle
from gpudiag.exitcodes import ExitCode
from gpudiag.hosts import HostSpec
from gpudiag.report.document import write_sweep_json
from gpudiag.run.fanout import SweepOptions, probe_hosts
from gpudiag.run.hostprobe import ProbeOptions
from gpudiag.run.progress import PlainProgress
from gpudiag.transport import AuthFailed, HostKeyChanged, Unreachable
from gpudiag.transport.local import LocalSession

FAILURES = {"node03": Unreachable("node03:22: Connection refused"),
            "node05": AuthFailed("root@node05:22 rejected every key offered"),
            "node06": HostKeyChanged("[node06]:22: the host key differs")}


class ScriptedConnector:
    def __init__(self) -> None:
        self.closed = False
        self.connected: list[str] = []
        self._lock = threading.Lock()

    def connect(self, host: HostSpec, within_s: float | None = None):
        with self._lock:
            self.connected.append(host.label)
        if host.label in FAILURES:
            raise FAILURES[host.label]
        return LocalSession()

    def close(self) -> None:
        self.closed = True


def _options(**probe) -> SweepOptions:
    return SweepOptions(probe=ProbeOptions(names=("facts",), python=sys.executable, deadline_s=60, **probe),
                        fanout=3)


def test_every_host_appears_once_in_order_with_its_status_and_failures_become_unchecked():
    hosts = [HostSpec(f"node{i:02d}", None, None) for i in range(1, 8)]
    connector = ScriptedConnector()
    stream = io.StringIO()
    result = probe_hosts(hosts, _options(), connector, locate_bundle(), PlainProgress(stream, interval_s=0))
    assert [h.host for h in result.hosts] == [h.label for h in hosts]
    assert {h.host: h.status for h in result.hosts} == {
        "node01": "ok", "node02": "ok", "node03": "unreachable", "node04": "ok", "node05": "auth_failed",
        "node06": "host_key_changed", "node07": "ok"}
    assert sorted(f.host for f in result.findings) == ["node03", "node05", "node06"]
    assert all(f.kind == "unchecked" and f.severity == "warn" for f in result.findings)
    assert result.exit_code == ExitCode.UNCHECKED
    assert not connector.closed  # the caller closes it: later phases reuse it
    ok = next(h for h in result.hosts if h.host == "node01")
    assert ok.facts["gpu_count"] == 0 and ok.facts["hostname"]
    assert "7/7 hosts done · 3 failed" in stream.getvalue()


def test_the_document_follows_the_contract(tmp_path: Path):
    hosts = [HostSpec("node01", None, None), HostSpec("node03", None, None)]
    result = probe_hosts(hosts, _options(), ScriptedConnector(), locate_bundle(), PlainProgress(io.StringIO()))
    target = tmp_path / "sweep.json"
    write_sweep_json(result, str(target))
    document = json.loads(target.read_text())
    assert document["schema"] == "gpudiag.sweep/1"
    assert set(document) >= {"sweep_id", "started_at", "finished_at", "hosts", "links", "findings", "summary"}
    assert document["started_at"].endswith("Z") and document["finished_at"] >= document["started_at"]
    first, second = document["hosts"]
    assert set(first) == {"host", "status", "error", "duration_s", "facts", "results"}
    assert first["status"] == "ok" and first["error"] is None
    assert {"gpu_model", "gpu_count", "driver"} <= set(first["facts"])
    assert second["status"] == "unreachable" and "Connection refused" in second["error"]
    (finding,) = document["findings"]
    assert finding["kind"] == "unchecked" and finding["host"] == "node03" and finding["peer"] is None
    assert document["summary"] == {"hosts_total": 2, "hosts_ok": 1, "findings": 1, "unchecked": 1, "exit_code": 3}


def test_a_bundle_that_prints_garbage_is_a_probe_error(tmp_path: Path):
    garbage = tmp_path / "python"
    garbage.write_text("#!/bin/sh\necho 'Illegal instruction'\n")
    garbage.chmod(0o755)
    options = SweepOptions(probe=ProbeOptions(python=str(garbage)), fanout=2)
    result = probe_hosts([HostSpec("node01", None, None)], options, ScriptedConnector(), locate_bundle(),
                       PlainProgress(io.StringIO()))
    (host,) = result.hosts
    assert host.status == "probe_error" and "not a JSON record" in host.error


def test_a_host_that_overruns_its_time_limit_is_a_timeout(tmp_path: Path):
    hang = tmp_path / "python"
    hang.write_text("#!/bin/sh\nsleep 30\n")
    hang.chmod(0o755)
    options = SweepOptions(probe=ProbeOptions(python=str(hang)), fanout=2, host_timeout_s=1)
    result = probe_hosts([HostSpec("node01", None, None)], options, ScriptedConnector(), locate_bundle(),
                       PlainProgress(io.StringIO()))
    (host,) = result.hosts
    assert host.status == "timeout" and host.duration_s < 10


def test_each_host_runs_the_probes_the_options_name_for_it_and_the_rest_every_probe(tmp_path: Path):
    # A re-test runs each host's own suspects' probes: six P2P runs for one host's pair are no
    # reason for every GEMM suspect's host to run P2P six times too.
    from gpudiag.run.progress import QuietProgress
    from gpudiag.sim import FleetFile

    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": 3, "name_format": "n{}", "seed": 1}))
    stand_in = FleetFile(str(fleet))
    connector = stand_in.connector()
    options = SweepOptions(ProbeOptions(names=("gemm", "p2p")), host_probes={"n1": ("gemm",), "n2": ("p2p",)})
    try:
        result = probe_hosts(stand_in.host_specs(), options, connector, locate_bundle(), QuietProgress())
    finally:
        connector.close()
    probed = {host.host: {record["probe"] for record in host["results"]} for host in result.hosts}
    assert probed == {"n1": {"gemm"}, "n2": {"p2p"}, "n3": {"gemm", "p2p"}}
    assert options.probe_of("n3") is options.probe and options.probe_of("n1").names == ("gemm",)
