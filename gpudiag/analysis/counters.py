"""Error counters against peers: a GPU whose PCIe replay counter, or a wired NVLink whose CRC,
replay or recovery error counter, stands far above its peers' is a warning.

- Peers: the GPUs (for NVLink counters, the wired links of the GPUs: gpudiag.analysis.nvlinks)
  of the same GPU model and driver in this sweep, the counted one left out.
- Far above: at least the counter's floor (``pcie_replay_floor``, ``nvlink_crc_floor``,
  ``nvlink_replay_floor``, ``nvlink_recovery_floor``: counts) AND at least ``counter_peer_ratio``
  times the peers' median. Most healthy counters read 0, so the floor decides on a clean fleet;
  on a platform where every link collects some replays the median lifts the bar with it. A GPU
  with no peer is judged by the floor alone, and its evidence says so.
- Growth: NVML's counters are cumulative since the driver loaded. Given the previous sweep's
  telemetry (``previous``), a counter that has a previous reading is judged on what it grew by
  since then, against what its peers' counters grew by: an old burst that has stopped is not
  flagged again, a link that keeps erroring is. A count below its previous reading was reset (a
  driver reload or a reboot): all of it is growth.

Findings: ``degraded_pcie`` (PCIe replays) and ``nvlink_errors`` (NVLink counters), one per GPU
and kind, at ``warn`` with action ``inspect``, basis ``telemetry``; the figure is the worst
counter's (``value``) against its peers' median (``reference``), and the evidence names every
counter, its value, the peers' median and the NVLink index.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..findings import Basis, Finding, Kind, Severity
from . import actions, rules
from .actions import Cause
from .reference import weighted_median
from .thresholds import Thresholds

Telemetry = Mapping[str, Mapping[str, rules.GpuTelemetry]]
COUNT, GROWTH = "count", "growth"


@dataclass(frozen=True)
class CounterSpec:
    """One error counter: ``name`` is the telemetry metric (PCIe) or the NVLink link's details key;
    ``words`` names it in evidence; ``floor`` is its Thresholds field; ``kind`` and ``cause``
    those of its findings."""

    name: str
    metric: str
    words: str
    floor: str
    kind: Kind
    cause: Cause


PCIE_REPLAYS = CounterSpec("pcie_replay_count", "pcie_replay_count", "PCIe replay counter", "pcie_replay_floor",
                           Kind.DEGRADED_PCIE, Cause.PCIE_REPLAYS)
NVLINK_COUNTERS = tuple(CounterSpec(name, f"nvlink_{name}", words, floor, Kind.NVLINK_ERRORS, Cause.NVLINK_ERRORS)
                        for name, words, floor in (("crc_errors", "CRC errors", "nvlink_crc_floor"),
                                                   ("replay_errors", "replay errors", "nvlink_replay_floor"),
                                                   ("recovery_errors", "recovery errors", "nvlink_recovery_floor")))


class Reading(NamedTuple):
    """One counter of one GPU (``link``: the NVLink index, None for PCIe), its value since the
    driver loaded (a count) and its growth since the previous sweep (None without one)."""

    spec: CounterSpec
    link: int | None
    count: float
    growth: float | None


class PeerCounts:
    """The values of one counter over a peer group. Most read 0: only the others are kept, sorted.

    Each host weighs once: where the hosts of the group added different numbers of values (a
    host with a GPU missing, or one printing a hundred GPUs it claims to have), a value weighs
    1 / (its host's values in the group) and the median is weighted; where every host added as
    many, the weights are equal and it is the plain median."""

    def __init__(self) -> None:
        self.total = 0
        self._nonzero: list[float] = []
        self._nonzero_hosts: list[str] = []
        self._per_host: dict[str, int] = defaultdict(int)
        self._weighted: list[tuple[float, float]] | None = None  # (value, weight) of the non-zero, sorted
        self._zero_weight = 0.0

    def add(self, value: float, host: str = "") -> None:
        self.total += 1
        self._per_host[host] += 1
        if value:
            self._nonzero.append(value)
            self._nonzero_hosts.append(host)

    def add_zeros(self, count: int, host: str = "") -> None:
        self.total += count
        self._per_host[host] += count

    def sort(self) -> None:
        if len(set(self._per_host.values())) > 1:
            weights = [1 / self._per_host[host] for host in self._nonzero_hosts]
            self._weighted = sorted(zip(self._nonzero, weights, strict=True))
            self._zero_weight = len(self._per_host) - math.fsum(weights)
        self._nonzero.sort()

    def median_without(self, value: float, host: str = "") -> float | None:
        """The median of the group with one ``value`` (of ``host``) left out (the counted one
        itself); None when nothing is left. Call ``sort`` first, once every value is added."""
        others = self.total - 1
        if others <= 0:
            return None
        if self._weighted is not None:
            return self._weighted_median_without(value, 1 / max(1, self._per_host.get(host, 1)))
        zeros = self.total - len(self._nonzero)
        left_out = 0 if not value else zeros + bisect.bisect_left(self._nonzero, value)

        def nth(rank: int) -> float:  # the rank-th smallest of the others
            rank += rank >= left_out
            return 0 if rank < zeros else self._nonzero[rank - zeros]

        middle = others // 2
        return nth(middle) if others % 2 else (nth(middle - 1) + nth(middle)) / 2

    def _weighted_median_without(self, value: float, weight: float) -> float | None:
        assert self._weighted is not None
        pairs = [(0.0, self._zero_weight - (weight if not value else 0.0))] if self._zero_weight else []
        skipped = not value
        for item, item_weight in self._weighted:
            if not skipped and item == value:
                skipped = True
                item_weight -= weight
            pairs.append((item, item_weight))
        pairs = [(item, item_weight) for item, item_weight in pairs if item_weight > 1e-12]
        return weighted_median(pairs) if pairs else None


@dataclass(frozen=True)
class CounterSuspect:
    """A counter far above its peers, which a finding names: the figure judged (``count`` or
    ``growth``), its value, the counter's value now, the peers' median of the same figure (None: no
    peer) and how many peers."""

    reading: Reading
    figure: str
    value: float
    median: float | None
    peers: int


def counter_findings(telemetry: Telemetry, thresholds: Thresholds, previous: PriorCounts | None = None) -> list[
        Finding]:
    """The ``degraded_pcie`` and ``nvlink_errors`` warnings of the error counters of every GPU in
    ``telemetry`` (host -> GPU UUID -> GPU), judged against peers as the module docstring says;
    ``previous``: the counts of the previous sweep of the same hosts (``prior_counts``), to judge
    growth."""
    gathered = _Gathered(thresholds, previous or PriorCounts())
    for host in sorted(telemetry):
        gathered.add_host(telemetry[host])
    gathered.add_clean()
    for peers in gathered.groups.values():
        peers.sort()
    found: dict[tuple[str, str, str], list[CounterSuspect]] = defaultdict(list)
    for gpu, reading in gathered.candidates:
        suspect = _suspect(gpu, reading, gathered.groups, thresholds)
        if suspect is not None:
            found[(gpu.host, gpu.gpu_uuid, reading.spec.kind)].append(suspect)
    return [_finding(telemetry[host][uuid], suspects, thresholds) for (host, uuid, _), suspects in found.items()]


class _Gathered:
    """One pass over every counter of a sweep (a 10,000-node sweep has millions, nearly all 0):
    each peer group's values, and the readings at or above their floor (the only ones that can
    be flagged), in the order they were added."""

    def __init__(self, thresholds: Thresholds, prior: PriorCounts) -> None:
        self.groups: dict[tuple[Any, ...], PeerCounts] = defaultdict(PeerCounts)
        self.candidates: list[tuple[rules.GpuTelemetry, Reading]] = []
        self._floors = {spec.name: float(getattr(thresholds, spec.floor)) for spec in (PCIE_REPLAYS, *NVLINK_COUNTERS)}
        self._prior = prior
        # Without a previous sweep, the zeros of clean GPUs by (model, driver, host): counted into
        # their groups once a host (add_clean), not once a GPU and counter.
        self._clean_replays: dict[tuple[Any, Any, str], int] = defaultdict(int)
        self._clean_links: dict[tuple[Any, Any, str], int] = defaultdict(int)

    def add_host(self, gpus: Mapping[str, rules.GpuTelemetry]) -> None:
        """One host's GPUs (``add``, each), those whose counters all read 0 counted in one look
        (``zero_counters``, worked out as the host was read) where no previous sweep is given."""
        fresh = not self._prior.gpus
        for gpu in gpus.values():
            zeros = gpu.zero_counters if fresh else None
            if zeros is None:
                self.add(gpu)
                continue
            clean = (gpu.gpu_model, gpu.driver, gpu.host)
            if zeros[0]:
                self._clean_replays[clean] += zeros[0]
            if zeros[1]:
                self._clean_links[clean] += zeros[1]

    def add(self, gpu: rules.GpuTelemetry) -> None:
        replays = gpu.value("pcie_replay_count")
        fresh = not self._prior.gpus
        if replays is not None:
            if fresh and replays == 0 and type(replays) is not bool:  # nearly every GPU: a zero to count
                self._clean_replays[(gpu.gpu_model, gpu.driver, gpu.host)] += 1
            else:
                self._add(gpu, PCIE_REPLAYS, None, replays)
        if fresh:  # every link alike and clean (nearly every GPU): counted in one look
            alike = gpu.alike_wired_nvlinks()
            if alike is not None and (not alike[1] or all(alike[0].get(spec.name) == 0 for spec in NVLINK_COUNTERS)):
                if alike[1]:
                    self._clean_links[(gpu.gpu_model, gpu.driver, gpu.host)] += alike[1]
                return
        clean = 0  # links whose every counter reads 0 (nearly all): counted, nothing to judge
        for link in gpu.wired_nvlinks():
            index = link.get("link")
            if not isinstance(index, int):
                continue
            if not self._prior.gpus and all(link.get(spec.name) == 0 for spec in NVLINK_COUNTERS):
                clean += 1
                continue
            for spec in NVLINK_COUNTERS:
                self._add(gpu, spec, index, link.get(spec.name))
        for spec in NVLINK_COUNTERS if clean else ():
            self.groups[_group(gpu, spec, COUNT)].add_zeros(clean, gpu.host)

    def add_clean(self) -> None:
        """The clean GPUs' zeros into their groups (as add would have put each)."""
        for (model, driver, host), count in self._clean_replays.items():
            self.groups[(model, driver, PCIE_REPLAYS.name, COUNT)].add_zeros(count, host)
        for (model, driver, host), count in self._clean_links.items():
            for spec in NVLINK_COUNTERS:
                self.groups[(model, driver, spec.name, COUNT)].add_zeros(count, host)

    def _add(self, gpu: rules.GpuTelemetry, spec: CounterSpec, link: int | None, count: object) -> None:
        if count is None or (count and not _is_count(count)):  # not kept, or not a count: not judged
            return
        value = float(count)  # type: ignore[arg-type]
        growth = None
        before = self._prior.before(gpu.host, gpu.gpu_uuid, spec.name, link)
        if before is not None:  # below its previous reading: reset since, all of it is growth
            growth = value - before if value >= before else value
        figure = COUNT if growth is None else GROWTH
        judged = value if growth is None else growth
        self.groups[_group(gpu, spec, figure)].add(judged, gpu.host)
        if judged and judged >= self._floors[spec.name]:
            self.candidates.append((gpu, Reading(spec, link, value, growth)))


