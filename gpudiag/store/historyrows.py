"""A host's sweep as its history shows it (Store.host_history): the findings naming it, its
compared figures (count, min, median and max of each, and each GPU's), the values the sweep
judged them at, and its pair tests."""

from __future__ import annotations

import sqlite3
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..analysis.keys import key_model
from ..findings import Kind, cost_order
from .hosts import StoredFigure, figures
from .retests import read_retests, retest_entry
from .rows import FINDING_FIELDS, LINK_FIELDS, decode, json_text

# Findings about a group of hosts, the fleet or the network: none is one host's verdict, even where
# its host field lists that host (a fleet shift's folded hosts) or its evidence names hosts behind it.
SHARED_KINDS = frozenset({Kind.FLEET_SHIFT, Kind.SOFTWARE_REGRESSION, Kind.SLOW_NETWORK, Kind.SLOW_FABRIC_LINK,
                          Kind.SLOW_SWITCH})


def history_row(db: sqlite3.Connection, row: sqlite3.Row, host: str) -> dict[str, Any]:
    """One sweep of ``host``'s history (Store.host_history)."""
    sweep_id = row["sweep_id"]
    findings = host_findings(db, sweep_id, host)
    figures = host_figures(db, sweep_id, host)
    links = [decode(link, LINK_FIELDS) for link in db.execute(
        "SELECT * FROM links WHERE sweep_id = ? AND (a = ? OR b = ?) ORDER BY ordinal", (sweep_id, host, host))]
    return {"sweep_id": sweep_id, "started_at": row["started_at"], "status": row["status"], "error": row["error"],
            "analysed": bool(row["analysed"]), "findings": findings, "figures": figures,
            "judged": judged_values(host, figures, findings),
            "links": links}


def host_findings(db: sqlite3.Connection, sweep_id: str, host: str) -> list[dict[str, Any]]:
    """The sweep's findings that name ``host``, most costly first (gpudiag.findings.cost_order): its
    own and those of a link it is an end of (``peer``); not a fleet's, a group's or the network's
    (SHARED_KINDS), whatever hosts they list."""
    found = [decode(row, FINDING_FIELDS) for row in db.execute(
        "SELECT * FROM findings WHERE sweep_id = ? AND (host = ? OR peer = ?) ORDER BY ordinal",
        (sweep_id, host, host))]
    return sorted((finding for finding in found if finding.get("kind") not in SHARED_KINDS), key=cost_order)


def host_figures(db: sqlite3.Connection, sweep_id: str, host: str) -> list[dict[str, Any]]:
    groups: dict[str, list[StoredFigure]] = {}
    for _, figure in figures(db, sweep_id, host):
        groups.setdefault(figure.key, []).append(figure)
    return grouped_figures(groups.values(), read_retests(db, sweep_id, host).get(host, {}))


def grouped_figures(groups: Iterable[Sequence[StoredFigure]],
                    retests: Mapping[str, tuple[int, Mapping[int, float]]] | None = None) -> list[dict[str, Any]]:
    """Store.host_history's ``figures`` of one host in one sweep, from its figures grouped by key,
    each with its ``retest`` where the sweep re-tested it for a trend (``retests``:
    gpudiag.store.retests.read_retests' of the host)."""
    found = []
    for group in groups:
        first = group[0]
        entry = figure_entry({"metric": f"{first.probe}.{first.metric}", "params": dict(first.params),
                              "unit": first.unit, "model": key_model(first.key)},
                             [[figure.gpu, figure.value] for figure in group])
        again = retest_entry(retests or {}, first.key)
        found.append(entry if again is None else {**entry, "retest": again})
    return sorted(found, key=lambda figure: (figure["metric"], json_text(figure["params"])))


def figure_entry(name: Mapping[str, Any], per_gpu: list[list[Any]]) -> dict[str, Any]:
    """A figure of Store.host_history: its ``name`` (metric, params, unit, the GPU model), then count, min,
    median and max of ``per_gpu`` (``[GPU index, value]`` each), and per_gpu."""
    values = [value for _, value in per_gpu]
    return {**name, "count": len(values), "min": min(values), "median": statistics.median(values),
            "max": max(values), "per_gpu": per_gpu}


def judged_values(host: str, host_figures: Sequence[Mapping[str, Any]],
                  findings: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each of ``host``'s GPU figures (Store.host_history's ``figures``: the first pass's) that the
    sweep judged at another value: where a finding of the host names the GPU and the figure, its
    ``value`` is what the sweep judged (after a re-test, the mean that confirmed it:
    gpudiag.analysis.suspects.confirm). A finding names one figure where the GPU has one figure of
    its metric (and unit); of several (P2P pairs, PCIe directions) which one it judged is not
    stored, and none is taken. Two findings judging one figure differently leave it as it is.
    Each as metric, params, gpu, ``first_pass`` and ``value``, in the figures' order."""
    named: dict[tuple[str, int], list[tuple[Mapping[str, Any], float]]] = {}
    for entry in host_figures:
        for gpu, value in entry["per_gpu"]:
            if gpu is not None:
                named.setdefault((entry["metric"], gpu), []).append((entry, value))
    values: dict[tuple[str, int], set[float]] = {}
    for finding in findings:
        gpu, metric = finding.get("gpu"), str(finding.get("metric"))
        candidates = named.get((metric, gpu), []) if isinstance(gpu, int) else []
        if (finding.get("host") == host and finding.get("value") is not None and len(candidates) == 1
                and finding.get("unit") in (None, candidates[0][0]["unit"])):
            values.setdefault((metric, gpu), set()).add(float(finding["value"]))
    judged = []
    for (metric, gpu), found in values.items():
        (entry, first_pass), = named[(metric, gpu)]
        # A finding's figure may be rounded (to 3 decimals): the first pass's, so rounded, is the first pass's.
        if len(found) == 1 and not found & {first_pass, round(first_pass, 3)}:
            judged.append({"metric": metric, "params": entry["params"], "gpu": gpu, "first_pass": first_pass,
                           "value": found.pop()})
    return sorted(judged, key=lambda item: (item["metric"], json_text(item["params"]), item["gpu"]))


def judged_figures(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A Store.host_history row's figures with each GPU at the value the sweep judged it
    (its ``judged``), count, min, median and max over them, and the figure's ``retest`` where the
    sweep re-tested it for a trend."""
    judged = {(item["metric"], json_text(item["params"]), item["gpu"]): item["value"]
              for item in row.get("judged") or ()}
    return [{**figure_entry({name: entry.get(name) for name in ("metric", "params", "unit", "model")},
                            [[gpu, judged.get((entry["metric"], json_text(entry["params"]), gpu), value)]
                             for gpu, value in entry["per_gpu"]]),
             **({"retest": entry["retest"]} if entry.get("retest") else {})}
            for entry in row["figures"]]
