"""Fleet baselines: the median and spread of every baseline key over chosen stored sweeps, kept
by name in the store (its ``baselines`` table), and their JSON form for moving them between stores.

A baseline is built only from finished sweeps (``baseline_sources``: never one killed before its
analysis or stopped by an interrupt), from results that no finding touched (the store leaves those
out), and never pools two keys: one entry per key (gpudiag.analysis.keys.result_key). The spread is the MAD, the
median absolute deviation, *unscaled*: median(|x - median(x)|). Multiply it by 1.4826 for a
standard-deviation estimate under normal noise; the analysis applies its own floor.

Pair tests have an entry per link group (gpudiag.analysis.keys.link_key: backend, rail, line rate) over
the pairs' figures — a pair's figure is the median of its runs in one sweep (the mean of two) — leaving out tests
with no figure and pairs that a link finding of that sweep touched (a slow NIC at either end on
that backend and rail, the pair itself slow or untestable). A file of an older gpudiag, with no
link entries, reads as before.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import statistics
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NoReturn

from ..analysis.keys import LINK_METRIC, LINK_PROBE, LINK_UNIT, hardware_key, link_key
from ..errors import InputError, StoreError
from ..links.attribution import BACKENDS, pair_means
from ..links.linkfindings import touched_links
from ..links.rounds import link_results
from ..schema.times import now_iso
from .completeness import Completeness
from .store import BaselineSample, Store, StoredLinks

BASELINE_SCHEMA = "gpudiag.baseline/1"
DEFAULT_MIN_COUNT = 3
# The baseline a sweep, a pre-flight or a triage judges against when none is named, if stored.
DEFAULT_BASELINE = "default"
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_TOP_FIELDS = ("schema", "name", "created_at", "source_sweeps", "entries")
_ENTRY_FIELDS = ("key", "median", "mad", "count", "unit")
_KEY_FIELDS = ("facts", "probe", "metric", "unit", "params")
_LINK_PARAMS = ("backend", "rail", "line_rate_gbps")


@dataclass(frozen=True)
class BaselineEntry:
    """The reference for one key: ``median`` and ``mad`` (unscaled MAD) in ``unit``, over ``count``
    measurements."""

    key: str
    median: float
    mad: float
    count: int
    unit: str | None


@dataclass(frozen=True)
class Baseline:
    """A named set of entries, one per baseline key. ``created_at`` is ISO 8601 UTC.
    ``skipped_keys`` are the keys left out for having too few measurements (not stored)."""

    name: str
    created_at: str
    source_sweeps: tuple[str, ...]
    entries: Mapping[str, BaselineEntry]
    skipped_keys: tuple[str, ...] = field(default=(), compare=False)

    def get(self, key: str) -> BaselineEntry | None:
        """The entry for ``key``, or None when the baseline has none."""
        return self.entries.get(key)

    def same_hardware(self, key: str) -> BaselineEntry | None:
        """For a key the baseline lacks: its entry of the same hardware, probe and parameters
        under other software (driver, CUDA, torch: gpudiag.analysis.keys.hardware_key), the figure the
        previous software measured. The one with the most measurements (then the lowest key)
        where there are several; None when there is none or the baseline has ``key`` itself."""
        if key in self.entries:
            return None
        wanted = hardware_key(key)
        matches = [entry for other, entry in self.entries.items() if hardware_key(other) == wanted]
        return min(matches, key=lambda entry: (-entry.count, entry.key), default=None)


def check_name(name: object, where: str = "baseline name") -> str:
    """``name`` when it is a usable baseline name (letters, digits, ``.``, ``_``, ``-``; at most 64,
    starting with a letter or digit). Raises InputError naming ``where`` otherwise."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InputError(f"{where}: {name!r} is not a usable name; use letters, digits, '.', '_' or '-' "
                         "(at most 64, starting with a letter or digit)")
    return name


def median_absolute_deviation(values: Sequence[float], center: float) -> float:
    """median(|x - center|) over ``values``, unscaled, in their unit. Raises ValueError when empty."""
    return statistics.median(abs(value - center) for value in values)