def zero_counters(gpu: rules.GpuTelemetry) -> tuple[int, int] | None:
    """Where every error counter ``gpu`` keeps reads 0 (its PCIe replay counter, if read, and
    each wired NVLink's alike: nearly every GPU), what ``_Gathered.add`` counts as zeros without
    a previous sweep: (replay counters read, 0 or 1; wired NVLinks); None otherwise."""
    replays = gpu.value("pcie_replay_count")
    if replays is not None and not (replays == 0 and type(replays) is not bool):
        return None
    alike = gpu.alike_wired_nvlinks()
    if alike is None or (alike[1] and not all(alike[0].get(spec.name) == 0 for spec in NVLINK_COUNTERS)):
        return None
    return _zeros(int(replays is not None), alike[1])


@functools.lru_cache(maxsize=256)
def _zeros(replays: int, links: int) -> tuple[int, int]:
    """One tuple for every GPU alike (80,000 GPUs, a few shapes)."""
    return replays, links


def with_zero_counters(gpu: rules.GpuTelemetry) -> rules.GpuTelemetry:
    """``gpu`` with its ``zero_counters`` worked out (done as each host is read, in the sweep's
    worker threads, so that the analysis after the last host judges 80,000 clean GPUs in one
    look each)."""
    return dataclasses.replace(gpu, zero_counters=zero_counters(gpu))


