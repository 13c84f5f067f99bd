"""A small simulated fleet in which one node misbehaves: the shared harness of the hostile-record
tests (tests/unit/controller/test_fuzz_records.py, tests/unit/controller/analysis/test_node_checks.py).

``ReplayConnector`` implements the sweep's Connector and Session protocols: every node answers the
bundle's command line with what the simulated fleet prints for it (computed once per node and
command line, then replayed), except the nodes given text of their own, which answer with that
text whatever they are asked. ``sweep_and_report`` runs the controller's real path on it: the
sweep (read each host as it finishes), the analysis, the re-test of the suspects, the analysis
again, and every output (the sweep document in both details as strict JSON, the text, markdown,
JSON and HTML reports, the Prometheus textfile) — so a hostile node's output goes through each
reader the controller has.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ClusterShell.NodeSet import NodeSet

from gpudiag.analysis import SweepReader, analyse
from gpudiag.analysis.thresholds import default_thresholds
from gpudiag.bundle import Bundle, locate_bundle
from gpudiag.hosts import HostSpec
from gpudiag.report import render_report
from gpudiag.report.detail import COMPACT, FULL
from gpudiag.report.document import document_chunks
from gpudiag.report.prometheus import prom_text
from gpudiag.run.fanout import SweepOptions, SweepResult, probe_hosts
from gpudiag.run.hostprobe import ProbeOptions
from gpudiag.run.outcome import HostOutcome
from gpudiag.run.progress import QuietProgress
from gpudiag.sim import SimulatedConnector, parse_fleet
from gpudiag.transport import CommandResult

# Eight nodes: as many as min_peers asks for a fleet reference, so the fleet level is in play.
NODES = 8
# One planted slow GPU: the fleet's one real finding, which no other node's output may change.
SLOW_HOST, SLOW_GPU = "node003", 2
FLEET = {"nodes": NODES, "seed": 11, "faults": [{"kind": "slow_gpu", "host": SLOW_HOST, "gpu": SLOW_GPU,
                                                 "factor": 0.75}]}
PROBES = ("facts", "telemetry", "gemm", "membw", "p2p", "pcie", "smclock")
FindingKey = tuple[str, str, str, Any, Any]


class ReplaySession:
    """One node: the fleet's output for each command line (computed once), or its own text."""

    def __init__(self, connector: ReplayConnector, host: str) -> None:
        self._connector = connector
        self._host = host

    def prepare(self, bundle: Bundle) -> None:
        return None

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        own = self._connector.texts.get(self._host)
        if own is not None:
            return CommandResult(exit_status=0, stdout=own, stderr="", timed_out=False, duration_s=1.0)
        return self._connector.fleet_output(self._host, tuple(argv), timeout_s)

    def is_open(self) -> bool:
        return True

    def cancel(self) -> None:
        return None

    def close(self) -> None:
        return None


class ReplayConnector:
    """The fleet's nodes, those in ``texts`` answering with their own text."""

    def __init__(self, cache: OutputCache, texts: Mapping[str, str] | None = None) -> None:
        self.texts = dict(texts or {})
        self._cache = cache

    def connect(self, host: HostSpec, within_s: float | None = None) -> ReplaySession:
        return ReplaySession(self, host.host)

    def fleet_output(self, host: str, argv: tuple[str, ...], timeout_s: float) -> CommandResult:
        return self._cache.output(host, argv, timeout_s)

    def close(self) -> None:
        return None


class OutputCache:
    """What each simulated node prints for each command line: its first answer, kept (a re-test
    of the same probes gets the answer a re-test got the first time)."""

    def __init__(self, fleet: Mapping[str, Any] = FLEET) -> None:
        self._simulated = SimulatedConnector(parse_fleet(dict(fleet), "hostile-fleet"))
        self._lock = threading.Lock()
        self._outputs: dict[tuple[str, tuple[str, ...]], CommandResult] = {}

    def output(self, host: str, argv: tuple[str, ...], timeout_s: float) -> CommandResult:
        with self._lock:
            kept = self._outputs.get((host, argv))
            if kept is None:
                kept = self._simulated.connect(HostSpec(host)).run(argv, timeout_s)
                self._outputs[(host, argv)] = kept
            return kept

    def first_pass_text(self, host: str) -> str:
        """What ``host`` prints for the first pass's command line."""
        return self.output(host, tuple(first_pass_options().bundle_argv()), 600.0).stdout


