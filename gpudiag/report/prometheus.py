"""A sweep as a Prometheus node_exporter textfile (``gpudiag sweep --prom-file PATH.prom``).

node_exporter's textfile collector, run on the controller with
``--collector.textfile.directory``, exposes every ``*.prom`` file there. The file holds the
last sweep's per-GPU figures (GEMM TFLOP/s, memory and PCIe bandwidth), per-link figures, its
findings and each host's status (each a series of value 1), the figure and reference of each
finding that has them (``gpudiag_finding_value``, ``gpudiag_finding_reference``: what the sweep
measured and what it judged it against), and when the sweep finished and its exit code.
prometheus_client formats it (a fresh CollectorRegistry per chunk of samples, so a 10,000-node
sweep's half a million samples are never all text at once); it is written into a temporary
file beside the target, then renamed over it, so the collector never reads half a file.

Labels are dcgm-exporter's, so gpudiag's series join with DCGM's on the same GPU:
``Hostname`` (the node's own hostname as its facts probe read it, which is what dcgm-exporter
running on the node reports; the host's name in the sweep where the node did not answer, or
where the hostname it gave names another host of the sweep: a node never speaks for another),
``gpu`` (the GPU's NVML index, as dcgm-exporter numbers GPUs; from the facts' map of CUDA's
numbers to NVML's where NVML's identity was not read, and empty where neither says: CUDA's own
number shifts after a GPU is lost), ``UUID``, ``pci_bus_id`` and ``modelName`` (NVML's name).
``host`` is the host's name as the sweep was given it. node_exporter adds its own ``instance``
label, the controller's: join on ``Hostname`` and ``gpu`` (or ``UUID``), not on ``instance``.

A finding of no host (a slow switch link or switch, a job's network below its line rate) names no
node, so it carries no ``Hostname``: it is a ``gpudiag_network_finding`` series (with its figure and
reference as ``gpudiag_network_finding_value`` and ``_reference``), labelled with the part:
``fabric_rail`` (the rail whose plane it is in), ``switch`` and ``port`` and ``peer_switch`` and
``peer_port`` (a link's two ends; a switch alone; empty for a set of parts the tests could not split
and for the network as a whole) and ``where`` (the part in the reports' words).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from ..analysis.identity import HostGpus
from ..errors import InputError
from ..hosts import another_host_named
from ..records import device_index
from ..schema.fields import is_finite_number
from ..schema.times import parse_time
from . import check_writable, write_report
from .phrasing import fabric_ends, fabric_rail, hostless_location
from .summary import completeness_of

PROM_SUFFIX = ".prom"
GPU_LABELS = ("host", "Hostname", "gpu", "UUID", "pci_bus_id", "modelName")
FINDING_LABELS = ("host", "Hostname", "gpu", "UUID", "pci_bus_id", "peer", "kind", "severity", "action", "metric")
# A finding of no host (a part of the fabric between switches, a job's network as a whole) names
# no node: its own family, labelled with the part (its rail's plane, the switch and port at each
# end of a link, or the switch) and ``where`` in words, never with a made-up Hostname.
NETWORK_FINDING_LABELS = ("fabric_rail", "switch", "port", "peer_switch", "peer_port", "where", "kind", "severity",
                          "action", "metric")
# A finding's figure and reference carry its labels and these two, so value / reference divides series by series.
FIGURE_SUFFIX_LABELS = ("unit", "reference_source")
FIGURE_LABELS = (*FINDING_LABELS, *FIGURE_SUFFIX_LABELS)
NETWORK_FIGURE_LABELS = (*NETWORK_FINDING_LABELS, *FIGURE_SUFFIX_LABELS)
# Samples formatted at a time: a 10,000-node sweep has some 500,000, and the text of all of
# them at once (prometheus_client formats a whole registry in memory) would take ~250 MB.
CHUNK_SAMPLES = 10_000
# Per-GPU gauges: probe -> (metric name, help, extra label from the record's params).
_GPU_GAUGES: dict[str, tuple[str, str, str | None]] = {
    "gemm": ("gpudiag_gemm_tflops", "Matrix-multiply throughput of one GPU in the last sweep, TFLOP/s.", "dtype"),
    "membw": ("gpudiag_membw_gbps", "Device memory copy bandwidth of one GPU in the last sweep, GB/s (bytes read "
              "and written per second, 1e9).", None),
    "pcie": ("gpudiag_pcie_gbps", "Host-device copy bandwidth of one GPU over PCIe in the last sweep, GB/s (1e9 "
             "bytes per second), by direction (h2d, d2h).", "direction"),
}


@dataclass
class _Family:
    """One gauge: its name, help, label names and samples (label values, value), in order."""

    name: str
    documentation: str
    labels: tuple[str, ...]
    samples: list[tuple[tuple[str, ...], float]] = field(default_factory=list)


class _Identity:
    """What a GPU is called where dcgm-exporter names it: NVML index, PCI bus id, model name."""

    __slots__ = ("gpu", "model", "pci_bus_id")

    def __init__(self, gpu: int | None, pci_bus_id: str, model: str) -> None:
        self.gpu, self.pci_bus_id, self.model = gpu, pci_bus_id, model


class _Chunk:
    """A prometheus_client collector of some samples of one family (CollectorRegistry.register)."""

    def __init__(self, family: _Family, samples: list[tuple[tuple[str, ...], float]]) -> None:
        self._family, self._samples = family, samples

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The family with this chunk's samples."""
        gauge = GaugeMetricFamily(self._family.name, self._family.documentation, labels=self._family.labels)
        for labels, value in self._samples:
            gauge.add_metric(labels, value)
        yield gauge


