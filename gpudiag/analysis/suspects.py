"""From a sweep's records to suspects: one pass reads every measurement (with its baseline key),
the GPU telemetry and the records that are not ok; every key gets its references; a result below
one of them is a suspect; a re-test confirms, clears, or leaves it unconfirmed with the reason."""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from array import array
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..findings import Finding
from ..records import HostRecords, ProbeResult
from . import coverage, rules
from .counters import with_zero_counters
from .identity import HostGpus
from .keys import COMPARED_PROBES, host_keys
from .measurements import HOST_DEVICES, KeyInfo, KeyValues, Measurement, values_by_key
from .nodes import counted_medians, node_medians
from .noisy import (
    RunNoise,
    Screen,
    confirmation_bar,
    family_size,
    is_noisy,
    judge_runs,
    key_screen,
    measured_run_sd,
    noisy_in_runs,
    planned_runs,
    run_noise,
)
from .nvlinks import prewired
from .pairlevels import pool_pair_levels
from .ports import Port, read_ports
from .quiet import is_quiet
from .reference import (
    BASELINE,
    FLEET,
    SIBLINGS,
    SMALL_FLEET_HOSTS,
    KeyReferences,
    key_references,
    pool_spreads,
    typical_spreads,
)
from .siblings import (
    HostGroups,
    against_siblings,
    below_siblings_again,
    below_siblings_in_runs,
    sibling_screen,
    siblings_alone,
    siblings_judge,
)
from .sku import FloorKey, floor_key, floors_for, wired_nvlinks
from .suspicion import Suspect, repeated_once, sibling_judged
from .thresholds import Thresholds
from .xid import PROBE as XID_PROBE

COMPUTE_PROBES = ("gemm", "smclock", "membw")
# A key of fewer values than this whose fleet spread came out tighter than its metric's typical one
# has its level found again, setting values aside by the typical spread (``references``). From a
# thousand values on, the spread above the healthy cluster rests on hundreds of them: of 2,000
# healthy keys of 1,024 values none had its level more than 0.2 of a spread high.
TRIM_POOLED_BELOW = 1000


class BaselineLookup(Protocol):
    def get(self, key: str) -> Any: ...


SkuFigures = Callable[[str | None], Mapping[FloorKey, float]]


@dataclass
class Readings:
    """What one pass over a sweep's hosts gathers."""

    found: list[Measurement]
    telemetry: dict[str, dict[str, rules.GpuTelemetry]]
    gaps: list[Finding]
    unkeyed: dict[str, int]
    not_ok: dict[str, list[ProbeResult]]
    # Which GPU each host's records name (NVML's index, UUID, bus id): gpudiag.analysis.identity.
    identities: dict[str, HostGpus] = dataclasses.field(default_factory=dict)
    # Each host's NIC ports (gpudiag.analysis.ports).
    ports: dict[str, tuple[Port, ...]] = dataclasses.field(default_factory=dict)
    # The hosts that printed the xid probe's records.
    xid_hosts: set[str] = dataclasses.field(default_factory=set)
    # Each host's node medians with the GPUs each rests on (gpudiag.analysis.nodes.counted_medians).
    medians: list[tuple[Measurement, int]] = dataclasses.field(default_factory=list)
    # Each host's GPUs (UUIDs) whose readings can make no telemetry finding (gpudiag.analysis.quiet).
    quiet: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    # Each host's GPUs' clock costs under load (HostReading.clock_costs).
    clock_costs: dict[str, Mapping[str, float | None]] = dataclasses.field(default_factory=dict)
    # Each key's values, joined from the hosts' (HostReading.values), for its references.
    values: dict[str, KeyValues] = dataclasses.field(default_factory=dict)
    # Each host's measurements (those of ``found``, in order).
    by_host: dict[str, list[Measurement]] = dataclasses.field(default_factory=lambda: defaultdict(list))


# Measurement from one tuple, without the generated __new__'s keyword handling (a million calls).
def _MEASUREMENT(values: tuple[Any, ...]) -> Measurement:  # noqa: N802 - a constructor
    return tuple.__new__(Measurement, values)


def measurements(hosts: Sequence[HostRecords],
                 telemetry: dict[str, dict[str, rules.GpuTelemetry]] | None = None) -> list[Measurement]:
    """The compared results of every ok host, in document order. With ``telemetry``, each ok
    host's GPU telemetry is gathered into it in the same pass (a large sweep is read once)."""
    return read_sweep(hosts, telemetry is not None, telemetry).found


