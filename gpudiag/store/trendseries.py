"""A host's stored figures as the series its trends are fitted to (gpudiag.store.trend): each
figure by name (a metric and the parameters that name it), the median of its GPUs and each GPU
over the sweeps after the latest repair that covers it, each GPU's ratios to its siblings, a
sweep's re-tested means where it has them; and a fleet's per-sweep noise pooled over its hosts
(FleetNoise), per GPU model and figure."""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, cast

from .repairs import Repair
from .trendfit import Noise, TrendPoint, pooled_noise, pooled_noises, ratio_noise, sibling_ratios

# Parameters that name what a figure is (the rest, GPU pair or buffer size, are folded together).
HISTORY_PARAMS = ("dtype", "direction", "memory")
# The most hosts a fleet's noise against the siblings is pooled over (fleet_ratio_noise): 256 hosts
# of 8 GPUs over 4 sweeps give 4,096 degrees of freedom, and a fleet of 10,000 is read once for it.
FLEET_NOISE_HOSTS = 256
# What a fleet's noise against the siblings is pooled by: the GPU model (None: not stored) and the
# figure's name.
NoiseKey = tuple[str | None, str]


@dataclass(frozen=True)
class FleetNoise:
    """A fleet's per-sweep noise, per GPU model and figure (NoiseKey), pooled over its hosts
    (fleet_noise): of GPUs against their siblings (``ratios``), and of GPUs around their own
    lines (``own``: what a node's median is judged with, as a median of them)."""

    ratios: Mapping[NoiseKey, Noise]
    own: Mapping[NoiseKey, Noise]


NO_FLEET_NOISE = FleetNoise({}, {})


def figure_name(figure: Mapping[str, Any]) -> str:
    """``gemm.tflops bf16``: a stored figure's metric and the parameters that name it."""
    params = figure.get("params") or {}
    return " ".join([figure["metric"], *(str(params[name]) for name in HISTORY_PARAMS if name in params)])


def fleet_noise(histories: Mapping[str, Sequence[Mapping[str, Any]]],
                repairs: Mapping[str, Sequence[Repair]]) -> FleetNoise:
    """The FleetNoise of the hosts of ``histories``: fleet_ratio_noise, and the GPUs' scatter
    around their own lines (trendfit.pooled_noise) pooled over the same hosts, by the same keys."""
    return sampled_fleet_noise(histories, repairs)[0]


def fleet_ratio_noise(histories: Mapping[str, Sequence[Mapping[str, Any]]],
                      repairs: Mapping[str, Sequence[Repair]]) -> Mapping[NoiseKey, Noise]:
    """Per GPU model and figure (NoiseKey), the per-sweep noise of GPUs against their siblings
    (trendfit.ratio_noise), pooled over the hosts of ``histories`` (each host's Store.host_history
    rows, newest first; FLEET_NOISE_HOSTS of them at most: noise_hosts) that have that
    model, each trend after the ``repairs`` that cover it, as host_trends windows them: what
    ``host_trends``' ``fleet_noise`` takes. Models are not pooled: a quiet model's noise would
    judge a noisy one's GPUs (at 0.5 and 2 %, pooled to 1.5 %, a noisy model's bar of 3.5 sigma
    was 2.6 of its own); a model none of whose hosts was sampled has none, and its hosts are judged
    by their own. A host's own 8 GPUs over 4 sweeps give 16 degrees of freedom, and its slope bar,
    the Student quantile of them, is 3.5 where 3 sigma is meant; the fleet's give hundreds, and a
    bar near the sigma it means."""
    return sampled_fleet_noise(histories, repairs)[0].ratios


def noise_hosts(hosts: Iterable[str]) -> list[str]:
    """The hosts a fleet's noise against the siblings is pooled over, by name: every host up to
    FLEET_NOISE_HOSTS; of more, those first by a hash of their names (the same every time). A
    stride over the sorted names took every other host of a fleet whose models alternate by name,
    and one model's noise judged the other's GPUs; by the hash each model has about its share."""
    names = sorted(set(hosts))
    if len(names) <= FLEET_NOISE_HOSTS:
        return names
    return sorted(sorted(names, key=_name_hash)[:FLEET_NOISE_HOSTS])


def _name_hash(name: str) -> bytes:
    return hashlib.blake2b(name.encode(), digest_size=8).digest()


def sampled_fleet_noise(histories: Mapping[str, Sequence[Mapping[str, Any]]], repairs: Mapping[str, Sequence[Repair]]
                        ) -> tuple[FleetNoise, dict[str, dict[str, FigureSeries]]]:
    """fleet_noise, and the windowed figures of the hosts it rests on (windowed)."""
    sampled = {host: windowed(histories[host], repairs.get(host, ())) for host in noise_hosts(histories)}
    ratios: dict[NoiseKey, list[Noise]] = {}
    own: dict[NoiseKey, list[Noise]] = {}
    for figures in sampled.values():
        for name, figure in figures.items():
            ratios.setdefault((figure.model, name), []).append(ratio_noise(figure.ratios, figure.runs()))
            own.setdefault((figure.model, name), []).append(figure.own_noise)
    return FleetNoise(_pooled(ratios), _pooled(own)), sampled


def _pooled(found: Mapping[NoiseKey, Sequence[Noise]]) -> dict[NoiseKey, Noise]:
    return {key: pooled for key, noises in found.items() if (pooled := pooled_noises(noises)).dof}