def check_prom_file(path: str) -> None:
    """Raise InputError unless ``path`` names a ``.prom`` file that can be written (the textfile
    collector reads no other), before a sweep touches any node."""
    if not path.endswith(PROM_SUFFIX):
        raise InputError(f"--prom-file {path}: node_exporter's textfile collector reads only files ending in "
                         f"{PROM_SUFFIX}; give a path such as {Path(path).with_suffix(PROM_SUFFIX)}")
    check_writable(path, "--prom-file")


def write_prom_file(document: Mapping[str, Any], path: str) -> None:
    """Write the sweep ``document`` (the sweep document's fields; its ``hosts`` any iterable of
    host entries, read one at a time, such as a SweepResult's HostOutcomes) to ``path`` as a
    textfile: a temporary file beside it, then renamed over it. Raises OutputError when it
    cannot be written."""
    write_report(prom_text(document), path)


def prom_text(document: Mapping[str, Any]) -> Iterator[str]:
    """The textfile's text in pieces, each family's samples formatted by prometheus_client
    (``generate_latest`` of a fresh CollectorRegistry) CHUNK_SAMPLES at a time."""
    for family in sweep_families(document):
        _one_per_series(family)
        for start in range(0, max(len(family.samples), 1), CHUNK_SAMPLES):
            registry = CollectorRegistry()
            registry.register(_Chunk(family, family.samples[start:start + CHUNK_SAMPLES]))
            text = generate_latest(registry).decode()
            # A family's HELP and TYPE lines come once, before its first sample.
            yield text if start == 0 else text.split("\n", 2)[2]


def _one_per_series(family: _Family) -> None:
    """Keep the first sample of each label set: a textfile with one series twice is refused whole by
    node_exporter's collector (and a GPU's figures already keep their lowest: ``_gpu_figures``)."""
    seen: set[tuple[str, ...]] = set()
    kept = []
    for sample in family.samples:
        if sample[0] not in seen:
            seen.add(sample[0])
            kept.append(sample)
    family.samples = kept