def baseline_sources(store: Store, sweep_ids: Sequence[str]) -> tuple[list[str], dict[str, Completeness]]:
    """Of ``sweep_ids`` (each once, in order), those a baseline may be built from, and how far each
    other got: a sweep killed before its analysis has no findings to leave its slow hosts out, and
    one an interrupt stopped judged only part of what it planned, so neither is a source
    (gpudiag.store.completeness). Raises StoreError for an unknown sweep id."""
    sources: list[str] = []
    skipped: dict[str, Completeness] = {}
    for sweep_id in dict.fromkeys(sweep_ids):
        progress = store.completeness(sweep_id)
        if progress.finished:
            sources.append(sweep_id)
        else:
            skipped[sweep_id] = progress
    return sources, skipped


def baseline_samples(store: Store, sweep_ids: Sequence[str]) -> Iterator[BaselineSample]:
    """Everything of the given sweeps that may go into a baseline: their results
    (Store.results_for_baseline) and then their pair figures (``link_samples``). Raises
    StoreError at once for an unknown sweep id."""
    results = store.results_for_baseline(sweep_ids)
    links = store.links_for_baseline(sweep_ids)
    return itertools.chain(results, (sample for stored in links for sample in link_samples(stored)))


def link_samples(stored: StoredLinks) -> list[BaselineSample]:
    """The pair figures of one stored sweep that may go into a baseline, keyed by link group
    (gpudiag.analysis.keys.link_key): each pair's median of its runs, in Gbit/s. Tests with no figure are
    left out, and so are pairs a link finding of the sweep touched (a ``slow_nic`` at either end
    on that backend and rail, a ``slow_link`` or ``link_error`` of the pair; see
    gpudiag.links.linkfindings.touched_links)."""
    touched = touched_links(stored.findings)
    return [BaselineSample(stored.sweep_id, group.baseline_key, LINK_PROBE, LINK_METRIC, gbps, LINK_UNIT, a, None, b)
            for group, pairs in pair_means(link_results(stored.links)).items() for (a, b), gbps in pairs.items()
            if not touched.touches(a, b, group.backend, group.rail)]


def build_baseline(name: str, samples: Iterable[BaselineSample], *, min_count: int = DEFAULT_MIN_COUNT,
                   created_at: str | None = None) -> Baseline:
    """A baseline of the median and unscaled MAD of each key's values.

    Keys with fewer than ``min_count`` values are left out and listed in ``skipped_keys``.
    ``created_at`` defaults to now (UTC). Raises InputError for an unusable name or min_count.
    """
    check_name(name)
    if min_count < 1:
        raise InputError(f"min_count must be at least 1, got {min_count}")
    by_key: dict[str, list[BaselineSample]] = {}
    for sample in samples:
        by_key.setdefault(sample.baseline_key, []).append(sample)
    entries = {key: _entry(key, group) for key, group in sorted(by_key.items()) if len(group) >= min_count}
    skipped = tuple(key for key in sorted(by_key) if key not in entries)
    sources = tuple(sorted({sample.sweep_id for group in by_key.values() for sample in group}))
    return Baseline(name=name, created_at=created_at or now_iso(), source_sweeps=sources,
                    entries=MappingProxyType(entries), skipped_keys=skipped)


def _entry(key: str, group: Sequence[BaselineSample]) -> BaselineEntry:
    values = [sample.value for sample in group]
    center = statistics.median(values)
    return BaselineEntry(key=key, median=center, mad=median_absolute_deviation(values, center),
                         count=len(values), unit=group[0].unit)


def save_baseline(store: Store, baseline: Baseline, *, replace: bool = False) -> None:
    """Store ``baseline`` in one transaction, replacing one of the same name only when ``replace``.

    Raises InputError when it has no entries, or when the name is taken and ``replace`` is false
    (nothing stored is lost by accident); StoreError when the store cannot be written.
    """
    if not baseline.entries:
        raise InputError(f"baseline {baseline.name!r} has no entries (every key had too few values); "
                         "build it from more sweeps")
    with store.writing(f"saving baseline {baseline.name}") as db:
        if db.execute("SELECT 1 FROM baselines WHERE name = ? LIMIT 1", (baseline.name,)).fetchone() and not replace:
            raise InputError(f"{store.path}: a baseline named {baseline.name!r} already exists; replace it "
                             "explicitly (--replace) or choose another name")
        db.execute("DELETE FROM baselines WHERE name = ?", (baseline.name,))
        sources = json.dumps(list(baseline.source_sweeps))
        db.executemany("INSERT INTO baselines (name, key, median, mad, count, unit, created_at, source_sweeps_json)"
                       " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       [(baseline.name, entry.key, entry.median, entry.mad, entry.count, entry.unit,
                         baseline.created_at, sources) for entry in baseline.entries.values()])