def gpu_counters(gpu: rules.GpuTelemetry) -> Iterator[tuple[CounterSpec, int | None, float]]:
    """Every error counter of ``gpu`` NVML read: (counter, NVLink index or None, count). Only
    wired NVLinks count; a counter a link does not keep (None) is left out."""
    replays = gpu.value("pcie_replay_count")
    if _is_count(replays):
        yield PCIE_REPLAYS, None, float(replays)  # type: ignore[arg-type]
    for link in gpu.wired_nvlinks():
        index = link.get("link")
        if not isinstance(index, int):
            continue
        for spec in NVLINK_COUNTERS:
            value = link.get(spec.name)
            if _is_count(value):
                yield spec, index, float(value)


def _is_count(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and value >= 0)


@dataclass
class PriorCounts:
    """The previous sweep's error counters: the GPUs ((host, UUID)) it read, and each counter
    that was not 0 then ((host, UUID, counter, NVLink index) -> count). Only the non-zero ones
    are kept — nearly all are 0 — so that 10,000 nodes' priors fit in memory."""

    gpus: set[tuple[str, str]] = field(default_factory=set)
    counts: dict[tuple[Any, ...], float] = field(default_factory=dict)
    # NIC ports read then ((host, device) -> the rate of an up port, None for one not up)
    ports: dict[tuple[str, str], float | None] = field(default_factory=dict)
    # The GPUs each host could use then, and its board (host -> (count, DMI product name or None)):
    # a GPU gone from the bus since is missing, in a job of one node too (gpudiag.analysis.coverage).
    gpu_counts: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    # The GPUs Slurm is configured to give each host (its Gres=, asked by a pre-flight as it
    # starts): known before the sweep as the previous sweep's are.
    slurm_gpus: dict[str, int] = field(default_factory=dict)

    def before(self, host: str, uuid: str, counter: str, link: int | None) -> float | None:
        """The counter's previous count (0 where it read 0), None where its GPU was not read."""
        if (host, uuid) not in self.gpus:
            return None
        return self.counts.get((host, uuid, counter, link), 0.0)

    def add(self, previous: Telemetry) -> None:
        for host, gpus in previous.items():
            for gpu in gpus.values():
                self.gpus.add((host, gpu.gpu_uuid))
                for spec, link, count in gpu_counters(gpu):
                    if count:
                        self.counts[(host, gpu.gpu_uuid, spec.name, link)] = count