@dataclass(frozen=True)
class FigureSeries:
    """One figure of a host over its sweeps, each trend after the repair that covers it: the
    median of its GPUs (and how many GPUs each sweep's median rests on), each GPU, and each GPU's
    ratios to its siblings (trendfit.sibling_ratios); ``model``: the GPU model of its latest
    sweep (None: not stored)."""

    unit: str | None
    model: str | None
    median: Window
    counts: tuple[int, ...]
    gpus: tuple[Window, ...]
    ratios: dict[int, tuple[tuple[int, float], ...]]

    @cached_property
    def own_noise(self) -> Noise:
        """The per-sweep noise of its GPUs around their own lines, pooled over them (read once: the
        fleet's noise and the host's own trends both take it)."""
        return pooled_noise([[point.value for point in window.points] for window in self.gpus],
                            [[point.runs for point in window.points] for window in self.gpus])

    def runs(self) -> dict[int, tuple[int, ...]]:
        """For each GPU of ``ratios``, the runs each of its ratios is the mean of (its points')."""
        windows = {window.gpu: window.points for window in self.gpus}
        return {gpu: tuple(point.runs for point in windows[gpu][:len(series)]) for gpu, series in self.ratios.items()}


def windowed(rows: Sequence[Mapping[str, Any]], repairs: Sequence[Repair]) -> dict[str, FigureSeries]:
    """The figures of Store.host_history ``rows`` (newest first) by name, windowed after ``repairs``."""
    gpus: dict[str, dict[int, list[TrendPoint]]] = {}
    medians: dict[str, list[TrendPoint]] = {}
    units: dict[str, str | None] = {}
    models: dict[str, str | None] = {}
    counts: dict[str, list[int]] = {}
    for row in reversed(rows):
        for figure in row.get("figures") or ():
            models[figure_name(figure)] = figure.get("model")  # the latest sweep's, oldest first
        retests = sweep_retests(row.get("figures") or ())
        for name, (unit, per_gpu) in sweep_figures(row.get("figures") or ()).items():
            runs, again = retests.get(name, (1, {}))
            per_gpu = {**per_gpu, **again}  # a GPU the sweep re-tested: the mean of its re-test runs
            units.setdefault(name, unit)
            counts.setdefault(name, []).append(len(per_gpu))
            medians.setdefault(name, []).append(TrendPoint(row["sweep_id"], row["started_at"],
                                                           statistics.median(per_gpu.values()),
                                                           runs if per_gpu.keys() <= again.keys() else 1))
            for gpu, value in per_gpu.items():
                if gpu is not None:
                    gpus.setdefault(name, {}).setdefault(gpu, []).append(
                        TrendPoint(row["sweep_id"], row["started_at"], value, runs if gpu in again else 1))
    figures = {}
    for name in sorted(medians):
        windows = tuple(_window(repairs, gpu, points) for gpu, points in sorted(gpus.get(name, {}).items()))
        figures[name] = FigureSeries(units[name], models.get(name), _window(repairs, None, medians[name]),
                                tuple(counts[name]), windows,
                                sibling_ratios([(cast(int, window.gpu), window.points) for window in windows]))
    return figures


def sweep_figures(figures: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str | None, dict[int | None, float]]]:
    """One sweep's figures by name: the unit, and per GPU (None: no GPU) the median of its
    values over the folded keys (for P2P, its pairs as the source)."""
    values: dict[str, dict[int | None, list[float]]] = {}
    units: dict[str, str | None] = {}
    for figure in figures:
        name = figure_name(figure)
        units.setdefault(name, figure.get("unit"))
        per_gpu = values.setdefault(name, {})
        for gpu, value in figure.get("per_gpu") or ():
            per_gpu.setdefault(gpu, []).append(float(value))
    return {name: (units[name], {gpu: statistics.median(found) for gpu, found in per_gpu.items()})
            for name, per_gpu in values.items() if per_gpu}


def sweep_retests(figures: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, dict[int, float]]]:
    """One sweep's re-tested figures by name (those whose ``retest`` the store keeps:
    gpudiag.store.trendretest): the fewest runs any of its keys had, and per GPU the median over
    the folded keys of each one's mean over its runs."""
    values: dict[str, dict[int, list[float]]] = {}
    runs: dict[str, int] = {}
    for figure in figures:
        again = figure.get("retest")
        if not again:
            continue
        name = figure_name(figure)
        runs[name] = min(runs.get(name, again["runs"]), again["runs"])
        per_gpu = values.setdefault(name, {})
        for gpu, value in again.get("per_gpu") or ():
            if gpu is not None:
                per_gpu.setdefault(gpu, []).append(float(value))
    return {name: (runs[name], {gpu: statistics.median(found) for gpu, found in per_gpu.items()})
            for name, per_gpu in values.items() if per_gpu}


@dataclass(frozen=True)
class Window:
    """One trend's sweeps after the repair that covers it (None: no repair does)."""

    gpu: int | None
    points: tuple[TrendPoint, ...]
    repair: Repair | None


def _window(repairs: Sequence[Repair], gpu: int | None, points: Sequence[TrendPoint]) -> Window:
    """``gpu``'s points (None: the median's) after the latest of ``repairs`` that covers it."""
    covering = [repair for repair in repairs if repair.covers(gpu)]
    latest = max(covering, key=lambda r: (r.after_started_at, r.after_sweep_id, r.recorded_at), default=None)
    return Window(gpu, tuple(p for p in points if latest is None or latest.precedes(p.sweep_id, p.started_at)),
                   latest)
