"""Telemetry rules: findings that NVML readings make on their own, whatever the speed, and the
plain-words evidence that speed findings carry.

Readings taken under load (the GEMM probe's NVML evidence) are preferred to idle ones: an idle
GPU lowers its clocks and PCIe generation on purpose.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..findings import Kind, Severity
from ..records import ProbeResult, device_index
from .actions import Cause

if TYPE_CHECKING:
    from .identity import HostGpus

# Clocks-event reasons that mean the hardware slowed the GPU down (a fail under load), and the
# software ones worth a warning; the rest (idle, application clocks, sync boost) are normal.
# ``sw_power_cap`` alone is normal at full GEMM load (the GPU runs at its power limit): it only
# explains a speed deficit, it is never a finding by itself.
HARDWARE_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
SOFTWARE_REASONS = ("sw_thermal_slowdown",)
POWER_CAP = "sw_power_cap"
REASON_WORDS = {
    "hw_slowdown": "HW slowdown", "hw_thermal_slowdown": "HW thermal slowdown",
    "hw_power_brake_slowdown": "HW power brake slowdown", "sw_thermal_slowdown": "SW thermal slowdown",
    "sw_power_cap": "SW power cap",
}

# The PCIe link figures a probe's NVML evidence carries (lowest seen under load, and the maximum).
LINK_UNDER_LOAD = ("pcie_width_min_loaded", "pcie_width_max", "pcie_generation_min_loaded", "pcie_generation_max")
# What the rules read of the NVML evidence a GEMM carries (``active_reasons``, ``load_evidence``).
LOAD_EVIDENCE = ("clocks_event_reasons", "clocks_event_reason_samples", "nvml_samples", "nvml_samples_idle",
                 "sm_clock_mhz_median", "sm_clock_mhz_min", "sm_clock_mhz_max_seen", "sm_clock_max_mhz",
                 "power_w_max", "power_limit_w", *LINK_UNDER_LOAD)


# Where a GPU's wired NVLinks come from (NvlinkWiring.source).
WIRED_BY_SKU, WIRED_BY_PEERS = "sku", "peers"


@dataclass(frozen=True)
class NvlinkWiring:
    """Which NVLinks of a GPU are judged: ``links`` (indices). ``source``: ``sku`` (the SKU table
    says how many the model wires) or ``peers`` (a model the table lacks: a link counts where
    this GPU has it up, or most other GPUs of its model do); ``peers_up``: for ``peers``, link ->
    (other GPUs with it up, other GPUs reporting it)."""

    links: frozenset[int]
    source: str
    peers_up: Mapping[int, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuTelemetry:
    """What NVML said about one GPU: idle readings by metric, the evidence seen under load, and
    its PCI bus id (None when NVML did not say). ``gpu_model`` and ``driver`` (the host's facts)
    name its peers; ``nvlink_wiring`` says which NVLinks are wired (None: every link NVML lists)."""

    host: str
    gpu_uuid: str
    nvml_index: int | None
    readings: Mapping[str, Reading | Mapping[str, Any]]
    under_load: Mapping[str, Any]
    pci_bus_id: str | None = None
    gpu_model: str | None = None
    driver: str | None = None
    nvlink_wiring: NvlinkWiring | None = None
    # Where every error counter it keeps reads 0 under this wiring (nearly every GPU), as the host
    # was read: (PCIe replay counters read, 0 or 1; wired NVLinks); None: not worked out, or not all
    # 0 (gpudiag.analysis.counters.zero_counters). A GPU wired anew is a new object, without it.
    zero_counters: tuple[int, int] | None = field(default=None, compare=False, repr=False)

    def value(self, metric: str) -> float | None:
        readings = self.readings
        if isinstance(readings, ReadingTable):  # the common case, and a hot one: no Reading made
            return readings.ok_value(metric)
        reading = readings.get(metric)
        return None if reading is None or reading.get("status") != "ok" else reading.get("value")

    def nvlinks(self) -> list[Mapping[str, Any]]:
        """Every NVLink NVML listed (``link``, ``state``, error counters), in NVML order; empty
        without an ok ``nvlink_links_up`` reading."""
        reading = self.readings.get("nvlink_links_up")
        if reading is None or reading.get("status") != "ok":
            return []
        links = (reading.get("details") or {}).get("links") or []
        if isinstance(links, _Rows):
            return links.dicts()
        return [link for link in links if isinstance(link, dict)]

    def alike_wired_nvlinks(self) -> tuple[Mapping[str, Any], int] | None:
        """Where every NVLink NVML listed reads the same but for its index (a healthy GPU's 18):
        those values and how many of the links this GPU wires (none listed: no values, 0); None
        otherwise (``wired_nvlinks`` gives each link). A 10,000-node sweep's 1.4 million links are
        judged in one look a GPU."""
        reading = self.readings.get("nvlink_links_up")
        if reading is None or reading.get("status") != "ok":
            return {}, 0  # no NVLink listed
        links = (reading.get("details") or {}).get("links")
        alike = links.alike() if isinstance(links, _Rows) else None
        if alike is None:
            return None
        values, indexes = alike
        if self.nvlink_wiring is not None and not self.nvlink_wiring.links.issuperset(indexes):
            wired = self.nvlink_wiring.links
            return values, sum(1 for index in indexes if index in wired)
        return values, len(indexes)

    def wired_nvlinks(self) -> list[Mapping[str, Any]]:
        """The NVLinks this GPU wires (all NVML listed, without ``nvlink_wiring``): NVML reads an
        unwired link slot as inactive, which is not a link down."""
        links = self.nvlinks()
        if self.nvlink_wiring is None:
            return links
        return [link for link in links if link.get("link") in self.nvlink_wiring.links]


@dataclass(frozen=True)
class RuleFinding:
    """A telemetry finding before it is merged with speed findings of the same GPU; ``cause``
    picks its action (gpudiag.analysis.actions.ACTIONS)."""

    kind: Kind
    severity: Severity
    host: str
    gpu_uuid: str
    nvml_index: int | None
    evidence: str
    cause: Cause


# What the rules read of a telemetry record (status, value, unit, reason, details); the rest (and
# details that only name the source) is left behind, so that 10,000 nodes' readings fit in memory.
_SOURCE_ONLY = ({"source": "nvml"}, {"source": "nvidia-smi"})
# The same few status and unit strings, one object each instead of one per reading.
_TEXTS: dict[str, str] = {}
# The readings whose details a rule reads (each NVLink's state and counters; the clocks-event
# reasons active at idle); the identity's are kept apart (bus id, name), the rest left behind.
DETAILED_READINGS = frozenset({"nvlink_links_up", "clocks_event_reasons"})
_INTS: dict[int, int] = {}
_SHARED_INT = 1 << 20


class Reading:
    """What the rules read of one telemetry record: ``status``, ``value``, ``unit``, ``reason``
    and ``details`` (None where they only named their source). Read like the record's dict
    (``get``), at a third of a dict's memory: a 10,000-node sweep holds 1.8 million."""

    __slots__ = ("status", "value", "unit", "reason", "details")

    def __init__(self, result: ProbeResult) -> None:
        status, unit = result.status, result.unit
        self.status = _TEXTS.setdefault(status, status)
        self.value = _shared(result.value)
        self.unit = _TEXTS.setdefault(unit, unit) if isinstance(unit, str) else unit
        self.reason = result.reason
        details = result.details
        if not details or details in _SOURCE_ONLY or result.metric not in DETAILED_READINGS:
            self.details: Mapping[str, Any] | None = None
        else:
            links = details.get("links")
            self.details = {**details, "links": _Rows.of(links)} if isinstance(links, list) else details

    def get(self, name: str, default: Any = None) -> Any:
        value = getattr(self, name, None) if name in Reading.__slots__ else None
        return default if value is None else value


def _reading(result: ProbeResult) -> Reading:
    return Reading(result)


class ReadingTable(Mapping[str, Any]):
    """One GPU's readings by metric, kept small: a reading that is ok, with no details and no
    reason, is kept as its value alone (most of them: clocks, temperatures, counters), the
    others as their ``Reading``; the metric names are one tuple shared by every GPU that has the
    same. Looking one up gives a ``Reading`` either way."""

    __slots__ = ("_where", "_values")
    _shapes: dict[tuple[str, ...], dict[str, int]] = {}

    def __init__(self, readings: Mapping[str, Reading]) -> None:
        names = tuple(readings)
        self._where = ReadingTable._shapes.setdefault(names, {name: index for index, name in enumerate(names)})
        self._values = tuple(reading.value if _plain(reading) else reading for reading in readings.values())

    def __getitem__(self, metric: str) -> Reading:
        value = self._values[self._where[metric]]
        return value if isinstance(value, Reading) else _PlainReading(value)

    def get(self, metric: str, default: Any = None) -> Any:  # Mapping's, without its KeyError round trip
        index = self._where.get(metric)
        if index is None:
            return default
        value = self._values[index]
        return value if isinstance(value, Reading) else _PlainReading(value)

    def ok_value(self, metric: str) -> Any:
        """The value of ``metric``'s reading when it is ok, else None (a plain one without a Reading)."""
        index = self._where.get(metric)
        if index is None:
            return None
        value = self._values[index]
        if not isinstance(value, Reading):
            return value
        return value.value if value.status == "ok" else None

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


def _plain(reading: Reading) -> bool:
    return reading.status == "ok" and reading.details is None and reading.reason is None


class _PlainReading(Reading):
    """A reading given back from its value alone: ok, no reason, no details."""

    __slots__ = ()

    def __init__(self, value: Any) -> None:  # noqa: D107 - Reading's fields, without a record
        self.status, self.value, self.unit, self.reason, self.details = "ok", value, None, None, None


class _Rows:
    """A list of like dicts (a GPU's NVLinks) kept small: a healthy GPU's 18 links differ only in
    their index, so the rows that match the first one but for their ``index_name`` value are one
    template and a tuple of indexes; the others are a tuple each. A dict a link would take most
    of a 10,000-node sweep's telemetry memory. ``dicts()`` gives them back, in their order."""

    __slots__ = ("names", "at", "template", "order", "others", "_alike")

    def __init__(self, names: tuple[str, ...], at: int | None, template: tuple[Any, ...] | None,
                 order: tuple[int | tuple[Any, ...], ...], others: tuple[Any, ...]) -> None:
        self.names = names
        self.at = at  # where the index stands in a row
        self.template = template  # the shared values (the index's place holds None)
        self.order = order  # per row: its index (a template row) or its own values
        self.others = others  # items that were no dict of those keys, kept as they were
        self._alike = self._find_alike()  # found as the host is read, looked at in the analysis

    @classmethod
    def of(cls, items: list[Any], index_name: str = "link") -> _Rows:
        names = tuple(items[0]) if items and isinstance(items[0], dict) else ()
        like = [item for item in items if isinstance(item, dict) and tuple(item) == names]
        others = tuple(item for item in items if not (isinstance(item, dict) and tuple(item) == names))
        at = names.index(index_name) if index_name in names else None
        rows = [tuple(_shared(value) for value in item.values()) for item in like]
        template = None if at is None or not rows else rows[0][:at] + (None,) + rows[0][at + 1:]
        order: list[int | tuple[Any, ...]] = []
        for row in rows:
            fits = template is not None and at is not None and isinstance(row[at], int) and \
                row[:at] + (None,) + row[at + 1:] == template
            order.append(row[at] if fits else row)  # type: ignore[index]
        return cls(tuple(_shared(name) for name in names), at, template, tuple(order), others)

    def alike(self) -> tuple[Mapping[str, Any], tuple[int, ...]] | None:
        """The values every row shares (the index left out) and each row's index, where every
        row is a template row; None otherwise."""
        return self._alike

    def _find_alike(self) -> tuple[Mapping[str, Any], tuple[int, ...]] | None:
        if self.others or self.template is None or self.at is None or \
                not all(isinstance(entry, int) for entry in self.order):
            return None
        shared = {name: value for place, (name, value) in enumerate(zip(self.names, self.template, strict=True))
                  if place != self.at}
        return shared, self.order  # type: ignore[return-value]

    def dicts(self) -> list[Mapping[str, Any]]:
        at = self.at
        rows = []
        for entry in self.order:
            if isinstance(entry, tuple):
                rows.append(dict(zip(self.names, entry, strict=True)))
            else:
                assert self.template is not None and at is not None
                values = self.template[:at] + (entry,) + self.template[at + 1:]
                rows.append(dict(zip(self.names, values, strict=True)))
        return rows + [item for item in self.others if isinstance(item, dict)]


def _shared(value: Any) -> Any:
    """One object for equal short strings and small whole numbers (an NVLink's state, speed and
    counters repeat on every link of a fleet)."""
    if isinstance(value, str) and len(value) < 32:
        return _TEXTS.setdefault(value, value)
    if type(value) is int and -_SHARED_INT < value < _SHARED_INT:
        return _INTS.setdefault(value, value)
    return value


class TelemetryCollector:
    """Gathers one host's telemetry records and GEMM load evidence, record by record (so that the
    analysis reads a sweep's records in one pass)."""

    def __init__(self, host: str, gpu_model: str | None = None, driver: str | None = None,
                 identities: HostGpus | None = None) -> None:
        self.host = host
        self.gpu_model = gpu_model
        self.driver = driver
        # Which GPU each record names (NVML's index): the facts' map, and what telemetry adds.
        self.identities = identities
        self._readings: dict[str, dict[str, Mapping[str, Any]]] = {}
        self._nvml_index: dict[str, int | None] = {}
        self._cuda_index: dict[str, int | None] = {}
        self._load: dict[str, Mapping[str, Any]] = {}
        self._link: dict[str, dict[str, Any]] = {}
        self._bus: dict[str, str] = {}
        self._name: dict[str, str] = {}

    def add(self, result: ProbeResult) -> None:
        uuid = result.gpu_uuid
        if not uuid:
            return
        probe = result.probe
        if probe == "telemetry":
            readings = self._readings.get(uuid)
            if readings is None:
                readings = self._readings[uuid] = {}
                self._nvml_index[uuid] = device_index(result.device)
            readings[result.metric] = _reading(result)
            details = result.details
            if result.metric == "identity":
                if details.get("pci_bus_id"):
                    self._bus[uuid] = str(details["pci_bus_id"])
                if details.get("name"):
                    self._name[uuid] = str(details["name"])
                if self.identities is not None:
                    self.identities.add_nvml(self._nvml_index[uuid], uuid, self._bus.get(uuid))
        elif probe == "gemm" and result.status == "ok":
            details = result.details
            self._load[uuid] = {name: details[name] for name in LOAD_EVIDENCE if name in details}
            self._cuda_index[uuid] = device_index(result.device)
        elif probe == "pcie" and result.status == "ok":
            self._add_link(uuid, result.details)

    def _add_link(self, uuid: str, details: Mapping[str, Any]) -> None:
        """The PCIe link as the copy probe saw it under load: the lowest width and generation."""
        seen = self._link.setdefault(uuid, {})
        for name in LINK_UNDER_LOAD:
            value = details.get(name)
            if value is not None:
                seen[name] = min(value, seen.get(name, value)) if name.endswith("_loaded") else value

    def gpus(self) -> dict[str, GpuTelemetry]:
        """Each GPU's telemetry by UUID, in UUID order. Its model is the host's facts' (NVML's
        name for the GPU where the facts do not say)."""
        # NVML's index names the GPU (what nvidia-smi -i takes), never CUDA's renumbered one.
        gpus = {}
        for uuid in sorted(set(self._readings) | set(self._load) | set(self._link)):
            index, bus = self._nvml_index.get(uuid, self._cuda_index.get(uuid)), self._bus.get(uuid)
            if self.identities is not None:
                cuda = self._cuda_index.get(uuid)
                label = f"gpu:{index}" if uuid in self._nvml_index else f"cuda:{cuda}"
                found = self.identities.of(label, uuid)
                index, bus = found.nvml_index, bus or found.pci_bus_id
            gpus[uuid] = GpuTelemetry(self.host, uuid, index, ReadingTable(self._readings.get(uuid, {})),
                                      self._under_load(uuid), bus, self.gpu_model or self._name.get(uuid), self.driver)
        return gpus

    def _under_load(self, uuid: str) -> Mapping[str, Any]:
        load = dict(self._load.get(uuid, {}))
        for name, value in self._link.get(uuid, {}).items():
            load[name] = min(value, load[name]) if name.endswith("_loaded") and name in load else value
        return load


def telemetry_findings(gpu: GpuTelemetry, throttle_share_pct: float) -> list[RuleFinding]:
    """Every finding the readings of one GPU make by themselves. A clocks-event reason counts
    when active in at least ``throttle_share_pct`` percent of the loaded NVML samples."""
    found = []
    outcomes = (_throttled(gpu, throttle_share_pct), _degraded_pcie(gpu), nvlink_down(gpu), _ecc(gpu))
    for outcome in outcomes:
        if outcome is not None:
            kind, severity, evidence, cause = outcome
            found.append(RuleFinding(kind, severity, gpu.host, gpu.gpu_uuid, gpu.nvml_index, evidence, cause))
    return found


def active_reasons(details: Mapping[str, Any], share_pct: float) -> list[str] | None:
    """The clocks-event reasons active in at least ``share_pct`` percent of the loaded samples
    (all reasons seen, where the record has no per-reason counts); None without load evidence."""
    reasons = details.get("clocks_event_reasons")
    if reasons is None:
        return None
    counts = details.get("clocks_event_reason_samples")
    if not isinstance(counts, Mapping):
        return list(reasons)
    loaded = max(1, int(details.get("nvml_samples") or 0) - int(details.get("nvml_samples_idle") or 0))
    return [reason for reason in reasons if 100 * float(counts.get(reason, 0)) / loaded >= share_pct]


def seen_reasons(details: Mapping[str, Any]) -> list[str]:
    """The clocks-event reasons that slow a GPU (``REASON_WORDS``) seen in any loaded sample,
    however few: a reason below ``throttle_share`` is no finding by itself, but it may still
    explain part of a deficit, and it is never "no reason seen"."""
    return [reason for reason in active_reasons(details, 0.0) or [] if reason in REASON_WORDS]


def clock_cost_pct(details: Mapping[str, Any]) -> float | None:
    """How far the GPU's mean SM clock under load fell below its maximum, in percent, from what
    the sampler kept (median, lowest and highest loaded clock, and the share of loaded samples
    the most frequent slowing reason was active in): a reason active in most samples holds the
    median down, one active in a few leaves the median at the free clock while those few run at
    about the lowest. None when the sampler gave no clocks."""
    most, median = details.get("sm_clock_max_mhz"), details.get("sm_clock_mhz_median")
    if not isinstance(most, (int, float)) or not isinstance(median, (int, float)) or most <= 0:
        return None
    if not details.get("clocks_event_reasons"):  # nothing slowed it (most GPUs): the median clock
        return max(0.0, 100 * (1 - median / most))
    share = max((_share(details, reason) for reason in seen_reasons(details)), default=0.0)
    low, high = details.get("sm_clock_mhz_min"), details.get("sm_clock_mhz_max_seen")
    low = low if isinstance(low, (int, float)) else median
    high = high if isinstance(high, (int, float)) else median
    slowed = median if share >= 0.5 else low
    mean = median if share in (0.0, 1.0) else share * slowed + (1 - share) * high
    return max(0.0, 100 * (1 - mean / most))


def _share(details: Mapping[str, Any], reason: str) -> float:
    """The share (0..1) of loaded samples ``reason`` was active in (1 where the record has no counts)."""
    counts = details.get("clocks_event_reason_samples")
    if not isinstance(counts, Mapping):
        return 1.0
    loaded = max(1, int(details.get("nvml_samples") or 0) - int(details.get("nvml_samples_idle") or 0))
    return min(1.0, float(counts.get(reason, 0)) / loaded)


def load_evidence(details: Mapping[str, Any], reasons: list[str] | None = None) -> str:
    """Plain words for what NVML saw under load: ``HW thermal slowdown active in 93 % of loaded
    samples; SM clock 1410 of 1980 MHz`` (``reasons``: the reasons to name, default all seen)."""
    shown = details.get("clocks_event_reasons") or [] if reasons is None else reasons
    parts = [f"{REASON_WORDS[r]} active{_sample_share(details, r)}" for r in shown if r in REASON_WORDS]
    median, most = details.get("sm_clock_mhz_median"), details.get("sm_clock_max_mhz")
    if median is not None and most:
        parts.append(f"SM clock {median:.0f} of {most:.0f} MHz")
    power, limit = details.get("power_w_max"), details.get("power_limit_w")
    if POWER_CAP in shown and power is not None and limit:
        parts.append(f"power {power:.0f} W at a {limit:.0f} W limit")
    for name, label in (("width", "x"), ("generation", "Gen")):
        seen, best = details.get(f"pcie_{name}_min_loaded"), details.get(f"pcie_{name}_max")
        if seen is not None and best is not None and seen < best:
            parts.append(f"PCIe {label}{seen} of {label}{best} under load")
    return "; ".join(parts)


def _sample_share(details: Mapping[str, Any], reason: str) -> str:
    counts = details.get("clocks_event_reason_samples")
    loaded = int(details.get("nvml_samples") or 0) - int(details.get("nvml_samples_idle") or 0)
    if not isinstance(counts, Mapping) or reason not in counts or loaded <= 0:
        return ""
    return f" in {100 * float(counts[reason]) / loaded:.0f} % of {loaded} loaded samples"


# What a rule found: the finding's kind, severity and evidence, and the cause that picks its action
# (the kind's own, or a finer one: a failed row remap is an ``ecc`` finding that asks for the GPU's
# replacement).
Outcome = tuple[Kind, Severity, str, Cause]


def _throttled(gpu: GpuTelemetry, share_pct: float) -> Outcome | None:
    reasons = active_reasons(gpu.under_load, share_pct)
    if reasons is None:  # no load evidence: fall back on the idle reading's hardware reasons only
        reading = gpu.readings.get("clocks_event_reasons") or {}
        reasons = [r for r in (reading.get("details") or {}).get("active", []) if r in HARDWARE_REASONS]
    hardware = [r for r in reasons if r in HARDWARE_REASONS]
    software = [r for r in reasons if r in SOFTWARE_REASONS]
    if not hardware and not software:
        return None
    evidence = load_evidence(gpu.under_load, hardware + software)
    severity = Severity.FAIL if hardware else Severity.WARN
    return Kind.THROTTLED, severity, evidence or ", ".join(hardware + software), Cause.THROTTLED


def _degraded_pcie(gpu: GpuTelemetry) -> Outcome | None:
    problems = pcie_problems(gpu)
    return (Kind.DEGRADED_PCIE, Severity.FAIL, "; ".join(problems), Cause.DEGRADED_PCIE) if problems else None


def pcie_problems(gpu: GpuTelemetry) -> list[str]:
    """The ways the GPU's PCIe link trained below what it can run: narrower, or (under load) a
    lower generation. Empty when the link is at full width and generation."""
    load = gpu.under_load
    width = _loaded_or_idle(gpu, "pcie_width_min_loaded", "pcie_width")
    width_max = _loaded_or_idle(gpu, "pcie_width_max", "pcie_width_max")
    generation = load.get("pcie_generation_min_loaded")  # idle links train down: only under load
    generation_max = _loaded_or_idle(gpu, "pcie_generation_max", "pcie_generation_max")
    problems = []
    if width is not None and width_max is not None and width < width_max:
        problems.append(f"PCIe link x{width:.0f} of x{width_max:.0f}")
    if generation is not None and generation_max is not None and generation < generation_max:
        problems.append(f"PCIe Gen{generation:.0f} of Gen{generation_max:.0f} under load")
    return problems


def _loaded_or_idle(gpu: GpuTelemetry, loaded: str, idle: str) -> Any:
    """The figure the sampler kept under load, else the idle reading's (read only when needed)."""
    return gpu.under_load[loaded] if loaded in gpu.under_load else gpu.value(idle)


def nvlink_down(gpu: GpuTelemetry) -> Outcome | None:
    """The ``nvlink_down`` outcome when one of the GPU's wired NVLinks is down, else None (an
    unwired link slot NVML reads as inactive is not down: GpuTelemetry.wired_nvlinks)."""
    links = gpu.wired_nvlinks()
    down = [link.get("link") for link in links if link.get("state") == "down"]
    if not down:
        return None
    names = ", ".join(str(d) for d in down)
    up = len(links) - len(down)
    evidence = f"NVLink {names} down; {up} of {len(links)} up"
    wiring = gpu.nvlink_wiring
    if wiring is not None and wiring.source == WIRED_BY_PEERS:
        seen = [wiring.peers_up.get(int(link), (0, 0)) for link in down if isinstance(link, int)]
        if seen:
            evidence += (f"; the SKU table does not list {gpu.gpu_model}: up on {min(s[0] for s in seen)} of "
                         f"{max(s[1] for s in seen)} other GPUs of this model")
    return Kind.NVLINK_DOWN, Severity.FAIL, evidence, Cause.NVLINK_DOWN


def _ecc(gpu: GpuTelemetry) -> Outcome | None:
    volatile = gpu.value("ecc_uncorrected_volatile") or 0
    errors = f"{volatile:.0f} uncorrectable ECC errors since the last reset"
    if gpu.value("remapped_rows_failure"):
        return Kind.ECC, Severity.FAIL, f"a row remap failed; {errors}", Cause.ECC_REMAP_FAILED
    if volatile:
        return Kind.ECC, Severity.FAIL, errors, Cause.ECC
    if gpu.value("remapped_rows_pending"):
        rows = gpu.value("remapped_rows_uncorrectable") or 0
        pending = f"row remap pending ({rows:.0f} rows remapped for uncorrectable errors)"
        return Kind.ECC, Severity.WARN, pending, Cause.ECC
    return None