def read_sweep(hosts: Iterable[HostRecords], with_telemetry: bool,
               telemetry: dict[str, dict[str, rules.GpuTelemetry]] | None = None) -> Readings:
    """Every ok host's reading (``HostReading``) gathered: a host that already carries one (a
    ``reading`` attribute, read as it finished: see ``SweepReader``) is not read again."""
    found: list[Measurement] = []
    reader = SweepReader()
    telemetry = telemetry if telemetry is not None else {}
    gaps: list[Finding] = []
    unkeyed: dict[str, int] = {}
    failed: dict[str, list[ProbeResult]] = {}
    identities: dict[str, HostGpus] = {}
    ports: dict[str, tuple[Port, ...]] = {}
    xid_hosts: set[str] = set()
    medians: list[tuple[Measurement, int]] = []
    quiet: dict[str, frozenset[str]] = {}
    clock_costs: dict[str, Mapping[str, float | None]] = {}
    values: dict[str, KeyValues] = {}
    by_host: dict[str, list[Measurement]] = defaultdict(list)
    for host in hosts:
        if host.status != "ok":
            continue
        reading = getattr(host, "reading", None) if with_telemetry else None
        if reading is None:
            reading = reader.read(host, with_telemetry)
        name = reading.host
        found += reading.found
        if reading.found:
            by_host[name] += reading.found
        if reading.unkeyed:
            unkeyed[name] = reading.unkeyed
        if with_telemetry:
            telemetry[name] = reading.gpus
            gaps += reading.gaps
        failed[name] = reading.not_ok
        identities[name] = reading.identities if reading.identities is not None else HostGpus(host.facts)
        ports[name] = reading.ports
        if reading.xid:
            xid_hosts.add(name)
        medians += reading.medians
        quiet[name] = reading.quiet
        clock_costs[name] = reading.clock_costs
        for key, key_values in reading.values.items():
            joined = values.get(key)
            if joined is None:
                joined = values[key] = KeyValues()
            joined.values += key_values
            joined.per_host[name] = joined.per_host.get(name, 0) + len(key_values)
    return Readings(found, telemetry, gaps, unkeyed, failed, identities, ports, xid_hosts, medians, quiet,
                    clock_costs, values, by_host)


@dataclass(frozen=True)
class HostReading:
    """What the analysis takes from one ok host: its compared measurements, its GPUs' telemetry,
    the gaps its records leave, how many compared results had no key, and its records not ok."""

    host: str
    found: list[Measurement]
    gpus: dict[str, rules.GpuTelemetry]
    gaps: list[Finding]
    unkeyed: int
    not_ok: list[ProbeResult]
    identities: HostGpus | None = None
    ports: tuple[Port, ...] = ()
    # Whether the host printed the xid probe's records (gpudiag.analysis.xid reads only those hosts').
    xid: bool = False
    # Its node medians, each with the GPUs it rests on (gpudiag.analysis.nodes.counted_medians).
    medians: tuple[tuple[Measurement, int], ...] = ()
    # Its GPUs whose readings can make no telemetry finding (gpudiag.analysis.quiet).
    quiet: frozenset[str] = frozenset()
    # Each GPU's clock cost under load (UUID -> percent, None: no clocks: rules.clock_cost_pct).
    clock_costs: Mapping[str, float | None] = dataclasses.field(default_factory=dict)
    # The values of ``found`` by key, in order (measurements.values_by_key): for the references.
    values: Mapping[str, list[float]] = dataclasses.field(default_factory=dict)


