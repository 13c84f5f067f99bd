"""Every measured figure of each GPU (and each host device) of a sweep document, against the
reference its key was judged by (the document's ``references``; the fleet median of the key in a
document without them), for the HTML report's device grid (``heatmap``).

A figure's key is its probe, metric, unit and parameters and the model of the device (the GPU
model for a GPU, the CPU model for ``cpu``): a figure is read only against figures of the same key,
never pooled across SKUs or parameters (docs/sweep.md, how results are judged). Several results
of one device and key give their median. P2P bandwidth comes from the compact document's ``p2p``
matrices (or from P2P records in a full one): a GPU's figure is the median of the pairs it is an
end of, so a GPU with an NVLink down is low while its partners, slow with it alone, are not.
Every metric here is better higher.

Pure and tolerant of stored documents: a missing key counts as null.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..analysis.identity import HostGpus
from ..analysis.measurements import HOST_DEVICES
from ..records import device_index
from ..schema.fields import is_finite_number
from .phrasing import OK, Document, _hosts

# The column of a host device (``cpu``, ``host``) in the grid; GPUs are their NVML index.
HOST_COLUMN = -1
P2P_PROBE = "p2p"


@dataclass(frozen=True)
class GridMetric:
    """A figure the grid shows: its label in a cell, and which records it takes (probe, metric and,
    where the probe measures both ways, the ``direction`` parameter)."""

    label: str
    probe: str
    metric: str
    direction: str | None = None

    def takes(self, result: Mapping[str, Any]) -> bool:
        params = result.get("params") or {}
        return (result.get("probe") == self.probe and result.get("metric") == self.metric
                and (self.direction is None or params.get("direction") == self.direction))


# The grid's metrics, in the order a cell's title lists them.
GRID_METRICS = (
    GridMetric("GEMM", "gemm", "tflops"),
    GridMetric("mem", "membw", "bandwidth"),
    GridMetric("H2D", "pcie", "bandwidth", "h2d"),
    GridMetric("D2H", "pcie", "bandwidth", "d2h"),
    GridMetric("P2P", P2P_PROBE, "bandwidth"),
    GridMetric("SM clock", "smclock", "sm_clock"),
)
METRIC_ORDER = {metric.label: index for index, metric in enumerate(GRID_METRICS)}
_BY_PROBE = {(metric.probe, metric.metric) for metric in GRID_METRICS}


@dataclass(frozen=True)
class DeviceFigure:
    """One figure of one device: ``value`` in ``unit`` against ``reference`` (what its key was
    judged against; ``ratio`` is value / reference, 1.0 = at it)."""

    label: str
    value: float
    unit: str
    reference: float
    model: str

    @property
    def ratio(self) -> float:
        return self.value / self.reference if self.reference else 1.0


@dataclass(frozen=True)
class DeviceCell:
    """The figures of one device of one host, worst first; ``worst`` is None without any."""

    figures: tuple[DeviceFigure, ...]

    @property
    def worst(self) -> DeviceFigure | None:
        return self.figures[0] if self.figures else None


@dataclass(frozen=True)
class GridKey:
    """One key of the grid (probe, metric, unit, parameters and device model): how a cell names
    it, and its reference (what the sweep judged that key against, else the fleet median)."""

    label: str
    unit: str
    model: str
    reference: float


@dataclass(frozen=True)
class DeviceGrid:
    """The median figure of each host's devices by (column, key index into ``keys``), and the
    columns in order (GPU index, then HOST_COLUMN). Cells are made for the rows shown only: a
    10,000-node fleet has half a million figures, and objects for each of them cost more than the
    figures themselves."""

    figures: Mapping[str, Mapping[tuple[int, int], float]]
    keys: tuple[GridKey, ...]
    columns: tuple[int, ...]

    def cells(self, host: str) -> dict[int, DeviceCell]:
        """The cells of ``host`` by column (empty for a host without any figure)."""
        found: dict[int, list[DeviceFigure]] = defaultdict(list)
        for (column, key_index), value in self.figures.get(host, {}).items():
            key = self.keys[key_index]
            found[column].append(DeviceFigure(key.label, value, key.unit, key.reference, key.model))
        return {column: DeviceCell(tuple(sorted(figures, key=_figure_order))) for column, figures in found.items()}

    def worst_ratio(self, host: str) -> float | None:
        """The lowest share of its reference of any figure of ``host``; None without a figure."""
        ratios = [value / reference if (reference := self.keys[key_index].reference) else 1.0
                  for (_, key_index), value in self.figures.get(host, {}).items()]
        return min(ratios) if ratios else None

    @property
    def references(self) -> dict[tuple[str, str, str], float]:
        """The reference of each (model, metric label, unit), for the legend (one per label and
        unit where a metric has several parameter sets)."""
        legend: dict[tuple[str, str, str], float] = {}
        for key in self.keys:
            legend.setdefault((key.model, key.label, key.unit), key.reference)
        return dict(sorted(legend.items()))


def device_grid(document: Document) -> DeviceGrid:
    """The grid of ``document``: every ok figure of GRID_METRICS of each host's GPUs and host
    devices (several of one device and key: their median; a GPU's figure that a finding quotes:
    the finding's, the one its re-test confirmed), each key's reference the one the sweep judged
    it against (the document's ``references``), else the fleet median."""
    key_indexes: dict[Any, int] = {}
    described: list[tuple[str, str, str, Any]] = []
    gathered: dict[str, dict[tuple[int, int], list[float]]] = defaultdict(dict)
    for host in _hosts(document):
        mine = gathered[str(host.get("host"))]
        for column, key, label, unit, model, value in _host_figures(host):
            key_index = key_indexes.get(key)
            if key_index is None:
                key_index = key_indexes[key] = len(described)
                described.append((label, unit, model, key))
            mine.setdefault((column, key_index), []).append(value)
    figures = {host: {slot: statistics.median(values) for slot, values in mine.items()}
               for host, mine in gathered.items() if mine}
    _quote_findings(document, figures, [key for *_, key in described])
    pooled: list[list[float]] = [[] for _ in described]
    for mine in figures.values():
        for (_, key_index), value in mine.items():
            pooled[key_index].append(value)
    judged = _judged_references(document)
    keys = tuple(GridKey(label, unit, model, _reference_of(key, judged) or statistics.median(values))
                 for (label, unit, model, key), values in zip(described, pooled, strict=True))
    columns = sorted({column for mine in figures.values() for column, _ in mine}, key=column_order)
    return DeviceGrid(figures, keys, tuple(columns))


def _judged_references(document: Document) -> list[Mapping[str, Any]]:
    return [entry for entry in document.get("references") or ()
            if isinstance(entry, Mapping) and is_finite_number(entry.get("reference")) and entry["reference"] > 0]


def _key_parts(key: Any) -> tuple[str, str, str, dict[str, Any]]:
    """(model, probe, metric, parameters) of a grid key (a record's, or a P2P one: its parameters
    are the direction and buffer size its figure pools over)."""
    if len(key) == 2:  # (model, (p2p, metric, direction, buffer MiB))
        model, (probe, metric, direction, buffer_mib) = key
        return model, probe, metric, {"direction": direction, "buffer_mib": buffer_mib}
    model, probe, metric, _, params = key
    return model, probe, metric, dict(params) if isinstance(params, frozenset) else json.loads(params)


def _reference_of(key: Any, judged: Sequence[Mapping[str, Any]]) -> float | None:
    """The reference the sweep judged ``key``'s figures against: the ``references`` entry of the
    same probe, metric, model and parameters. None for a P2P figure (a GPU's median over the pairs
    it is an end of: each pair is a key of its own) and where no entry matches."""
    model, probe, metric, params = _key_parts(key)
    if probe == P2P_PROBE:
        return None
    for entry in judged:
        if (entry.get("probe"), entry.get("metric"), entry.get("model"), entry.get("params")) == (
                probe, metric, model, params):
            return float(entry["reference"])
    return None


def _quote_findings(document: Document, figures: dict[str, dict[tuple[int, int], float]], keys: Sequence[Any]) -> None:
    """A GPU's figure that a finding quotes becomes the finding's (after a re-test: the mean of
    the confirming runs), where the finding's metric is one key of that GPU (a finding names its
    metric, not its parameters: with two keys, as PCIe's two directions, the grid keeps its own)."""
    for finding in document.get("findings") or ():
        if not isinstance(finding, Mapping) or not isinstance(finding.get("gpu"), int) \
                or not is_finite_number(finding.get("value")):
            continue
        mine = figures.get(str(finding.get("host")))
        probe, _, metric = str(finding.get("metric") or "").partition(".")
        if mine is None or probe == P2P_PROBE:
            continue
        slots = [slot for slot in mine
                 if slot[0] == finding["gpu"] and _key_parts(keys[slot[1]])[1:3] == (probe, metric)]
        if len(slots) == 1:
            mine[slots[0]] = float(finding["value"])


def column_label(column: int) -> str:
    """``GPU 3``, or ``host`` for the host device column."""
    return "host" if column == HOST_COLUMN else f"GPU {column}"


def _host_figures(host: Mapping[str, Any]) -> Iterator[tuple[int, Any, str, str, str, float]]:
    """(column, key, metric label, unit, model, value) of each ok figure of one host entry: its
    records, and its P2P matrices."""
    facts = host.get("facts") or {}
    columns = _Columns(facts)
    p2p: list[Mapping[str, Any]] = []
    for result in host.get("results") or ():
        if not isinstance(result, Mapping) or result.get("status", OK) != OK \
                or not is_finite_number(result.get("value")):
            continue
        if result.get("probe") == P2P_PROBE:
            p2p.append(result)
            continue
        if (result.get("probe"), result.get("metric")) not in _BY_PROBE:
            continue
        metric = next((m for m in GRID_METRICS if m.takes(result)), None)
        column = columns.of(result.get("device"), result.get("gpu_uuid"))
        if metric is None or column is None:
            continue
        model = _model(facts, column)
        unit = str(result.get("unit") or "")
        key = (model, result.get("probe"), result.get("metric"), unit, _frozen(result.get("params") or {}))
        yield column, key, metric.label, unit, model, float(result["value"])
    for column, key, unit, value in _p2p_figures(columns, host.get("p2p") or (), p2p):
        model = _model(facts, column)
        yield column, (model, key), "P2P", unit, model, value


def _p2p_figures(columns: _Columns, matrices: Iterable[Any], records: Iterable[Mapping[str, Any]]
                 ) -> Iterator[tuple[int, Any, str, float]]:
    """(column, key, unit, value) of each GPU and P2P key: the median of the pairs it is an end of."""
    ends: dict[tuple[str, Any, str], list[float]] = defaultdict(list)
    for matrix in matrices:
        if not isinstance(matrix, Mapping) or not isinstance(matrix.get("values"), list):
            continue
        key = _p2p_key(matrix.get("metric"), matrix.get("direction"), matrix.get("buffer_mib"))
        devices = [str(device) for device in matrix.get("devices") or ()]
        unit = str(matrix.get("unit") or "")
        for source, row in zip(devices, matrix["values"], strict=False):
            for target, value in zip(devices, row if isinstance(row, list) else (), strict=False):
                if is_finite_number(value):
                    ends[(source, key, unit)].append(float(value))
                    ends[(target, key, unit)].append(float(value))
    for record in records:
        params = record.get("params") or {}
        key = _p2p_key(record.get("metric"), params.get("direction"), params.get("buffer_mib"))
        for device in (params.get("src"), params.get("dst")):
            ends[(str(device), key, str(record.get("unit") or ""))].append(float(record["value"]))
    for (device, key, unit), values in ends.items():
        column = columns.of(device)
        if column is not None and column != HOST_COLUMN:
            yield column, key, unit, statistics.median(values)


def _p2p_key(metric: object, direction: object, buffer_mib: object) -> tuple[str, str, str, str]:
    return (P2P_PROBE, str(metric), str(direction), str(buffer_mib))


class _Columns:
    """The grid column of each device of one host, found once: NVML's GPU index (as findings name
    GPUs; a lost GPU's column stays empty rather than take the next GPU's ``cuda:N``), HOST_COLUMN
    for a host device, None for a device of another shape."""

    def __init__(self, facts: Mapping[str, Any]) -> None:
        self._gpus = HostGpus(facts)
        self._found: dict[tuple[str, Any], int | None] = {}

    def of(self, device: object, gpu_uuid: object = None) -> int | None:
        key = (str(device or ""), gpu_uuid)
        if key not in self._found:
            self._found[key] = self._column(*key)
        return self._found[key]

    def _column(self, device: str, gpu_uuid: Any) -> int | None:
        if device in HOST_DEVICES:
            return HOST_COLUMN
        if not device.startswith("cuda:") or device_index(device) is None:
            return None
        return self._gpus.of(device, gpu_uuid if isinstance(gpu_uuid, str) else None).nvml_index


def _model(facts: Mapping[str, Any], column: int) -> str:
    if column == HOST_COLUMN:
        return str(facts.get("cpu_model") or "unknown CPU")
    return str(facts.get("gpu_model") or "unknown GPU")


def _frozen(params: Mapping[str, Any]) -> Any:
    """A record's parameters as a hashable key, in any order (a list or object value as its JSON)."""
    try:
        return frozenset(params.items())
    except TypeError:
        return json.dumps(params, sort_keys=True, default=str)


def _figure_order(figure: DeviceFigure) -> tuple[float, int]:
    return (figure.ratio, METRIC_ORDER[figure.label])


def column_order(column: int) -> tuple[bool, int]:
    """GPUs by index, then the host column."""
    return (column == HOST_COLUMN, column)