def sweep_families(document: Mapping[str, Any]) -> list[_Family]:
    """The gauges of one sweep document (see the module), its hosts read one at a time. Host
    entries carry full records (``results``), or a compact document's ``telemetry`` tables for
    the GPUs' identity."""
    gpu_families = {probe: _Family(name, text, (*GPU_LABELS, *([extra] if extra else [])))
                    for probe, (name, text, extra) in _GPU_GAUGES.items()}
    status = _Family("gpudiag_host_status", "1 for each host, labelled with its status in the last sweep (ok, "
                     "unreachable, auth_failed, timeout, probe_error, ...).", ("host", "Hostname", "status"))
    hostnames: dict[str, str] = {}
    nvml_index: dict[str, int | None] = {}
    hosts = document.get("hosts") or ()
    # Read once where the hosts come one at a time: the sweep that wrote them set aside a node
    # naming another already (gpudiag.run.impostors); a list is checked here too.
    labels = {str(entry["host"]) for entry in hosts} if isinstance(hosts, Sequence) else None
    for entry in hosts:
        host = str(entry["host"])
        facts = entry.get("facts") or {}
        hostname = hostnames[host] = own_hostname(host, facts, labels)
        status.samples.append(((host, hostname, str(entry.get("status"))), 1.0))
        records = entry.get("results") or []
        model = str(facts.get("gpu_model") or "")
        identities = _identities(records, entry.get("telemetry") or {}, model)
        nvml_index.update((uuid, identity.gpu) for uuid, identity in identities.items())
        _gpu_figures(gpu_families, (host, hostname, model), records, identities, HostGpus(facts))
    return [*gpu_families.values(), status, _links(document.get("links") or (), hostnames),
            *_findings(document.get("findings") or (), hostnames, nvml_index), *_last_run(document)]


def own_hostname(host: str, facts: Mapping[str, Any], labels: Iterable[str] | None) -> str:
    """The ``Hostname`` of ``host``'s series: the hostname its facts give (dcgm-exporter's, for
    the join), unless it names another host of the sweep, ``labels`` (a node never speaks for
    another: its series then carry its own name in the sweep), or it gave none."""
    said = facts.get("hostname")
    if not isinstance(said, str) or not said:
        return host
    return host if labels is not None and another_host_named(said, host, labels) is not None else said


def _identities(records: Iterable[Mapping[str, Any]], telemetry: Mapping[str, Any],
                model: str) -> dict[str, _Identity]:
    """Each GPU's identity by UUID, from NVML's identity records (a full document) or the
    telemetry tables of a compact one."""
    found: dict[str, _Identity] = {}
    for record in records:
        if record.get("probe") == "telemetry" and record.get("metric") == "identity" and record.get("gpu_uuid"):
            found[str(record["gpu_uuid"])] = _identity(record.get("device"), record.get("details") or {}, model)
    for device, table in telemetry.items():
        details = (table.get("details") or {}).get("identity") or {}
        if table.get("gpu_uuid") and str(table["gpu_uuid"]) not in found:
            found[str(table["gpu_uuid"])] = _identity(device, details, model)
    return found


def _identity(device: object, details: Mapping[str, Any], model: str) -> _Identity:
    """A GPU's identity from NVML's identity details (its device, ``gpu:N``, where they lack the index)."""
    index = details.get("nvml_index")
    return _Identity(index if isinstance(index, int) else device_index(device), str(details.get("pci_bus_id") or ""),
                     str(details.get("name") or model))