def _group(gpu: rules.GpuTelemetry, spec: CounterSpec, figure: str) -> tuple[Any, ...]:
    return gpu.gpu_model, gpu.driver, spec.name, figure


def _suspect(gpu: rules.GpuTelemetry, reading: Reading, groups: Mapping[tuple[Any, ...], PeerCounts],
             thresholds: Thresholds) -> CounterSuspect | None:
    """The reading as a CounterSuspect when it is at least ``counter_peer_ratio`` times its peers'
    median (its floor was checked when it was gathered), else None."""
    figure, value = (COUNT, reading.count) if reading.growth is None else (GROWTH, reading.growth)
    peers = groups[_group(gpu, reading.spec, figure)]
    median = peers.median_without(value, gpu.host)
    if median is not None and value < thresholds.counter_peer_ratio * median:
        return None
    return CounterSuspect(reading, figure, value, median, peers.total - 1)


def _finding(gpu: rules.GpuTelemetry, suspects: list[CounterSuspect], thresholds: Thresholds) -> Finding:
    """One warning for a GPU's counters of one kind: the worst (furthest past its floor) gives the
    figures, the evidence names each."""
    worst = max(suspects, key=lambda e: e.value / max(1, getattr(thresholds, e.reading.spec.floor)))
    spec = worst.reading.spec
    verb, detail = actions.action(spec.cause, Severity.WARN, gpu.nvml_index)
    metric = f"telemetry.{spec.metric}" + ("_growth" if worst.figure == GROWTH else "")
    return Finding(kind=spec.kind, severity=Severity.WARN, host=gpu.host, gpu=gpu.nvml_index, gpu_uuid=gpu.gpu_uuid,
                   pci_bus_id=gpu.pci_bus_id, metric=metric, value=_number(worst.value),
                   reference=None if worst.median is None else _number(worst.median), unit="count",
                   reference_source=None if worst.median is None else "fleet", basis=Basis.TELEMETRY,
                   evidence="; ".join(_evidence(e) for e in suspects), action=verb, action_detail=detail)


def _evidence(suspect: CounterSuspect) -> str:
    """``NVLink 3 CRC errors 12000 since the driver loaded; peers' median 0 (143 links of this
    model and driver)``, or what it grew by since the previous sweep against the peers' growth."""
    reading = suspect.reading
    what = reading.spec.words if reading.link is None else f"NVLink {reading.link} {reading.spec.words}"
    peers = "GPUs" if reading.link is None else "links"
    return counter_evidence(what, suspect.figure, suspect.value, reading.count, suspect.median, suspect.peers,
                            f"{peers} of this model and driver", "no peer of this model and driver to compare with")


def counter_evidence(what: str, figure: str, value: float, count: float, median: float | None, peers: int,
                     peers_are: str, no_peer: str) -> str:
    """``<what> grew by V since the previous sweep (now C)`` (a GROWTH figure) or ``<what> V since
    the driver loaded``, then the peers' median and the ``peers`` (``peers_are``) it rests on, or
    ``no_peer`` where there was none to compare with."""
    if figure == GROWTH:
        said = f"{what} grew by {_text(value)} since the previous sweep (now {_text(count)})"
        median_words = "peers' median growth"
    else:
        said, median_words = f"{what} {_text(value)} since the driver loaded", "peers' median"
    if median is None:
        return f"{said}; {no_peer}"
    return f"{said}; {median_words} {_text(median)} ({peers} {peers_are})"


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(value, 3)


def _text(value: float) -> str:
    return str(_number(value))
