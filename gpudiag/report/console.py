"""Terminal rendering of one node's probe results (``gpudiag probe``)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.console import Console

from ..records import ProbeResult
from .tables import Column, TableSpec, fit_table, print_tables, split_table

# Probes shown as one row per measurement; telemetry and p2p get tables of their own.
MEASUREMENT_PROBES = ("gemm", "membw", "pcie", "smclock")
TELEMETRY_COLUMNS = (
    ("SM clock MHz", ("sm_clock", "sm_clock_max")),
    ("temp C", ("gpu_temperature",)),
    ("power W", ("power_draw", "power_limit")),
    ("PCIe gen", ("pcie_generation", "pcie_generation_max")),
    ("PCIe width", ("pcie_width", "pcie_width_max")),
    ("PCIe replays", ("pcie_replay_count",)),
    ("ECC uncorr.", ("ecc_uncorrected_volatile",)),
    ("rows pending", ("remapped_rows_pending",)),
    ("NVLinks up", ("nvlink_links_up",)),
)


def render_probe_results(results: Sequence[ProbeResult], console: Console) -> None:
    """Print the node's facts line, measurements, P2P matrices, telemetry and anything not ok,
    each table within the console's width (split into several where it is too narrow)."""
    facts = next((r for r in results if r.probe == "facts" and r.ok), None)
    if facts is not None:  # the node's own words: never read as rich markup
        console.print(facts_line(facts.details), markup=False, highlight=False)
    for spec in probe_tables(results):
        print_tables(console, split_table(spec, console.width))
    for line in not_ok_lines(results):
        console.print(line, markup=False, highlight=False)


def probe_tables(results: Sequence[ProbeResult]) -> list[TableSpec]:
    """The tables of one node's results that have something to show: measurements, the P2P
    matrices (unidirectional, bidirectional), telemetry."""
    specs = []
    measurements = [r for r in results if r.probe in MEASUREMENT_PROBES and r.ok]
    if measurements:
        specs.append(_measurement_table(measurements))
    for direction in ("unidirectional", "bidirectional"):
        pairs = [r for r in results if r.probe == "p2p" and r.ok and r.params.get("direction") == direction]
        if pairs:
            specs.append(_p2p_table(pairs, direction))
    telemetry = [r for r in results if r.probe == "telemetry" and r.metric != "nic_port"]
    if any(r.ok for r in telemetry):
        specs.append(_telemetry_table(telemetry))
    ports = [r for r in results if r.probe == "telemetry" and r.metric == "nic_port" and r.ok]
    if ports:
        specs.append(_port_table(ports))
    return specs


def facts_line(facts: dict[str, Any] | Any) -> str:
    """One line: host, GPUs, driver and software versions."""
    gpus = (f"{facts.get('gpu_count')}x {facts.get('gpu_model')}" if facts.get("gpu_count")
            else "no CUDA GPU")
    parts = [str(facts.get("hostname")), gpus, f"{facts.get('cpu_count')} CPUs"]
    for label, key in (("driver", "driver_version"), ("CUDA", "cuda_version"),
                       ("torch", "torch_version"), ("NCCL", "nccl_version")):
        if facts.get(key):
            parts.append(f"{label} {facts[key]}")
    moved = renumbered_devices(facts)
    if moved:
        parts.append(f"CUDA renumbers ({moved}; nvidia-smi -i takes the GPU number)")
    return " · ".join(parts)


def renumbered_devices(facts: dict[str, Any] | Any) -> str:
    """``cuda:3 is GPU 4, cuda:4 is GPU 5``: each ``cuda:N`` of the facts' map that is not NVML's
    GPU N (a GPU was lost, or CUDA_VISIBLE_DEVICES reorders them); empty when none is."""
    moved = []
    for entry in facts.get("gpus") or ():
        cuda, nvml = entry.get("cuda_index"), entry.get("nvml_index")
        if isinstance(cuda, int) and isinstance(nvml, int) and cuda != nvml:
            moved.append(f"cuda:{cuda} is GPU {nvml}")
    return ", ".join(moved)


def not_ok_lines(results: Iterable[ProbeResult]) -> list[str]:
    """One line per skipped or failed measurement, identical ones folded across devices."""
    grouped: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
    for result in results:
        if not result.ok:
            key = (result.status, result.probe, result.metric, result.reason or "")
            grouped[key].append(result.device)
    lines = []
    for (status, probe, metric, reason), devices in sorted(grouped.items()):
        where = ", ".join(sorted(set(devices), key=_device_order))
        lines.append(f"{status}: {probe}.{metric} on {where}: {reason}")
    return lines