def _gpu_figures(families: Mapping[str, _Family], names: tuple[str, str, str], records: Iterable[Mapping[str, Any]],
                 identities: Mapping[str, _Identity], gpus: HostGpus) -> None:
    """Add each ok GEMM, memory and PCIe figure of a GPU (not a CPU's) to its family; ``names``:
    the host's name in the sweep, its own hostname and its GPU model (for a GPU NVML did not name).
    ``gpu`` is NVML's index (from NVML's identity, else the facts' map of CUDA's numbers to
    NVML's); empty where neither knows it: after a GPU is lost CUDA renumbers the rest, and its
    number would label a healthy GPU's neighbour."""
    host, hostname, model = names
    placed: dict[tuple[str, tuple[str, ...]], int] = {}  # where each series is: one per label set, its lowest figure
    for record in records:
        probe = str(record.get("probe"))
        cuda_index = device_index(record.get("device"))
        if probe not in families or record.get("status") != "ok" or record.get("value") is None or cuda_index is None:
            continue
        params = record.get("params") or {}
        if probe == "membw" and params.get("memory", "device") != "device":
            continue
        uuid = str(record.get("gpu_uuid") or "")
        known = gpus.of(record.get("device"), uuid or None)
        identity = identities.get(uuid) or _Identity(known.nvml_index, known.pci_bus_id or "", model)
        gpu = known.nvml_index if identity.gpu is None else identity.gpu
        extra = _GPU_GAUGES[probe][2]
        labels = (host, hostname, "" if gpu is None else str(gpu), uuid, identity.pci_bus_id, identity.model)
        series = (*labels, str(params.get(extra, ""))) if extra else labels
        samples, at = families[probe].samples, placed.get((probe, series))
        if at is None:
            placed[(probe, series)] = len(samples)
            samples.append((series, float(record["value"])))
        else:  # records that differ in what no label shows (a shape): the lowest, so no alert is masked
            samples[at] = (series, min(samples[at][1], float(record["value"])))


def _links(links: Iterable[Mapping[str, Any]], hostnames: Mapping[str, str]) -> _Family:
    """A pair's figure per rail and backend: the mean of its measured runs (screen, confirm)."""
    runs: dict[tuple[str, str, str, str], list[float]] = {}
    for link in links:
        if link.get("value") is None:
            continue  # a pair that could not be tested is a link_error finding
        a, b = sorted((str(link["a"]), str(link["b"])))
        rail = "" if link.get("rail") is None else str(link["rail"])
        runs.setdefault((a, b, rail, str(link.get("backend") or "")), []).append(float(link["value"]))
    family = _Family("gpudiag_link_gbps", "Node-to-node bandwidth of a pair in the last sweep, Gbit/s (the mean of "
                     "its runs), per rail and backend; Hostname and peer name its two ends.",
                     ("host", "Hostname", "peer_host", "peer", "rail", "backend"))
    family.samples.extend(((a, hostnames.get(a, a), b, hostnames.get(b, b), rail, backend), sum(values) / len(values))
                          for (a, b, rail, backend), values in runs.items())
    return family


def _findings(findings: Iterable[Mapping[str, Any]], hostnames: Mapping[str, str],
              nvml_index: Mapping[str, int | None]) -> list[_Family]:
    """A series per finding, its GPU named by NVML's index where its UUID is known; and, for a
    finding with both, its measured figure and the reference it was judged against (in its unit).
    A finding of no host goes into the ``gpudiag_network_finding`` families instead (labelled
    with its part of the fabric)."""
    families = _finding_families("gpudiag_finding", FINDING_LABELS, FIGURE_LABELS, (
        "1 for each finding of the last sweep about a node, its GPUs or its links: kind, severity (fail, warn) and "
        "action (drain, reset_gpu, reboot, inspect, watch); gpu and peer empty where they do not apply."))
    network = _finding_families("gpudiag_network_finding", NETWORK_FINDING_LABELS, NETWORK_FIGURE_LABELS, (
        "1 for each finding of the last sweep about the network rather than a node: a switch link (switch, port, "
        "peer_switch, peer_port), a switch (switch), a set of parts the tests could not split or a job's network as "
        "a whole (those empty); fabric_rail the rail's plane, where the part in words."))
    for finding in findings:
        if finding.get("host") is None:
            _add_finding(network, _network_finding_labels(finding), finding)
        else:
            _add_finding(families, _finding_labels(finding, hostnames, nvml_index), finding)
    return [*families, *network]