def load_baseline(store: Store, name: str) -> Baseline:
    """The stored baseline ``name``. Raises StoreError when there is none, naming those there are."""
    with store.reading(f"reading baseline {name}") as db:
        rows = db.execute("SELECT * FROM baselines WHERE name = ? ORDER BY key", (name,)).fetchall()
        names = [row[0] for row in db.execute("SELECT DISTINCT name FROM baselines ORDER BY name")]
    if not rows:
        stored = f"stored baselines: {', '.join(names)}" if names else "no baseline is stored yet"
        raise StoreError(f"{store.path}: no baseline named {name!r}; {stored}")
    entries = {row["key"]: BaselineEntry(key=row["key"], median=row["median"], mad=row["mad"], count=row["count"],
                                         unit=row["unit"]) for row in rows}
    return Baseline(name=name, created_at=rows[0]["created_at"],
                    source_sweeps=tuple(json.loads(rows[0]["source_sweeps_json"])), entries=MappingProxyType(entries))


def chosen_baseline(store: Store | None, name: str | None) -> Baseline | None:
    """The baseline ``name`` (a StoreError if the store lacks it); without a name, the one named
    DEFAULT_BASELINE where it is stored, else None (then only the fleet and the SKU figures judge)."""
    if store is None:
        return None
    if name is not None:
        return load_baseline(store, name)
    stored = {entry["name"] for entry in list_baselines(store)}
    return load_baseline(store, DEFAULT_BASELINE) if DEFAULT_BASELINE in stored else None


def list_baselines(store: Store) -> list[dict[str, Any]]:
    """Every stored baseline, by name: name, created_at, source_sweeps and its number of entries."""
    with store.reading("listing baselines") as db:
        rows = db.execute("SELECT name, created_at, source_sweeps_json, count(*) AS entries FROM baselines"
                          " GROUP BY name ORDER BY name").fetchall()
    return [{"name": row["name"], "created_at": row["created_at"],
             "source_sweeps": json.loads(row["source_sweeps_json"]), "entries": row["entries"]} for row in rows]


def canonical_key(key: Mapping[str, Any]) -> str:
    """The key string of a decoded key object, in gpudiag.analysis.keys.result_key's canonical form."""
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


def export_baseline(baseline: Baseline) -> dict[str, Any]:
    """The ``gpudiag.baseline/1`` JSON object of a baseline, entries sorted by key."""
    return {"schema": BASELINE_SCHEMA, "name": baseline.name, "created_at": baseline.created_at,
            "source_sweeps": list(baseline.source_sweeps),
            "entries": [{"key": json.loads(entry.key), "median": entry.median, "mad": entry.mad,
                         "count": entry.count, "unit": entry.unit}
                        for _, entry in sorted(baseline.entries.items())]}


def import_baseline(data: object, source: str) -> Baseline:
    """The baseline in an exported JSON object, checked strictly.

    ``source`` names the file for messages. Raises InputError naming the file and the field path
    (``base.json: entries[3].mad: must be >= 0``) at the first problem.
    """
    check = _Checker(source)
    top = check.fields(data, "", _TOP_FIELDS)
    if top["schema"] != BASELINE_SCHEMA:
        check.fail("schema", f"must be {BASELINE_SCHEMA!r}, got {top['schema']!r}")
    name = check.text(top["name"], "name")
    check_name(name, f"{source}: name")
    created_at = check.text(top["created_at"], "created_at")
    sources = tuple(check.text(item, f"source_sweeps[{i}]") for i, item in enumerate(check.array(
        top["source_sweeps"], "source_sweeps")))
    entries: dict[str, BaselineEntry] = {}
    first_at: dict[str, int] = {}
    for index, item in enumerate(check.array(top["entries"], "entries")):
        entry = _import_entry(check, item, f"entries[{index}]")
        if entry.key in entries:
            check.fail(f"entries[{index}].key", f"repeats the key of entries[{first_at[entry.key]}]")
        entries[entry.key] = entry
        first_at[entry.key] = index
    return Baseline(name=name, created_at=created_at, source_sweeps=sources,
                    entries=MappingProxyType(dict(sorted(entries.items()))))


