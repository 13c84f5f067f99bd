"""The summary line of a sweep (hosts folded by status, finding counts, results that could not be
compared, the job impact) and the rows of the impact estimate, shared by every report format."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..exitcodes import ExitCode
from ..findings import INTERRUPTED, Kind, Severity
from ..hosts import fold_hosts
from ..schema.fields import is_finite_number
from ..words import deficit_text, pct, plural
from .phrasing import OK, Document, _findings, _hosts, _is_count, finding_measure, finding_where, hosts_by_status

NOT_A_PASS = "no result could be compared: this sweep is not a pass"
# What an unanalysed sweep's findings are, in place of "none" (no finding is no pass there).
NOT_ANALYSED = "not analysed: the sweep stopped before its analysis, so what it measured was never judged"
# The slowest link's reference, in words (gpudiag.links.groups: fleet, baseline, line_rate).
LINK_REFERENCE_WORDS = {"fleet": "fleet ", "baseline": "baseline ", "line_rate": "line-rate floor "}


def summary_line(document: Document) -> str:
    """``sweep ID · 64 hosts · 61 ok · node050 unreachable · 6 findings (4 fail, 1 warn, 1 unchecked) ·
    12 results could not be compared (...) · job slowdown ...``; an unfinished sweep's begins with
    how far it got (``unfinished_phrase``)."""
    return " · ".join(text for text, _ in summary_parts(document))


def completeness_of(document: Document) -> Mapping[str, Any] | None:
    """How far an unfinished sweep got: its ``completeness`` (a stored sweep's), or, for a document
    an interrupt stopped, what its hosts say (every planned host has an entry; those it stopped are
    ``interrupted``); None for a finished sweep."""
    completeness = document.get("completeness")
    if isinstance(completeness, Mapping):
        return completeness
    if (document.get("summary") or {}).get("exit_code") != ExitCode.INTERRUPTED and not document.get("interrupted"):
        return None
    hosts = _hosts(document)
    return {"planned_hosts": len(hosts), "measured_hosts": sum(1 for h in hosts if h.get("status") != INTERRUPTED),
            "analysed": document.get("finished_at") is not None, "interrupted": True}


def unfinished_phrase(document: Document) -> str | None:
    """``unfinished: 1 of 4 planned hosts measured, not analysed`` (a killed sweep), ``unfinished:
    interrupted, 3 of 4 planned hosts measured, what finished analysed``; None for a finished sweep."""
    completeness = completeness_of(document)
    return None if completeness is None else unfinished_words(completeness)


def unfinished_words(completeness: Mapping[str, Any]) -> str:
    """``unfinished: 1 of 4 planned hosts measured, not analysed`` from a sweep's ``completeness``."""
    planned, measured = completeness.get("planned_hosts"), completeness.get("measured_hosts")
    measured = measured if _is_count(measured) else 0
    counted = (f"{measured} of {planned} planned hosts measured" if _is_count(planned)
               else f"{plural(measured, 'host')} measured (the hosts it planned were not stored)")
    if not completeness.get("analysed"):
        return f"unfinished: {counted}, not analysed"
    return f"unfinished: interrupted, {counted}, what finished analysed"


def not_analysed(document: Document) -> bool:
    """Whether the sweep stopped before its analysis (its findings are no verdict, not "none")."""
    completeness = completeness_of(document)
    return completeness is not None and not completeness.get("analysed")


# What each exit status says, as the verdict's first word and its meaning (gpudiag.exitcodes).
VERDICTS = {0: ("PASS", "every host checked, nothing failed"), 1: ("FAIL", "act on the fail findings"),
            3: ("NOT CHECKED", "no fail, but something could not be checked: not a pass"),
            4: ("INCONCLUSIVE", "gpudiag itself failed"), 130: ("INTERRUPTED", "run it again")}


def verdict_line(document: Document, outputs: Sequence[str] = (), drained: str | None = None) -> str:
    """The last line a sweep prints: ``verdict: FAIL (exit 1: act on the fail findings) · 8 fail,
    2 unchecked of 64 hosts · keep out node[004,009] (2 hosts) · drained: none (...) · wrote ...``.
    ``outputs``: where the outputs went, in words; ``drained``: what was drained (None: a sweep,
    which drains nothing)."""
    summary = document.get("summary") or {}
    code = summary.get("exit_code")
    word, meaning = VERDICTS.get(code, ("UNKNOWN", "no exit status recorded")) if _is_count(code) else (
        "UNFINISHED", "the sweep did not finish")
    findings = _findings(document)
    fails = sum(1 for f in findings if f.get("severity") == Severity.FAIL)
    unchecked = unchecked_count(document)
    warns = sum(1 for f in findings if f.get("severity") == Severity.WARN) - unchecked
    watches = sum(1 for f in findings if f.get("severity") == Severity.WATCH)
    counted = ", ".join(part for part in (f"{fails} fail" if fails else "", f"{warns} warn" if warns else "",
                                          f"{unchecked} unchecked" if unchecked else "",
                                          f"{watches} watch" if watches else "") if part) or "no finding"
    if not_analysed(document):
        counted = "nothing judged (not analysed)"
    parts = [f"verdict: {word} (exit {code if _is_count(code) else '-'}: {meaning})",
             f"{counted} of {plural(len(_hosts(document)), 'host')}"]
    exclude = list((document.get("impact") or {}).get("exclude") or [])
    parts.append(f"keep out {fold_hosts(exclude)} ({plural(len(exclude), 'host')})" if exclude else "keep out none")
    parts.append(f"drained: {drained}" if drained is not None else
                 "drained: none (a sweep drains nothing; gpudiag preflight --drain does)")
    if outputs:
        parts.append("wrote " + ", ".join(outputs))
    return " · ".join(parts)


def summary_parts(document: Document) -> list[tuple[str, bool]]:
    """The parts of the summary line, each with whether it is an alarm (a sweep that compared nothing,
    results that could not be compared) that the HTML report sets apart."""
    hosts = _hosts(document)
    groups = hosts_by_status(document)
    parts = [f"sweep {document.get('sweep_id', '?')}", plural(len(hosts), "host"), f"{len(groups.pop(OK, []))} ok"]
    parts += [f"{fold_hosts(labels)} {status}" for status, labels in groups.items()]
    findings = _findings(document)
    counts = [f"{sum(1 for finding in findings if finding.get('severity') == Severity.FAIL)} fail"]
    warnings = sum(1 for finding in findings
                   if finding.get("severity") == Severity.WARN and finding.get("kind") != Kind.UNCHECKED)
    if warnings:
        counts.append(f"{warnings} warn")
    unchecked = unchecked_count(document)
    if unchecked:
        counts.append(f"{unchecked} {Kind.UNCHECKED}")
    watches = sum(1 for finding in findings if finding.get("severity") == Severity.WATCH)
    if watches:
        counts.append(f"{watches} {Severity.WATCH}")
    parts.append("findings not analysed" if not_analysed(document)
                 else f"{plural(len(findings), 'finding')} ({', '.join(counts)})")
    unfinished = unfinished_phrase(document)  # first: a killed sweep's few hosts are no clean sweep
    marked = [*([(unfinished, True)] if unfinished else []), *((part, False) for part in parts),
              *((phrase, True) for phrase in comparison_phrases(document))]
    impact = impact_phrase(document.get("impact"))
    if impact:
        marked.append((impact, False))
    return marked


def unchecked_count(document: Document) -> int:
    """The summary's ``unchecked`` count, or (a document from before it) the unchecked findings."""
    count = (document.get("summary") or {}).get(Kind.UNCHECKED)
    if _is_count(count):
        return int(count)
    return sum(1 for finding in _findings(document) if finding.get("kind") == Kind.UNCHECKED)


def comparison_phrases(document: Document) -> list[str]:
    """What the summary must say about results that had no reference at all (no peers, no stored
    baseline, no SKU figure): how many, and plainly that a sweep that compared nothing is not a pass.
    Empty when every result was compared or the document predates these counts."""
    summary = document.get("summary") or {}
    compared, not_compared = summary.get("results_compared"), summary.get("results_not_compared")
    if not _is_count(not_compared) or not_compared == 0:
        return []
    phrases = [NOT_A_PASS] if _is_count(compared) and compared == 0 else []
    noun = "result" if not_compared == 1 else "results"
    phrases.append(f"{not_compared} {noun} could not be compared (no peers, baseline or SKU figure)")
    return phrases


def impact_phrase(impact: Mapping[str, Any] | None) -> str:
    """``job slowdown 30.0 %, excluding node[012,017] recovers 28.0 %`` (the GPUs' and the network's
    part counted: gpudiag.links.impact.with_network), or ``network slowdown 44.4 % (GPUs not
    compared)``; empty without an estimate."""
    if impact and impact.get("slowdown_pct") is None and impact.get("network_slowdown_pct") is not None:
        return f"network slowdown {pct(impact['network_slowdown_pct'])} (GPUs not compared)"
    if not impact or impact.get("slowdown_pct") is None:
        return ""
    phrase = f"job slowdown {pct(impact['slowdown_pct'])}"
    if impact.get("network_slowdown_pct") is not None and impact.get("gpu_slowdown_pct") is not None:
        phrase += (f" (GPUs {pct(impact['gpu_slowdown_pct'])}, network {pct(impact['network_slowdown_pct'])}: "
                   "a synchronous job waits for the slower)")
    exclude = list(impact.get("exclude") or [])
    if exclude and impact.get("recovered_pct") is not None:
        phrase += f", excluding {fold_hosts(exclude)} recovers {pct(impact['recovered_pct'])}"
    return phrase


def _impact_detail(impact: Mapping[str, Any] | None) -> str:
    """The text report's impact line: the rows the summary line does not say already."""
    shown = ("slowest", "slowest link", "exclude", "unfinished", FABRIC_ROW)
    return " · ".join(f"{label} {text}" for label, text in _impact_rows(impact) if label in shown)


def unfinished_rows(impact: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The hosts an interrupt stopped before they finished, apart from those excluded."""
    unfinished = [str(host) for host in (impact or {}).get("unfinished") or []]
    if not unfinished:
        return []
    return [("unfinished", f"{fold_hosts(unfinished)} ({plural(len(unfinished), 'host')} interrupted before they "
                           "finished: not checked, not excluded; run the sweep again)")]


# The label of the impact rows of a slow part of the fabric between switches, one per part.
FABRIC_ROW = "fabric"


def _impact_rows(impact: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """(label, text) pairs of the impact estimate: the job's slowdown and its GPUs' and network's
    parts, the slowest GPU, the hosts to exclude and what that recovers, the hosts left
    unfinished, the slowest link and each slow part of the fabric (FABRIC_ROW, one row each);
    the unfinished hosts alone without an estimate of the GPUs or the network."""
    if not impact or (impact.get("slowdown_pct") is None and impact.get("network_slowdown_pct") is None):
        return unfinished_rows(impact)
    rows = slowdown_rows(impact)
    slowest = impact.get("slowest")
    if slowest:
        rows.append(("slowest", f"{finding_where(slowest)} {finding_measure(slowest)}".strip()))
    exclude = list(impact.get("exclude") or [])
    if exclude:
        total = impact.get("hosts_total")
        rows.append(("exclude", f"{fold_hosts(exclude)} ({len(exclude)} of {plural(total, 'host')})" if total
                     else fold_hosts(exclude)))
    if impact.get("recovered_pct") is not None:
        rows.append(("recovered by excluding", pct(impact["recovered_pct"])))
    rows += unfinished_rows(impact)
    link = impact.get("slowest_link")
    if link and impact.get("link_slowdown_pct") is not None:
        rail = "" if link.get("rail") is None else f" rail {link['rail']}"
        source = LINK_REFERENCE_WORDS.get(link.get("reference_source"), "")
        below = (deficit_text(impact["link_slowdown_pct"]) if impact["link_slowdown_pct"] > 0
                 else "not below its reference")
        rows.append(("slowest link", f"{link['a']} ↔ {link['b']}{rail} {link['value']:.1f} vs {source}"
                                     f"{link['reference']:.1f} {link.get('unit') or ''} ({below}; a ring "
                                     "collective runs at its slowest link)"))
    return rows + fabric_rows(impact)


def slowdown_rows(impact: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``job slowdown`` (with ``GPU slowdown`` and ``network slowdown``, its two parts, where the
    network was counted), or ``network slowdown`` alone where the GPUs were not compared."""
    slowdown, gpu, network = (impact.get(name) for name in ("slowdown_pct", "gpu_slowdown_pct",
                                                            "network_slowdown_pct"))
    if slowdown is None:
        return [("network slowdown", f"{pct(network)} (GPUs not compared: the job's slowdown is not known)")]
    rows = [("job slowdown", pct(slowdown))]
    if gpu is not None and network is not None:
        rows += [("GPU slowdown", pct(gpu)), ("network slowdown", pct(network))]
    return rows


def fabric_rows(impact: Mapping[str, Any]) -> list[tuple[str, str]]:
    """One FABRIC_ROW per slow part of the fabric (the impact's ``fabric``): ``rail 2 leaf03 port
    12 – spine04 port 3: -29.9 % for the collectives that cross it (confirmed); nodes behind it
    node[017-024]``."""
    rows = []
    for part in impact.get("fabric") or ():
        if not isinstance(part, Mapping):
            continue
        names = [str(name) for name in part.get("parts") or ()]
        where = {0: "a part of the fabric", 1: names[0] if names else ""}.get(len(names), f"one of {', '.join(names)}")
        rail = "" if part.get("rail") is None else f"rail {part['rail']} "
        loss = part.get("loss_pct")
        if is_finite_number(loss):
            where += f": the collectives that cross it run {deficit_text(loss)}"
        text = rail + where
        text += " (confirmed)" if part.get("confirmed") else " (not confirmed)"
        behind = [str(host) for host in part.get("hosts_behind") or ()]
        if behind:
            text += f"; nodes behind it {fold_hosts(behind)}"
        rows.append((FABRIC_ROW, text))
    return rows


def focus_line(document: Document) -> str | None:
    """``focus: suspects node[003,007] · references node[001,005,010,014]`` for a ``--suspects``
    sweep (the document's ``focus``), None for any other."""
    focus = document.get("focus")
    if not isinstance(focus, Mapping):
        return None
    line = (f"focus: suspects {fold_hosts(focus.get('suspects') or ()) or 'none'} · "
            f"references {fold_hosts(focus.get('references') or ()) or 'none'}")
    return line + _node_peers(focus.get("node_peers")) + _extra_peers(focus.get("extra_peers"))


def _node_peers(peers: object) -> str:
    """`` · further nodes probed node[002,006]: 2 of at most 4 (the references' own level was shifted)``;
    nothing where none was asked for."""
    if not isinstance(peers, Mapping):
        return ""
    hosts = [str(host) for host in peers.get("hosts") or () if isinstance(host, str)]
    missed = peers.get("not_probed")
    text = (f" · further nodes probed {fold_hosts(hosts) or 'none'}: {len(hosts)} of at most "
            f"{peers.get('max_hosts')} (the references' own level was shifted)")
    if isinstance(missed, Mapping) and missed:
        text += f", {len(missed)} not probed ({fold_hosts(str(host) for host in missed)})"
    return text


def _extra_peers(extra: object) -> str:
    """`` · extra peers node[006,009]: 8 pair tests of at most 18`` (or why none could break a
    tie: `` · extra peers: none (...)``; nothing where none was needed)."""
    if not isinstance(extra, Mapping):
        return ""
    peers, note = list(extra.get("peers") or ()), extra.get("note")
    bound = f"{extra.get('pair_tests')} pair tests of at most {extra.get('max_pair_tests')}"
    if peers:
        return f" · extra peers {fold_hosts(peers)}: {bound}" + (f" ({note})" if note else "")
    return f" · extra peers: none ({note})" if note else " · extra peers: none needed"