def format_value(value: float | None, unit: str | None) -> str:
    """A value with three significant digits' worth of precision and its unit."""
    if value is None:
        return "-"
    if isinstance(value, int) or float(value).is_integer():
        text = f"{int(value)}"
    elif abs(value) >= 100:
        text = f"{value:.1f}"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}" if unit and unit not in ("count", "bool") else text


MEASUREMENT_COLUMNS = (Column("probe", "name"), Column("device", "name"), Column("metric", "name"),
                       Column("value"), Column("CV"), Column("samples"), Column("parameters", "text"),
                       Column("under load", "text"))


def _measurement_table(results: Sequence[ProbeResult]) -> TableSpec:
    rows = []
    for r in results:
        cv = "-" if r.cv is None else f"{100 * r.cv:.2f} %"
        rows.append((r.probe, r.device, r.metric, format_value(r.value, r.unit), cv, str(r.samples),
                     describe_params(r.params), describe_load(r.details)))
    return TableSpec("Measurements", MEASUREMENT_COLUMNS, tuple(rows))


def describe_load(details: dict[str, Any] | Any) -> str:
    """What NVML saw while the probe loaded the GPU: SM clock against its maximum, throttle
    reasons, and a PCIe link running narrower or slower than it can."""
    words = []
    median, most = details.get("sm_clock_mhz_median"), details.get("sm_clock_max_mhz")
    if median is not None:
        words.append(f"SM {median:.0f}/{most} MHz" if most else f"SM {median:.0f} MHz")
    words.extend(details.get("clocks_event_reasons") or [])
    for name, label in (("generation", "gen"), ("width", "x")):
        seen, best = details.get(f"pcie_{name}_min_loaded"), details.get(f"pcie_{name}_max")
        if seen is not None and best is not None and seen < best:
            words.append(f"PCIe {label}{seen} of {label}{best}")
    return " · ".join(words) or ("-" if "nvml_unavailable" not in details else "no NVML")


def describe_params(params: dict[str, Any] | Any) -> str:
    """Probe parameters in few characters: ``bf16 8192³ concurrent``, ``device 1024 MiB``."""
    params = dict(params)
    words = []
    if "m" in params and params.get("m") == params.get("n") == params.get("k"):
        words.append(f"{params.pop('m')}³")
        params.pop("n")
        params.pop("k")
    for key, value in params.items():
        words.append(f"{value} MiB" if key.endswith("_mib") else str(value))
    return " ".join(words)


def _p2p_table(pairs: Sequence[ProbeResult], direction: str) -> TableSpec:
    """The matrix of pair figures; a destination's header is its number alone (``3`` for
    ``cuda:3``) where the console is too narrow for its whole name."""
    devices = sorted({str(r.params.get("src")) for r in pairs} | {str(r.params.get("dst")) for r in pairs},
                     key=_device_order)
    value = {(str(r.params.get("src")), str(r.params.get("dst"))): r.value for r in pairs}
    columns = (Column("", "name"), *(Column(device, short_title=device.rpartition(":")[2]) for device in devices))
    rows = tuple((source, *(_pair_cell(value, source, target, direction) for target in devices))
                 for source in devices)
    return TableSpec(f"P2P {direction} bandwidth, GB/s (row = source, column = destination)", columns, rows)


def _pair_cell(value: dict[tuple[str, str], float | None], source: str, target: str, direction: str) -> str:
    if source == target:
        return "-"
    found = value.get((source, target))
    if found is None and direction == "bidirectional":
        found = value.get((target, source))
    return "?" if found is None else f"{found:.1f}"


def _telemetry_table(results: Sequence[ProbeResult]) -> TableSpec:
    by_device: dict[str, dict[str, ProbeResult]] = defaultdict(dict)
    for r in results:
        by_device[r.device][r.metric] = r
    sources = sorted({str(r.details.get("source")) for r in results if r.ok and r.details.get("source")})
    columns = (Column("GPU", "name"), *(Column(title) for title, _ in TELEMETRY_COLUMNS),
               Column("clocks event reasons", "text"))
    rows = []
    for device in sorted(by_device, key=_device_order):
        metrics = by_device[device]
        cells = ["/".join(_metric_text(metrics.get(name)) for name in names) for _, names in TELEMETRY_COLUMNS]
        reasons = metrics.get("clocks_event_reasons")
        active = ", ".join(reasons.details.get("active", [])) if reasons and reasons.ok else "-"
        rows.append((device, *cells, active or "none"))
    return TableSpec(f"Telemetry ({', '.join(sources) or 'NVML'})", columns, tuple(rows))


