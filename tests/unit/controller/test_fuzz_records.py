"""Hostile records through the whole controller (hypothesis).

An eight-node simulated fleet with one slow GPU planted; one node's output (the JSON lines the bundle
prints for every probe: the simulator prints what the real bundle prints) is mutated — one field
anywhere changed to another type, NaN, Infinity, 1e308, -1, a huge or control-character string;
records duplicated, added for GPUs the node lacks, dropped; a line cut short — and the sweep goes
through the real path (parse, validate, HostOutcome, analyse, re-test, every report and the sweep
document as strict JSON: tests/hostilefleet.py). Nothing may escape as an exception, and every
other node's findings (kind, severity, host, GPU, metric) must be those of the unmutated run: a
node speaks only for itself.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import hostilefleet as fleet
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Values a hostile node may put anywhere: other types, non-finite and extreme numbers, long and
# control-character strings, markup a report might interpret.
HOSTILE_TEXT = ("\x1b[2J\x1b]0;owned\x07\x1b[31m[bold red]red[/] [link=https://evil.example]x[/link] "
                "<script>alert(1)</script> [click](javascript:alert(1)) | cell |\u202egnp.exe\r\nFAKE LINE")
HOSTILE_VALUES = st.one_of(
    st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e308, -1e308, -1, -1.5, 0, 10**30, -(10**30),
                     "two", "", "x" * 200_000, HOSTILE_TEXT, True, False, None, [], {}, [1, "a", None],
                     {"nested": {"deeper": [float("nan")]}}, "cuda:999", "gpu:-1", "NaN"]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
# Fields some reader of the controller reads (grep gpudiag/ for details.get, params.get, facts.get):
# half of the field changes pick one of these where the record has it.
READ_FIELDS = frozenset({
    "probe", "device", "gpu_uuid", "metric", "value", "unit", "samples", "cv", "status", "reason", "params",
    "details", "dtype", "m", "n", "k", "mode", "direction", "buffer_mib", "src", "dst", "memory", "rail",
    "pci_bus_id", "name", "nvml_index", "links", "link", "state", "crc_errors", "replay_errors",
    "recovery_errors", "active", "clocks_event_reasons", "clocks_event_reason_samples", "nvml_samples",
    "nvml_samples_idle", "sm_clock_mhz_median", "sm_clock_max_mhz", "power_w_max", "power_limit_w",
    "pcie_width_min_loaded", "pcie_width_max", "pcie_generation_min_loaded", "pcie_generation_max", "source",
    "gpu_model", "gpu_count", "gpu_memory_mib", "driver_version", "cuda_version", "torch_version", "cpu_model",
    "cpu_count", "cpu_count_usable", "load_average_1m", "memory_total_mib", "memory_available_mib",
    "pci_gpu_count", "nvml_gpu_count", "torch_unavailable", "hostname", "gpu_uuids", "pause"})

Records = list[dict[str, Any]]
Mutation = Callable[[Records], Records]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value where another value could stand (dict keys and list items)."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            found.append((*prefix, key))
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:20]):
            found.append((*prefix, index))
            found += _paths(item, (*prefix, index))
    return found


def _set(record: dict[str, Any], path: tuple[Any, ...], new: Any) -> None:
    target: Any = record
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new


def _kind(record: dict[str, Any]) -> str:
    """What a record is, for drawing: its probe, and for telemetry its metric (the readings differ)."""
    probe = str(record.get("probe"))
    return f"{probe}.{record.get('metric')}" if probe == "telemetry" else probe


@st.composite
def change_field(draw: st.DrawFn, records: Records) -> tuple[str, Records]:
    """One field of one record, drawn kind first so each probe (and telemetry reading) is as likely."""
    kind = draw(st.sampled_from(sorted({_kind(r) for r in records})))
    index = draw(st.sampled_from([i for i, r in enumerate(records) if _kind(r) == kind]))
    record = copy.deepcopy(records[index])
    paths = _paths(record)
    read = [path for path in paths if path[-1] in READ_FIELDS]
    path = draw(st.sampled_from(read if read and draw(st.booleans()) else paths))
    new = draw(HOSTILE_VALUES)
    _set(record, path, new)
    changed = [*records[:index], record, *records[index + 1:]]
    return f"record {index} ({kind}) {path} = {new!r:.60}", changed


@st.composite
def change_facts(draw: st.DrawFn, records: Records) -> tuple[str, Records]:
    """A field of the facts record (what keys, counts and starvation are read from)."""
    index = next((i for i, r in enumerate(records) if r.get("probe") == "facts" and isinstance(r.get("details"), dict)
                  and r["details"]), None)
    if index is None:
        return "no facts record left to change", records
    record = copy.deepcopy(records[index])
    name = draw(st.sampled_from(sorted(record["details"], key=str)))
    new = draw(HOSTILE_VALUES)
    record["details"][name] = new
    return f"facts.{name} = {new!r:.60}", [*records[:index], record, *records[index + 1:]]


@st.composite
def duplicate(draw: st.DrawFn, records: Records) -> tuple[str, Records]:
    index = draw(st.integers(0, len(records) - 1))
    copies = draw(st.integers(1, 5))
    twin = copy.deepcopy(records[index])
    if draw(st.booleans()) and fleet.is_finite_number(twin.get("value")):
        twin["value"] = twin["value"] * draw(st.sampled_from([0.5, 2.0, 1.0]))
    return f"record {index} {copies} more times", records + [copy.deepcopy(twin) for _ in range(copies)]


@st.composite
def ghost_gpus(draw: st.DrawFn, records: Records) -> tuple[str, Records]:
    """Records of a per-GPU probe for GPUs the node does not have (the issue's 1,500 TFLOP/s)."""
    candidates = [r for r in records if _per_gpu(r) and r.get("status") == "ok"]
    if not candidates:
        return "no GPU record to copy", records
    template = draw(st.sampled_from(candidates))
    first = draw(st.sampled_from([8, 9, 64]))
    count = draw(st.sampled_from([1, 2, 100]))
    value = draw(st.sampled_from([1500.0, template["value"], 0.001]))
    prefix = template["device"].split(":")[0]
    added = []
    for number in range(first, first + count):
        ghost = copy.deepcopy(template)
        ghost["device"] = f"{prefix}:{number}"
        ghost["gpu_uuid"] = f"GPU-ghost-{number}"
        ghost["value"] = value
        added.append(ghost)
    return f"{count} {_kind(template)} records from {prefix}:{first} at {value}", records + added


@st.composite
def drop(draw: st.DrawFn, records: Records) -> tuple[str, Records]:
    gone = set(draw(st.lists(st.integers(0, len(records) - 1), min_size=1, max_size=40)))
    victims = [r for r in records if _per_gpu(r)]
    if victims and draw(st.booleans()):  # a whole probe's records for one GPU
        victim = draw(st.sampled_from(victims))
        gone |= {i for i, r in enumerate(records)
                 if (r.get("probe"), r.get("device")) == (victim.get("probe"), victim.get("device"))}
    return f"{len(gone)} records dropped", [r for i, r in enumerate(records) if i not in gone]


def _per_gpu(record: dict[str, Any]) -> bool:
    return isinstance(record.get("device"), str) and record["device"].startswith(("cuda:", "gpu:"))


def _text(records: Records) -> str:
    return fleet.lines_of(records)


@st.composite
def mutated_output(draw: st.DrawFn, original: str) -> tuple[list[str], str]:
    """The node's output with one to three mutations, and their descriptions; the last may cut
    one line short."""
    records = fleet.records_of(original)
    said = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from([change_field, change_field, change_field, change_facts, duplicate, ghost_gpus,
                                     drop]))
        what, records = draw(kind(records))
        said.append(what)
        if not records:
            break
    text = _text(records)
    if draw(st.integers(0, 4)) == 0 and text:
        lines = text.splitlines(keepends=True)
        index = draw(st.integers(0, len(lines) - 1))
        cut = draw(st.integers(0, max(0, len(lines[index]) - 2)))
        lines[index] = lines[index][:cut] + "\n"
        said.append(f"line {index + 1} cut at {cut}")
        text = "".join(lines)
    return said, text