def _import_entry(check: _Checker, item: object, where: str) -> BaselineEntry:
    fields = check.fields(item, where, _ENTRY_FIELDS)
    key = check.fields(fields["key"], f"{where}.key", _KEY_FIELDS)
    check.mapping(key["facts"], f"{where}.key.facts")
    probe = check.text(key["probe"], f"{where}.key.probe")
    check.text(key["metric"], f"{where}.key.metric")
    key_unit = check.optional_text(key["unit"], f"{where}.key.unit")
    check.mapping(key["params"], f"{where}.key.params")
    key_text = _link_key(check, key, f"{where}.key") if probe == LINK_PROBE else canonical_key(key)
    unit = check.optional_text(fields["unit"], f"{where}.unit")
    if unit != key_unit:
        check.fail(f"{where}.unit", f"must equal key.unit ({key_unit!r}), got {unit!r}")
    mad = check.number(fields["mad"], f"{where}.mad")
    if mad < 0:
        check.fail(f"{where}.mad", "must be >= 0")
    count = fields["count"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        check.fail(f"{where}.count", f"must be an integer >= 1, got {count!r}")
    return BaselineEntry(key=key_text, median=check.number(fields["median"], f"{where}.median"),
                         mad=mad, count=count, unit=unit)


def _link_key(check: _Checker, key: Mapping[str, Any], where: str) -> str:
    """The canonical link_key of a link entry's key, its fields checked (a line rate of 400 and
    one of 400.0 are the same key)."""
    if key["facts"]:
        check.fail(f"{where}.facts", "must be empty for a link key")
    if key["metric"] != LINK_METRIC:
        check.fail(f"{where}.metric", f"must be {LINK_METRIC!r} for a link key, got {key['metric']!r}")
    if key["unit"] != LINK_UNIT:
        check.fail(f"{where}.unit", f"must be {LINK_UNIT!r} for a link key, got {key['unit']!r}")
    params = check.fields(key["params"], f"{where}.params", _LINK_PARAMS)
    if params["backend"] not in BACKENDS:
        check.fail(f"{where}.params.backend", f"must be one of {', '.join(BACKENDS)}, got {params['backend']!r}")
    rail = params["rail"]
    if rail is not None and (isinstance(rail, bool) or not isinstance(rail, int) or rail < 0):
        check.fail(f"{where}.params.rail", f"must be an integer >= 0 or null, got {rail!r}")
    rate = params["line_rate_gbps"]
    if rate is not None and check.number(rate, f"{where}.params.line_rate_gbps") <= 0:
        check.fail(f"{where}.params.line_rate_gbps", f"must be positive or null, got {rate!r}")
    return link_key(params["backend"], rail, rate)


class _Checker:
    """Type checks that raise InputError as ``source: path: problem``."""

    def __init__(self, source: str) -> None:
        self._source = source

    def fail(self, where: str, problem: str) -> NoReturn:
        prefix = f"{self._source}: {where}: " if where else f"{self._source}: "
        raise InputError(f"{prefix}{problem} (not a valid {BASELINE_SCHEMA} file)")

    def mapping(self, value: object, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(where, f"must be an object, got {_kind(value)}")
        return value

    def fields(self, value: object, where: str, names: Sequence[str]) -> dict[str, Any]:
        data = self.mapping(value, where or "top level")
        prefix = f"{where}." if where else ""
        for name in names:
            if name not in data:
                self.fail(f"{prefix}{name}", "is missing")
        for name in data:
            if name not in names:
                self.fail(f"{prefix}{name}", f"is not a known field (known: {', '.join(names)})")
        return data

    def array(self, value: object, where: str) -> list[Any]:
        if not isinstance(value, list):
            self.fail(where, f"must be an array, got {_kind(value)}")
        return value

    def text(self, value: object, where: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail(where, f"must be a non-empty string, got {_kind(value)}")
        return value

    def optional_text(self, value: object, where: str) -> str | None:
        return None if value is None else self.text(value, where)

    def number(self, value: object, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(where, f"must be a finite number, got {_kind(value)}")
        return value


def _kind(value: object) -> str:
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "an array"
    return repr(value)