def _port_table(ports: Sequence[ProbeResult]) -> TableSpec:
    """NIC ports (probes/nicports.py): state, rate with width and speed, link layer, model, and
    the error counters that are not 0."""
    columns = (Column("port", "name"), Column("state", "text"), Column("Gbit/s"), Column("link", "text"),
               Column("errors", "text"))
    rows = []
    for port in sorted(ports, key=lambda r: r.device):
        d = port.details
        state = " / ".join(str(d[key]) for key in ("state", "phys_state") if d.get(key))
        shape = " ".join(str(d[key]) for key in ("width", "speed") if d.get(key))
        rate = "n/a" if port.value is None else format_value(port.value, None) + (f" {shape}" if shape else "")
        link = " ".join(str(d[key]) for key in ("link_layer", "model") if d.get(key))
        counters = d.get("counters") or {}
        errors = ", ".join(f"{name} {count}" for name, count in sorted(counters.items()) if count) or "none"
        rows.append((port.device.removeprefix("nic:"), state or "-", rate, link or "-", errors))
    return TableSpec("NIC ports", columns, tuple(rows))


def _metric_text(result: ProbeResult | None) -> str:
    if result is None or not result.ok or result.value is None:
        return "n/a"
    return format_value(result.value, None)


def _device_order(device: str) -> tuple[str, int]:
    prefix, _, number = device.partition(":")
    return (prefix, int(number)) if number.isdigit() else (device, -1)


# Per-host columns of the sweep table: (column, probe, metric, params that must match). Where the
# console is narrow, d2h goes first, then h2d, then the SM clock (Column.drop_rank).
SWEEP_COLUMNS = (
    (Column("gemm TFLOP/s"), "gemm", "tflops", {}),
    (Column("membw GB/s"), "membw", "bandwidth", {}),
    (Column("h2d GB/s", drop_rank=2), "pcie", "bandwidth", {"direction": "h2d"}),
    (Column("d2h GB/s", drop_rank=3), "pcie", "bandwidth", {"direction": "d2h"}),
    (Column("SM MHz", drop_rank=1), "smclock", "sm_clock", {}),
)
SWEEP_TABLE_MAX_ROWS = 32


def render_sweep_table(result: Any, console: Console) -> None:
    """A compact per-host table of the measured hosts (min / median / max over each host's GPUs)
    within the console's width, the hosts its findings name first; the caption names any column
    left out for want of room and the rows left out."""
    measured = [host for host in result.hosts if host.results_count]  # only the rows shown are unpacked
    if measured:
        findings = _findings_by_host(result.findings)
        ordered = sorted(measured, key=lambda host: not findings.get(host.host))
        print_tables(console, [fit_table(sweep_table(ordered, findings), console.width, hint="see --json")])


def _findings_by_host(findings: Sequence[Any]) -> dict[str, list[Any]]:
    """Each host's findings: the ones that name it (as host, or as the peer of a pair)."""
    by_host: dict[str, list[Any]] = {}
    for finding in findings:
        for name in {finding.host, finding.peer} - {None}:
            by_host.setdefault(str(name), []).append(finding)
    return by_host


def sweep_table(hosts: Sequence[Any], findings: Mapping[str, Sequence[Any]] | None = None) -> TableSpec:
    """The per-host table of ``hosts`` (HostOutcome, in the order shown): the first
    SWEEP_TABLE_MAX_ROWS of them, each with the count of the findings that name it."""
    findings = findings or {}
    columns = (Column("host", "name"), Column("GPUs"), *(column for column, *_ in SWEEP_COLUMNS),
               Column("found"))
    rows = tuple(_sweep_row(host, findings.get(host.host, ())) for host in hosts[:SWEEP_TABLE_MAX_ROWS])
    more = len(hosts) - SWEEP_TABLE_MAX_ROWS
    caption = "found: the findings that name the host, fail/warn (those hosts first)"
    if more > 0:
        caption += f"; {more} more hosts in the JSON document (--json)"
    return TableSpec("Per host: min / median / max over its GPUs", columns, rows, caption)


def _sweep_row(host: Any, findings: Sequence[Any]) -> tuple[str, ...]:
    """One host's row: name, GPU count, the spread of each SWEEP_COLUMNS figure, its findings."""
    results = host.results  # read once: a HostOutcome may unpack its records on every read
    cells = [_spread([r.value for r in results if r.ok and r.probe == probe and r.metric == metric
                      and all(r.params.get(k) == v for k, v in params.items())])
             for _, probe, metric, params in SWEEP_COLUMNS]
    fails = sum(1 for f in findings if f.severity == "fail")
    counted = f"{fails}/{len(findings) - fails}" if findings else "-"
    return (host.host, str(host.facts.get("gpu_count", "-")), *cells, counted)


def _spread(values: Sequence[float | None]) -> str:
    numbers = sorted(v for v in values if v is not None)
    if not numbers:
        return "-"
    if len(numbers) == 1:
        return format_value(numbers[0], None)
    middle = statistics.median(numbers)
    return " / ".join(format_value(v, None) for v in (numbers[0], middle, numbers[-1]))