def first_pass_options() -> ProbeOptions:
    return ProbeOptions(names=PROBES, duration_s=0.5)


def host_names() -> list[str]:
    return [f"node{number:03d}" for number in range(1, NODES + 1)]


@dataclass(frozen=True)
class Outputs:
    """A sweep's result and every output written from it (text by format)."""

    result: SweepResult
    reports: Mapping[str, str]


def sweep_and_report(connector: ReplayConnector, hosts: Sequence[str] | None = None) -> Outputs:
    """The controller's path over ``connector``'s nodes (see the module docstring)."""
    specs = [HostSpec(name) for name in hosts or host_names()]
    options = SweepOptions(probe=first_pass_options(), fanout=4)
    thresholds = default_thresholds()
    reader = SweepReader()

    def read(outcome: HostOutcome) -> None:
        if outcome.ok:
            outcome.reading = reader.read(outcome.records())

    bundle = locate_bundle()
    first = probe_hosts(specs, options, connector, bundle, QuietProgress(), on_host_done=read)
    analysis = analyse(first.hosts, thresholds)
    retest: list[HostOutcome] | None = None
    if analysis.suspects:
        names = {s.measurement.host for s in analysis.suspects}
        probes = tuple(sorted({s.measurement.probe for s in analysis.suspects}))
        again_options = dataclasses.replace(options, probe=dataclasses.replace(options.probe, names=probes))
        again = probe_hosts([spec for spec in specs if spec.host in names], again_options, connector, bundle,
                          QuietProgress())
        facts = {host.host: host.facts for host in first.hosts}
        retest = [host.with_facts(facts[host.host]) for host in again.hosts]
        analysis = analyse(first.hosts, thresholds, retest_hosts=retest, retested=True)
    result = dataclasses.replace(first, findings=analysis.findings, impact=analysis.impact.to_dict(),
                                 comparison=analysis.comparison_counts())
    # The reports of the document the sweep command renders (records left out), and the HTML
    # report of the whole document (its heat map reads the records), as ``gpudiag demo`` writes it.
    summary = result.to_dict(records=False)
    reports = {fmt: render_report(summary, fmt) for fmt in ("text", "md", "json")}
    reports["html"] = render_report(result.to_dict(), "html")
    for detail in (FULL, COMPACT):
        reports[f"document-{detail}"] = "".join(document_chunks(result, detail))
    reports["prom"] = "".join(prom_text({**result.to_dict(records=False), "hosts": result.hosts}))
    return Outputs(result, reports)


def strict_json(text: str) -> Any:
    """``text`` parsed as strict JSON (RFC 8259): a NaN, Infinity or -Infinity token raises ValueError."""

    def refuse(token: str) -> Any:
        raise ValueError(f"not JSON: the bare token {token}")

    return json.loads(text, parse_constant=refuse)


def finding_keys(result: SweepResult, leave_out: str | None = None) -> list[FindingKey]:
    """Each finding's (kind, severity, host, GPU, metric), sorted; without those that name only
    ``leave_out`` (a finding that names it among other hosts is kept: it concerns them too)."""
    keys = []
    for finding in result.findings:
        named = set(NodeSet(finding.host)) | ({finding.peer} if finding.peer else set())
        if leave_out is not None and named <= {leave_out}:
            continue
        keys.append((finding.kind, finding.severity, finding.host, finding.gpu, finding.metric))
    return sorted(keys, key=repr)


def records_of(text: str) -> list[dict[str, Any]]:
    """The JSON records of a node's output, one per line."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def lines_of(records: Sequence[Mapping[str, Any]]) -> str:
    """Records back to a node's output; NaN and Infinity written as the bare tokens Python's json
    writes (a hostile node may print them)."""
    return "".join(json.dumps(record, allow_nan=True) + "\n" for record in records)


def is_finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