class SweepReader:
    """Reads ok hosts one at a time — in the sweep's worker threads as each host finishes, so the
    analysis after the last host only joins the readings — sharing one object per distinct
    string and parameter set across the sweep (safe from several threads)."""

    def __init__(self) -> None:
        self._shared = _Shared()
        self._median_infos: dict[tuple[str, str | None], KeyInfo] = {}

    def read(self, host: HostRecords, with_telemetry: bool = True) -> HostReading:
        facts = host.facts
        name = host.host
        identities = HostGpus(facts)
        collector = rules.TelemetryCollector(name, facts.get("gpu_model"), facts.get("driver_version"), identities) \
            if with_telemetry else None
        found: list[Measurement] = []
        unkeyed: dict[str, int] = {}
        results = host.results
        not_ok = _read_host(results, name, facts, collector, self._shared, found, unkeyed)
        ports = read_ports(name, results, facts) if with_telemetry else ()
        gpus = collector.gpus() if collector is not None else {}
        gaps = coverage.record_gaps(name, not_ok, facts, identities) if collector is not None else []
        xid = any(result.probe == XID_PROBE for result in results)
        quiet = frozenset(uuid for uuid, gpu in gpus.items() if is_quiet(gpu))
        wired = {uuid: with_zero_counters(gpu) for uuid, gpu in prewired(gpus, wired_nvlinks).items()}
        # Keyed by the very UUID strings of ``found``: a key's 80,000 look-ups find them at once.
        costs = {self._shared.text(uuid): rules.clock_cost_pct(gpu.under_load) for uuid, gpu in gpus.items()}
        return HostReading(name, found, wired, gaps, unkeyed.get(name, 0), not_ok,
                           identities, ports, xid, tuple(counted_medians(found, self._median_infos)), quiet,
                           costs, values_by_key(found))


# The probes whose records the telemetry collector reads (telemetry, and the load evidence).
_COLLECTED = frozenset({"telemetry", "gemm", "pcie"})


def _read_host(results: Iterable[ProbeResult], name: str, facts: Mapping[str, Any],
               collector: rules.TelemetryCollector | None, shared: _Shared, found: list[Measurement],
               unkeyed: dict[str, int]) -> list[ProbeResult]:
    """One host's records into ``found`` (and ``collector``); returns those not ok. The hot loop
    of a sweep's analysis (every record of every host), so written for speed."""
    key_of = host_keys(facts)
    model = facts.get("gpu_model")
    text = shared.text
    not_ok = []
    for result in results:
        probe = result.probe
        if collector is not None and probe in _COLLECTED:
            collector.add(result)
        if result.status != "ok":
            not_ok.append(result)
            continue
        if probe not in COMPARED_PROBES or result.value is None:
            continue
        key = key_of(result)
        if key is None:
            unkeyed[name] = unkeyed.get(name, 0) + 1
            continue
        info = shared.info(key, model)
        if info is None:
            info = shared.add_info(KeyInfo(text(key), text(probe), text(result.metric),
                                           shared.params(result.params), text(result.unit), model))
        cv = result.cv
        found.append(_MEASUREMENT((name, text(result.device), text(result.gpu_uuid), info,
                                   float(result.value), None if cv is None else abs(float(cv)))))
    return not_ok