@pytest.fixture(scope="module")
def cache() -> fleet.OutputCache:
    return fleet.OutputCache()


@pytest.fixture(scope="module")
def unmutated(cache: fleet.OutputCache) -> fleet.Outputs:
    return fleet.sweep_and_report(fleet.ReplayConnector(cache))


def check_node_speaks_for_itself(cache: fleet.OutputCache, unmutated: fleet.Outputs, host: str, text: str) -> None:
    """Raises AssertionError unless ``host`` printing ``text`` leaves every other host's findings
    as they were and every output is written (strict JSON where JSON)."""
    outputs = fleet.sweep_and_report(fleet.ReplayConnector(cache, {host: text}))
    assert fleet.finding_keys(outputs.result, leave_out=host) == fleet.finding_keys(unmutated.result, leave_out=host)
    for name in ("json", "document-full", "document-compact"):
        fleet.strict_json(outputs.reports[name])
    for name, report in outputs.reports.items():
        assert "\x1b" not in report and "\u202e" not in report, name
    hosts = {entry.host: entry for entry in outputs.result.hosts}
    assert hosts[host].status in ("ok", "probe_error")


def test_the_unmutated_fleet_finds_only_the_planted_slow_gpu(unmutated: fleet.Outputs) -> None:
    keys = fleet.finding_keys(unmutated.result)
    assert keys == [("slow_gpu", "fail", fleet.SLOW_HOST, fleet.SLOW_GPU, "gemm.tflops")]
    assert unmutated.result.exit_code == 1


# Its number of cases is the hypothesis profile's (tests/conftest.py: 40 in the suite, 550 thorough).
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_mutated_node_changes_only_its_own_verdict(cache: fleet.OutputCache, unmutated: fleet.Outputs,
                                                     data: st.DataObject) -> None:
    host = data.draw(st.sampled_from(["node001", fleet.SLOW_HOST]), label="host")
    said, text = data.draw(mutated_output(cache.first_pass_text(host)), label="mutations")
    check_node_speaks_for_itself(cache, unmutated, host, text)


def test_json_constants_nan_and_infinity_are_what_python_reads() -> None:
    """The premise of the fuzz: Python's json reads the bare tokens a hostile node may print."""
    assert json.loads('{"v": NaN}')["v"] != json.loads('{"v": NaN}')["v"]
    assert json.loads('{"v": -Infinity}')["v"] == float("-inf")