def _finding_families(name: str, labels: tuple[str, ...], figure_labels: tuple[str, ...],
                      documentation: str) -> tuple[_Family, _Family, _Family]:
    """A finding family (``name``), its figure's (``name_value``) and its reference's (``name_reference``)."""
    return (_Family(name, documentation, labels),
            _Family(f"{name}_value", "The figure a finding of the last sweep measured, in its unit (a finding with a "
                    "figure and a reference only).", figure_labels),
            _Family(f"{name}_reference", "The reference a finding's figure was judged against, in its unit; "
                    "reference_source: fleet, baseline, sku, siblings, line_rate or pairs.", figure_labels))


def _add_finding(families: tuple[_Family, _Family, _Family], labels: tuple[str, ...],
                 finding: Mapping[str, Any]) -> None:
    """The finding's series of 1, and its figure and reference where it has both."""
    family, value, reference = families
    family.samples.append((labels, 1.0))
    measured, expected = finding.get("value"), finding.get("reference")
    if is_finite_number(measured) and is_finite_number(expected):
        figure = (*labels, str(finding.get("unit") or ""), str(finding.get("reference_source") or ""))
        value.samples.append((figure, float(measured)))
        reference.samples.append((figure, float(expected)))


def _finding_labels(finding: Mapping[str, Any], hostnames: Mapping[str, str],
                    nvml_index: Mapping[str, int | None]) -> tuple[str, ...]:
    """A finding's FINDING_LABELS values."""
    host, peer = str(finding.get("host") or ""), finding.get("peer")
    uuid = str(finding.get("gpu_uuid") or "")
    gpu = nvml_index.get(uuid)
    if gpu is None:
        gpu = finding.get("gpu")
    return (host, hostnames.get(host, host), "" if gpu is None else str(gpu), uuid,
            str(finding.get("pci_bus_id") or ""), "" if peer is None else hostnames.get(str(peer), str(peer)),
            *_verdict_labels(finding))


def _network_finding_labels(finding: Mapping[str, Any]) -> tuple[str, ...]:
    """A finding of no host's NETWORK_FINDING_LABELS values."""
    switch, port, peer_switch, peer_port = fabric_ends(finding)
    rail = fabric_rail(finding)
    return ("" if rail is None else str(rail), switch, port, peer_switch, peer_port, hostless_location(finding),
            *_verdict_labels(finding))


def _verdict_labels(finding: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """kind, severity, action and metric: the last labels of every finding family."""
    return (str(finding.get("kind")), str(finding.get("severity")), str(finding.get("action")),
            str(finding.get("metric") or ""))


def _last_run(document: Mapping[str, Any]) -> list[_Family]:
    """When the sweep finished, its exit status and its id."""
    finished = _epoch_s(document.get("finished_at")) or _epoch_s(document.get("started_at")) or 0.0
    summary = document.get("summary") or {}
    return [_Family("gpudiag_last_run_timestamp_seconds", "When the last sweep finished, in seconds since the epoch.",
                    (), [((), finished)]),
            _Family("gpudiag_last_run_exit_code", "The last sweep's exit status (0 all checked, 1 a fail finding, 3 "
                    "not all checked, 130 interrupted).", (), [((), float(summary.get("exit_code", 0)))]),
            _Family("gpudiag_last_run_info", "1, labelled with the last sweep's id (gpudiag report SWEEP_ID shows it).",
                    ("sweep_id",), [((str(document.get("sweep_id") or ""),), 1.0)]),
            _Family("gpudiag_last_run_complete", "1 when the last sweep measured every host it planned and was "
                    "analysed to its end; 0 when it was interrupted (a host with no finding is then no healthy host).",
                    (), [((), 0.0 if completeness_of(document) is not None else 1.0)])]


def _epoch_s(text: object) -> float | None:
    """``2026-11-21T10:15:41Z`` in seconds since the epoch; None when it is not such a time."""
    if not isinstance(text, str):
        return None
    moment = parse_time(text)
    return None if moment is None else moment.timestamp()