class _Shared:
    """One object for each distinct string and parameter set of a sweep's measurements: a
    million measurements name a few hundred keys, devices and parameter sets."""

    def __init__(self) -> None:
        texts: dict[Any, Any] = {}
        self.text: Callable[[Any], Any] = lambda value: texts.setdefault(value, value)  # None maps to itself
        self._params: dict[tuple[tuple[str, Any], ...], Mapping[str, Any]] = {}
        self._infos: dict[tuple[str, str | None], KeyInfo] = {}

    def info(self, key: str, model: str | None) -> KeyInfo | None:
        return self._infos.get((key, model))

    def add_info(self, info: KeyInfo) -> KeyInfo:
        return self._infos.setdefault((info.key, info.gpu_model), info)

    def params(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        try:
            signature = tuple(sorted(params.items()))
            hash(signature)
        except TypeError:  # a list among the parameters: not shared, kept as it is
            return params
        return self._params.setdefault(signature, params)


def references(grouped: Mapping[str, Sequence[Measurement]], thresholds: Thresholds,
               baseline: BaselineLookup | None = None, skus: SkuFigures = floors_for,
               values: Mapping[str, KeyValues] | None = None) -> dict[str, KeyReferences]:
    """The references of every key of ``grouped`` (measurements by key: measurements.by_key)
    that has any (see gpudiag.reference). Each host weighs once in a key's fleet level: a value
    weighs 1 / (its host's values of the key). A key of fewer than ``TRIM_POOLED_BELOW`` values
    which set values aside has its level found again, setting values aside by the wider of its
    metric's typical spread and its own fleet spread (that of the values it kept; see
    gpudiag.analysis.reference's module). ``values``: each key's values and hosts as the sweep's
    readings joined them (Readings.values), the same as its measurements' (a key whose count
    differs is read from its measurements)."""
    figures: dict[str | None, Mapping[FloorKey, float]] = {}
    inputs: dict[str, Callable[[float], KeyReferences | None]] = {}
    refs = {}
    for key, same in grouped.items():
        m = same[0]
        if m.gpu_model not in figures:
            figures[m.gpu_model] = skus(m.gpu_model) if m.device not in HOST_DEVICES else {}
        figure = figures[m.gpu_model].get(floor_key(m.probe, m.metric, m.params))
        given = values.get(key) if values is not None else None
        if given is not None and len(given.values) == len(same):
            # As fresh floats side by side (the same values): sorting 80,000 floats scattered over
            # a sweep's heap waits on memory (a quarter of the time of the key's level).
            key_values, per_host = array("d", given.values).tolist(), given.per_host
        else:
            key_values, per_host = [one.value for one in same], Counter(one.host for one in same)
        weights = None if len(set(per_host.values())) == 1 else [1 / per_host[one.host] for one in same]
        by_host: dict[str, list[float]] = defaultdict(list)
        if len(per_host) < SMALL_FLEET_HOSTS:
            for one in same:
                by_host[one.host].append(one.value)
        inputs[key] = functools.partial(key_references, key_values, len(per_host),
                                        baseline.get(key) if baseline else None, figure, thresholds, weights,
                                        list(by_host.values()) or None)
        found_refs = inputs[key](0.0)
        if found_refs is not None:
            refs[key] = found_refs
    metric_of = {key: (grouped[key][0].gpu_model, grouped[key][0].probe, grouped[key][0].metric) for key in refs}
    typical = typical_spreads(refs, metric_of)
    for key, key_refs in refs.items():
        fleet, trim = key_refs.get(FLEET), typical.get(metric_of[key], 0.0)
        count = len(grouped[key])
        # (Where nothing was set aside, a wider spread sets nothing aside either.) Values are set
        # aside by the spread above the densest window, which a crowd at the top makes tight; the
        # spread of the values kept, or the metric's typical one, is the firmer figure. A model's
        # one GEMM key is its metric's only key: of its 128 healthy values at 2 % noise, 27 were
        # set aside, its level came out 0.6 % over their median, and a healthy GPU's re-test mean,
        # 3.6 sigma below the truth by chance among a thousand judged, was confirmed slow.
        if fleet is not None and fleet.level_values < count < TRIM_POOLED_BELOW:
            refs[key] = inputs[key](max(trim, fleet.spread / fleet.value)) or key_refs
    return pool_pair_levels(pool_spreads(refs, metric_of, thresholds, typical), grouped, thresholds)


def find_suspects(found: Sequence[Measurement], refs: Mapping[str, KeyReferences],
                  thresholds: Thresholds, by_host: Mapping[str, Sequence[Measurement]] | None = None) -> list[Suspect]:
    """Results both far (robust z) and materially (deficit) below one of their references (fleet,
    baseline, SKU), or, where their key has no fleet or baseline, below their siblings (the other
    GPUs of their node: gpudiag.analysis.siblings); a suspect their siblings flag too carries that
    judgement (``sibling``). Every spread is at least the
    host's samples' CV of that probe and metric (capped at ``sample_cv_cap``). On a key whose
    ``robust_z`` cut lies deeper than ``deficit_warn`` (gpudiag.analysis.noisy.screens) a GPU
    ``deficit_warn`` below is a suspect too (``screened``), and every suspect of a noisy key asks
    for several re-test runs. ``by_host``: ``found`` by host
    (Readings.by_host), so that the siblings of a few hundred hosts are gathered without reading
    every result again."""
    # Each key's references, screen (None: none, found at its first GPU result) and whether
    # its siblings judge alone; a result above every cutoff its key has is fine (most are), and
    # the siblings and each host's noise are gathered only for the hosts of the rest.
    # (Keyed by key and whether the device is a GPU: a host's own figure has no screen.)
    per_key: dict[tuple[str, bool], tuple[KeyReferences | None, Screen | None, bool, float]] = {}
    # Each key's highest cutoff over both kinds of device, once a GPU of it was judged and its key
    # is not noisy (every GPU result of a noisy key is counted below; a screen's cutoff is in the
    # top): one comparison a result.
    tops: dict[str, float] = {}
    family: list[tuple[str, str]] = []  # the GPU results of noisy keys: those a re-test in several runs may judge
    candidates: list[tuple[Measurement, tuple[KeyReferences | None, Screen | None, bool, float]]] = []
    for m in found:
        info = m.info
        top = tops.get(info.key)
        if top is not None and m.value > top:
            continue
        place = (info.key, m.device not in HOST_DEVICES)
        judging = per_key.get(place)
        if judging is None:
            judging = per_key[place] = _judging(refs.get(info.key), info.probe, m.device, place[1], thresholds)
            if place[1] and (judging[1] is None or not judging[1].noisy):
                tops[info.key] = max(judging[3], _judging(judging[0], info.probe, "host", False, thresholds)[3])
        if judging[1] is not None and judging[1].noisy:
            family.append((m.host, info.key))
        if m.value <= judging[3]:
            candidates.append((m, judging))
    hosts = {m.host for m, _ in candidates}
    theirs = ((m for m in found if m.host in hosts) if by_host is None
              else (m for host in hosts for m in by_host.get(host, ())))
    groups = HostGroups(theirs)
    cap = thresholds.sample_cv_cap_pct / 100
    suspects = []
    for m, (key_refs, screen, alone, _) in candidates:
        noise = min(cap, groups.noise(m.host, m.probe, m.metric))
        ref = key_refs.flagging(m.value, thresholds, noise) if key_refs is not None else None
        # The siblings are asked only where they may judge.
        if ref is not None:  # its siblings' screen too: a GPU of a host slow as a whole is slower still
            sibling = against_siblings(m, groups, key_refs, noise, thresholds) or \
                sibling_screen(m, groups, key_refs, noise, thresholds)
            suspects.append(Suspect(m, ref, ref.robust_z(m.value), ref.deficit_pct(m.value), sibling=sibling))
        elif alone:
            sibling = against_siblings(m, groups, key_refs, noise, thresholds) or \
                sibling_screen(m, groups, key_refs, noise, thresholds)
            if sibling is not None:
                suspects.append(sibling)
        elif screen is not None and m.value <= screen.cutoff:
            judged = screen.reference.widened(noise)
            suspects.append(Suspect(m, judged, judged.robust_z(m.value), judged.deficit_pct(m.value),
                                    sibling=against_siblings(m, groups, key_refs, noise, thresholds),
                                    screened=True))
    return with_runs(suspects, thresholds, family_size(family))


def _judging(key_refs: KeyReferences | None, probe: str, device: str, on_gpu: bool,
             thresholds: Thresholds) -> tuple[KeyReferences | None, Screen | None, bool, float]:
    """How ``find_suspects`` judges a key's results on a GPU (``on_gpu``) or a host-wide device:
    its references, its noisy screen (None: not noisy; never for a host-wide one), whether its
    siblings judge alone, and the highest value any of them may flag."""
    screen = key_screen(key_refs, probe, device, thresholds) if key_refs and on_gpu else None
    alone = siblings_alone(key_refs)
    top = math.inf if alone or key_refs is None else max(
        key_refs.cutoff, screen.cutoff if screen is not None else -math.inf)
    return key_refs, screen, alone, top


def with_runs(suspects: Sequence[Suspect], thresholds: Thresholds, family: int = 0) -> list[Suspect]:
    """``suspects`` each with the re-test runs it asks for: one, or on a noisy key as many as its
    spread needs at the bar ``family`` results judged on their runs face
    (gpudiag.analysis.noisy.planned_runs). A GPU its siblings judge (gpudiag.analysis.siblings.siblings_judge) asks
    for two or more: it is judged on the re-test alone (siblings.below_siblings_again)."""
    noisy = [is_noisy(s.reference, s.measurement.probe, s.measurement.device, thresholds) for s in suspects]
    bar = confirmation_bar(max(family, sum(noisy)), thresholds)
    planned = []
    for suspect, is_noisy_one in zip(suspects, noisy, strict=True):
        runs = (planned_runs(suspect.reference, bar, thresholds) if is_noisy_one
                else _quiet_runs(suspect, bar, thresholds))
        sibling = siblings_judge(suspect)
        if sibling is not None:
            runs = max(runs, planned_runs(sibling, abs(thresholds.robust_z), thresholds))
        planned.append(dataclasses.replace(suspect, runs=runs) if runs > 1 else suspect)
    return planned


def _quiet_runs(suspect: Suspect, bar: float, thresholds: Thresholds) -> int:
    """The re-test runs of a suspect on a quiet key, where it is judged on its runs alone
    (``_on_its_runs``): as many as show a deficit in the warn band (gpudiag.analysis.noisy.planned_runs:
    one run of a GPU 5 % slow at 1 % noise read under ``retest_deficit`` one time in fifteen, and
    the GPU passed; its first run, chosen low, had read 6.3 %). One where its first run is past
    ``deficit_fail`` by two of its spreads, or it is not judged on its runs."""
    if not _on_its_runs(suspect):
        return 1
    ref = suspect.reference
    spread_pct = 100 * ref.spread / abs(ref.value) if ref.value else 0.0
    if suspect.deficit_pct >= thresholds.deficit_fail_pct + 2 * spread_pct:
        return 1
    return planned_runs(ref, bar, thresholds)


def single_runs(suspects: Sequence[Suspect]) -> list[Suspect]:
    """``suspects`` for a re-test of one run: those one run flagged (never a noisy key's screen
    alone, which one more run cannot confirm), each asking for one run."""
    return [dataclasses.replace(s, runs=1) for s in suspects if not s.screened]


def confirm(suspects: Sequence[Suspect], retest_hosts: Sequence[HostRecords] | None,
            thresholds: Thresholds, refs: Mapping[str, KeyReferences] | None = None,
            found: Sequence[Measurement] = ()) -> list[Suspect]:
    """Suspects whose re-test repeats the deficit are confirmed; those whose re-test does not are
    dropped (a one-off dip). A suspect the re-test could not measure (its host unreachable or
    timed out, an error record, no figure) stays, unconfirmed, with the reason as its note.

    A run chosen for being low cannot also confirm itself: a GPU's result or a GPU pair's below a
    measured reference (the fleet's level, the baseline) is judged on its re-test runs alone, one
    or several, their mean against the spread of such a mean (the run-to-run noise, measured
    where the re-test gives enough of it, and the level's own error) at a bar that rises with the
    results so judged (gpudiag.analysis.noisy.judge_runs). Its first run only chose it. Before, a
    healthy GPU pair confirmed on the mean of its biased first run and one re-test, against a
    level from 16 hosts that sat a spread high, in two sweeps of three. A node median, or a
    result below the SKU figure alone (a fixed figure whose spread is three times the run-to-run
    noise), is confirmed as before: the re-test must fall below the reference too (a node median's
    flagged by itself) and the mean of both runs ``retest_deficit`` and ``robust_z`` below it.

    ``retest_hosts`` holds every re-test run (a host once per run it took part in). ``found``:
    the first pass's measurements; a result of a re-tested host that no suspect chose measures the
    run-to-run noise with its re-test (gpudiag.analysis.noisy.run_noise). With ``refs`` (the
    first pass's), every other GPU result of a noisy key that the re-test measured in several runs
    is judged on its runs' mean too: a host re-tested for one GPU measured all of them again, and
    a slow GPU's first run may have been lifted above the screen by its noise. For the same
    reason a GPU so judged whose first run was no lower than its siblings' is held against their
    re-test runs as well (siblings.below_siblings_in_runs): below them, it is a broken GPU of its
    host, not only its host's slow figure."""
    if retest_hosts is None:
        return [dataclasses.replace(s, note="not re-tested") for s in suspects]
    runs: dict[tuple[str, ...], list[Measurement]] = defaultdict(list)
    for m in measurements([h for h in retest_hosts if h.status == "ok"]):
        runs[m.repeat_key].append(m)
    again_found = [_mean_of(values) for values in runs.values()]
    again_found += node_medians(again_found, thresholds)  # a node median's re-test is the re-test's
    repeats = {m.repeat_key: m for m in again_found}
    again_groups = HostGroups(again_found)
    chosen = {s.measurement.repeat_key for s in suspects}
    retested = {host.host for host in retest_hosts}
    firsts = {m.repeat_key: m for m in found if m.host in retested and m.repeat_key not in chosen}
    noise = run_noise(runs, firsts)
    in_runs = noisy_in_runs(runs, suspects, refs, thresholds) if refs is not None else {}
    judged = [(key[0], runs[key][0].key) for key in in_runs]
    judged += [(s.measurement.host, s.measurement.key) for s in suspects if _on_its_runs(s)]
    bar = confirmation_bar(family_size(judged), thresholds)
    by_host = {h.host: h for h in retest_hosts}
    kept = []
    for suspect in suspects:
        key = suspect.measurement.repeat_key
        again = repeats.get(key)
        host = by_host.get(suspect.measurement.host)
        if suspect.screened and (again is None or len(runs[key]) < 2):
            # A screen alone was never a finding: gone unless its host's re-test failed outright.
            if again is None and host is not None and host.status != "ok":
                kept.append(dataclasses.replace(suspect, note=_retest_gap(suspect.measurement, host),
                                                retest_failed=True))
            continue
        if again is None:
            kept.append(dataclasses.replace(suspect, note=_retest_gap(suspect.measurement, host),
                                            retest_failed=host is not None))
            continue
        sibling, cleared = sibling_judged(suspect), None
        run_sd = measured_run_sd(noise, suspect.measurement.key)
        if sibling is not None:  # on the re-test runs alone, against the re-test's siblings
            again_sibling = below_siblings_again(sibling, again, again_groups, thresholds, len(runs[key]), run_sd)
            # Not below them again: a screen its re-test did not confirm (suspicion.cleared_by_siblings),
            # kept on the suspect so that its node knows its siblings cleared it.
            cleared = dataclasses.replace(sibling, screened=True, confirmed=False) if again_sibling is None else None
            sibling = again_sibling
        if _on_its_runs(suspect):
            repeated = _repeated_runs(suspect, runs[key], noise.get(suspect.measurement.key), bar, thresholds)
            if repeated is not None and sibling is None and cleared is None:
                # no lower than its siblings in its first run: its re-test runs may still put it below them
                sibling = below_siblings_in_runs(again, len(runs[key]), again_groups, thresholds, run_sd)
        elif suspect.reference.source == SIBLINGS:
            repeated = sibling
        else:
            repeated = repeated_once(suspect, again, thresholds)
        if repeated is not None:
            kept.append(repeated if repeated is sibling else dataclasses.replace(repeated, sibling=sibling or cleared))
        elif sibling is not None and not suspect.reference.rests_on_many():
            # below its siblings again, no longer below the SKU figure or a baseline of a node (siblings_alone)
            kept.append(sibling)
    cap = thresholds.sample_cv_cap_pct / 100
    for key, screen in in_runs.items():
        values = runs[key]
        first = values[0]
        ref = screen.reference.widened(min(cap, again_groups.noise(first.host, first.probe, first.metric)))
        found_here = Suspect(first, ref, ref.robust_z(first.value), ref.deficit_pct(first.value), screened=True)
        repeated = _repeated_runs(found_here, values, noise.get(first.key), bar, thresholds)
        if repeated is not None:
            sibling = below_siblings_in_runs(repeats[key], len(values), again_groups, thresholds,
                                              measured_run_sd(noise, first.key))
            kept.append(dataclasses.replace(repeated, sibling=sibling) if sibling is not None else repeated)
    return kept


def _on_its_runs(suspect: Suspect) -> bool:
    """Whether ``suspect`` is judged on its re-test runs alone: a GPU's result (or a GPU pair's)
    below a measured reference, the fleet's level or the baseline (``confirm``)."""
    return suspect.reference.source in (FLEET, BASELINE) and suspect.measurement.device not in HOST_DEVICES


def _mean_of(values: Sequence[Measurement]) -> Measurement:
    """One result's re-test runs as one measurement: the first, with the runs' mean."""
    if len(values) == 1:
        return values[0]
    return values[0]._replace(value=statistics.fmean(m.value for m in values))


def _repeated_runs(suspect: Suspect, values: Sequence[Measurement], noise: RunNoise | None, bar: float,
                   thresholds: Thresholds) -> Suspect | None:
    """``suspect`` confirmed by the mean of its re-test runs ``values`` alone, or None."""
    verdict = judge_runs(suspect.reference, (m.value for m in values), noise, bar, thresholds)
    if not verdict.confirmed:
        return None
    # The finding shows what confirmed it: the runs' mean, the level it was judged against, its deficit and z.
    return dataclasses.replace(suspect, measurement=suspect.measurement._replace(value=verdict.mean),
                               reference=verdict.reference, deficit_pct=verdict.deficit_pct,
                               robust_z=verdict.robust_z, confirmed=True, note=verdict.note)


def _retest_gap(m: Measurement, host: HostRecords | None) -> str:
    if host is None:
        return "not re-tested"
    if host.status != "ok":
        return f"re-test {host.status}: {host.error or 'no detail'}"
    for record in host.results:
        if (record.probe, record.device) == (m.probe, m.device) and record.status == "error":
            return f"re-test failed: {record.reason or 'no reason given'}"
    return "the re-test gave no figure for it"

