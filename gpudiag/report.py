"""Reports from a sweep document (DESIGN.md): plain text, markdown, JSON and one self-contained HTML file.

Every format starts from the same document (``SweepResult.to_dict()`` or a file written with ``--json``)
and may use its optional ``impact`` object: the estimated slowdown of a synchronous job on these hosts
(it runs at the pace of its slowest GPU), what excluding the flagged hosts recovers, and which they are::

    {"slowdown_pct": 30.0, "slowest": {"host", "gpu", "metric", "value", "reference"},
     "recovered_pct": 28.0, "exclude": ["node012", ...], "hosts_total": 64}

Findings are always listed by what they cost the job (``sort_findings``); hosts are folded by status.
Each finding shows its figures with their unit and the source of the reference, the GPU by index, UUID
and PCI bus id, its action verb (``drain`` ... ``watch``) with the detail, and what it rests on
(``basis``). Documents stored before those fields existed still render: a missing key counts as null
and an ``action`` that is not one of the verbs is shown as the text it is.
The HTML report needs no network and no JavaScript: colours are computed here and written inline.
"""

from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import secrets
import statistics
import string
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from .errors import InstallationError, OutputError
from .findings import (
    ACTION_VERBS,
    BASIS_COMPARISON,
    BASIS_ERROR_RECORD,
    BASIS_FACTS,
    BASIS_HOST_STATUS,
    BASIS_RETEST,
    BASIS_SINGLE_RUN,
    BASIS_TELEMETRY,
    cost_order,
)
from .hosts import fold_hosts
from .render import format_value
from .results import device_index

FORMATS = ("text", "md", "json", "html")
TEMPLATE_FILES = ("report.html", "report.css")
OK = "ok"
# Heat-map colour scale: green at or above the reference, through yellow, red at this share of it.
HEAT_RED_RATIO = 0.80
# Above this many hosts the link matrix (hosts² cells) gives way to a list of the slowest pairs.
LINK_MATRIX_MAX_HOSTS = 64
SLOWEST_PAIRS_SHOWN = 100
LINK_UNITS = {"gbps": "Gbit/s"}
UNCHECKED = "unchecked"
# What a finding rests on (its ``basis``), in words.
BASIS_WORDS = {
    BASIS_RETEST: "confirmed by re-test",
    BASIS_SINGLE_RUN: "single run, not re-tested",
    BASIS_TELEMETRY: "NVML telemetry",
    BASIS_FACTS: "host facts",
    BASIS_HOST_STATUS: "could not be probed",
    BASIS_ERROR_RECORD: "probe error",
    BASIS_COMPARISON: "nothing to compare with",
}
REFERENCE_SOURCE_WORDS = {"fleet": "fleet", "baseline": "baseline", "sku": "SKU"}
# Units that read worse than the bare number ("2 count").
UNSHOWN_UNITS = ("count", "bool")
# A GPU UUID is shortened in text to its prefix and first group of hex digits ("GPU-1a2b3c4d…"):
# enough to tell the GPUs of a fleet apart and to grep for; the HTML report shows it whole.
SHORT_UUID = re.compile(r"(?:MIG-)?(?:GPU-)?[0-9A-Fa-f]{8}")
NOT_A_PASS = "no result could be compared: this sweep is not a pass"

Document = Mapping[str, Any]


# --------------------------------------------------------------------------------------------- API


def render_report(document: Document, fmt: str) -> str:
    """The report of one sweep document in ``fmt`` (``text``, ``md``, ``json`` or ``html``).

    Returns the whole report as one string, ending with a newline. Raises ValueError for another
    format, and InstallationError when the HTML templates are missing from the installation.
    """
    renderers: dict[str, Callable[[Document], str]] = {
        "text": render_text, "md": render_markdown, "json": render_json, "html": render_html}
    if fmt not in renderers:
        raise ValueError(f"unknown report format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return renderers[fmt](document)


def write_report(text: str, path: str | os.PathLike[str]) -> None:
    """Write ``text`` (UTF-8) to ``path`` in one step: a temporary file in the same folder, then
    ``os.replace``, so a reader never sees half a report. The file gets the usual permissions
    (0666 less the umask). Raises OutputError when it cannot be written."""
    target = Path(path)
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    created = replaced = False
    try:
        # os.open applies the umask; tempfile's private 0600 would hide a report meant to be shared.
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        created = True
        with open(descriptor, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)
        replaced = True
    except OSError as error:
        raise OutputError(f"{path}: cannot write the report: {error.strerror or error}") from error
    finally:
        if created and not replaced:
            _remove_quietly(temporary)


def sort_findings(findings: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Findings ordered by what they cost a job: ``fail`` before ``warn``, then the largest
    ``deficit_pct`` first (None last), then kind, host, peer and GPU, so the order is deterministic."""
    return sorted(findings, key=cost_order)


def summary_line(document: Document) -> str:
    """``sweep ID · 64 hosts · 61 ok · node050 unreachable · 6 findings (4 fail, 1 unchecked) ·
    12 results could not be compared (...) · job slowdown ...``."""
    return " · ".join(text for text, _ in summary_parts(document))


def summary_parts(document: Document) -> list[tuple[str, bool]]:
    """The parts of the summary line, each with whether it is an alarm (a sweep that compared nothing,
    results that could not be compared) that the HTML report sets apart."""
    hosts = _hosts(document)
    groups = hosts_by_status(document)
    parts = [f"sweep {document.get('sweep_id', '?')}", f"{len(hosts)} hosts", f"{len(groups.pop(OK, []))} ok"]
    parts += [f"{fold_hosts(labels)} {status}" for status, labels in groups.items()]
    findings = _findings(document)
    counts = [f"{sum(1 for finding in findings if finding.get('severity') == 'fail')} fail"]
    unchecked = unchecked_count(document)
    if unchecked:
        counts.append(f"{unchecked} {UNCHECKED}")
    parts.append(f"{len(findings)} findings ({', '.join(counts)})")
    marked = [(part, False) for part in parts] + [(phrase, True) for phrase in comparison_phrases(document)]
    impact = impact_phrase(document.get("impact"))
    if impact:
        marked.append((impact, False))
    return marked


def unchecked_count(document: Document) -> int:
    """The summary's ``unchecked`` count, or (a document from before it) the unchecked findings."""
    count = (document.get("summary") or {}).get(UNCHECKED)
    if _is_count(count):
        return int(count)
    return sum(1 for finding in _findings(document) if finding.get("kind") == UNCHECKED)


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
    """``job slowdown 30.0 %, excluding node[012,017] recovers 28.0 %``; empty without an estimate."""
    if not impact or impact.get("slowdown_pct") is None:
        return ""
    phrase = f"job slowdown {_pct(impact['slowdown_pct'])}"
    exclude = list(impact.get("exclude") or [])
    if exclude and impact.get("recovered_pct") is not None:
        phrase += f", excluding {fold_hosts(exclude)} recovers {_pct(impact['recovered_pct'])}"
    return phrase


def hosts_by_status(document: Document) -> dict[str, list[str]]:
    """Host labels grouped by status, ``ok`` first and the other statuses in name order."""
    groups: dict[str, list[str]] = defaultdict(list)
    for host in _hosts(document):
        groups[str(host.get("status"))].append(str(host.get("host")))
    return {status: groups[status] for status in sorted(groups, key=lambda s: (s != OK, s))}


def finding_where(finding: Mapping[str, Any], link_arrow: str = "↔", *, full_uuid: bool = False) -> str:
    """Where a finding is: ``node017:3 (GPU-1a2b3c4d…, 00000000:5D:00.0)`` for a GPU (the UUID whole
    with ``full_uuid``), ``node017:3↔5`` for a GPU pair in one host, ``node001 ↔ node004`` for a
    link, ``node050`` for a host, ``node[001-032] (share 72 % of hosts)`` for a fleet-wide shift."""
    where = finding_location(finding, link_arrow)
    ids = gpu_ids(finding, full_uuid=full_uuid)
    if ids:
        where += f" ({ids})"
    if finding.get("share_pct") is not None:
        where += f" (share {_share(finding['share_pct'])} of hosts)"
    return where


def finding_location(finding: Mapping[str, Any], link_arrow: str = "↔") -> str:
    """``node017:3``, ``node017:3↔5``, ``node001 ↔ node004`` or ``node050``: host, GPU index, peer."""
    host, peer = str(finding.get("host")), finding.get("peer")
    gpu, peer_gpu = finding.get("gpu"), finding.get("peer_gpu")
    where = host if gpu is None else f"{host}:{gpu}"
    if peer_gpu is not None and peer in (None, host):
        return f"{where}{link_arrow}{peer_gpu}"  # two GPUs of one host
    if peer is not None:
        where += f" {link_arrow} {peer}" + ("" if peer_gpu is None else f":{peer_gpu}")
    return where


def gpu_ids(finding: Mapping[str, Any], *, full_uuid: bool = False) -> str:
    """``GPU-1a2b3c4d…, 00000000:5D:00.0``: the GPU's UUID (shortened unless ``full_uuid``) and PCI
    bus id, those known; for a GPU pair they name ``gpu`` and say so (``3: GPU-…``). Empty when
    neither is known."""
    uuid, bus_id = finding.get("gpu_uuid"), finding.get("pci_bus_id")
    parts = [str(uuid) if full_uuid else short_uuid(str(uuid))] if uuid else []
    if bus_id:
        parts.append(str(bus_id))
    if not parts:
        return ""
    text = ", ".join(parts)
    if finding.get("peer_gpu") is not None and finding.get("gpu") is not None:
        text = f"{finding['gpu']}: {text}"
    return text


def short_uuid(uuid: str) -> str:
    """``GPU-1a2b3c4d…`` for ``GPU-1a2b3c4d-5e6f-…``; a UUID of another shape is cut after 12 characters."""
    match = SHORT_UUID.match(uuid)
    shown = match.group(0) if match else uuid[:12]
    return uuid if len(uuid) <= len(shown) + 1 else shown + "…"


def finding_measure(finding: Mapping[str, Any]) -> str:
    """``gemm.tflops 612.0 TFLOP/s vs fleet 742.0 TFLOP/s``; the metric alone when the finding has no
    figure; empty for a finding without a measurement."""
    metric, value = finding.get("metric"), finding.get("value")
    if metric is None and value is None:
        return ""
    text = str(metric or "value")
    if value is not None:
        text += f" {figure(value, finding.get('unit'))}"
    if finding.get("reference") is not None:
        text += f" vs {reference_text(finding)}"
    return text


def reference_text(finding: Mapping[str, Any]) -> str:
    """``fleet 742.0 TFLOP/s``: the reference with its source and unit; empty without a reference."""
    if finding.get("reference") is None:
        return ""
    source = finding.get("reference_source")
    text = figure(finding["reference"], finding.get("unit"))
    return f"{REFERENCE_SOURCE_WORDS.get(str(source), str(source))} {text}" if source else text


def figure(value: object, unit: object) -> str:
    """A number with its unit: ``612.0 TFLOP/s``, ``9.41 Gbit/s``, ``7`` (a count)."""
    text = _number_text(value)
    return f"{text} {unit}" if unit and unit not in UNSHOWN_UNITS else text


def basis_words(finding: Mapping[str, Any]) -> str:
    """What a finding rests on, in words (``confirmed by re-test``, ``NVML telemetry``, ...). A
    finding from before ``basis`` existed says ``confirmed`` / ``not confirmed`` for a deficit."""
    basis = finding.get("basis")
    if basis:
        return BASIS_WORDS.get(str(basis), str(basis))
    if finding.get("deficit_pct") is None or finding.get("confirmed") is None:
        return ""
    return "confirmed" if finding["confirmed"] else "not confirmed"


def action_verb(finding: Mapping[str, Any]) -> str | None:
    """The finding's action when it is one of the fixed verbs, else None (an older free-text action)."""
    action = finding.get("action")
    return str(action) if action in ACTION_VERBS else None


def action_words(finding: Mapping[str, Any]) -> str:
    """``drain — drain the node and run ...``: the verb and its detail; an older free-text action as
    it is; empty without either."""
    action, detail = finding.get("action"), finding.get("action_detail")
    return " — ".join(str(part) for part in (action, detail) if part)


# -------------------------------------------------------------------------------------- plain text


def render_text(document: Document) -> str:
    """Summary line, one line per finding (most costly first), hosts folded by status. No markup."""
    lines = [summary_line(document)]
    impact = _impact_detail(document.get("impact"))
    if impact:
        lines.append(f"impact: {impact}")
    findings = sort_findings(_findings(document))
    lines += ["", f"findings ({len(findings)}, most costly first):" if findings else "findings: none"]
    lines += [f"  {finding_text(finding)}" for finding in findings]
    lines += ["", "hosts:"]
    lines += [f"  {line}" for line in host_group_lines(document)]
    return "\n".join(lines) + "\n"


def finding_text(finding: Mapping[str, Any]) -> str:
    """``fail slow_gpu node017:3 (GPU-1a2b3c4d…, 00000000:5D:00.0) · gemm.tflops 612.0 TFLOP/s vs fleet
    742.0 TFLOP/s (-17.5 %, z -9.8) · confirmed by re-test · action: drain — detail · evidence``."""
    head = f"{finding.get('severity', '?'):<4} {finding.get('kind', '?')} {finding_where(finding)}"
    parts = [head]
    measure = finding_measure(finding)
    if measure:
        numbers = _deficit_words(finding)
        parts.append(f"{measure} ({numbers})" if numbers else measure)
    basis = basis_words(finding)
    if basis:
        parts.append(basis)
    action = action_words(finding)
    if action:
        parts.append(f"action: {action}")
    if finding.get("evidence"):
        parts.append(str(finding["evidence"]))
    return " · ".join(parts)


def host_group_lines(document: Document) -> list[str]:
    """``ok           61  node[001-049,052-064]``; other statuses add their first host's error."""
    errors = {str(h.get("host")): h.get("error") for h in _hosts(document)}
    lines = []
    for status, labels in hosts_by_status(document).items():
        line = f"{status:<16} {len(labels):>5}  {fold_hosts(labels)}"
        if status != OK and errors.get(labels[0]):
            line += f": {errors[labels[0]]}"
        lines.append(line)
    return lines


# ---------------------------------------------------------------------------------------- markdown


def render_markdown(document: Document) -> str:
    """Markdown: summary, impact, findings table, hosts-by-status table (GitHub tables, ``|`` escaped)."""
    headline = " · ".join(f"**{_md_cell(text)}**" if alarm else _md_cell(text)
                          for text, alarm in summary_parts(document))
    sections = [f"# gpudiag sweep {_md_cell(document.get('sweep_id', '?'))}", headline,
                f"Started {document.get('started_at', '?')}, finished {document.get('finished_at', '?')}."]
    impact_rows = _impact_rows(document.get("impact"))
    if impact_rows:
        sections += ["## Impact on a synchronous job", _md_table(["estimate", "value"], impact_rows)]
    findings = sort_findings(_findings(document))
    sections.append("## Findings, most costly first")
    sections.append(_md_table(FINDING_COLUMNS, [finding_row(f) for f in findings]) if findings else "None.")
    sections += ["## Hosts by status", _md_table(HOST_COLUMNS, host_group_rows(document))]
    return "\n\n".join(sections) + "\n"


FINDING_COLUMNS = ["severity", "action", "kind", "where", "metric", "value", "reference", "deficit", "robust z",
                   "basis", "evidence", "action detail"]
HOST_COLUMNS = ["status", "hosts", "count", "example error"]


def finding_row(finding: Mapping[str, Any], *, full_uuid: bool = False) -> list[str]:
    """The cells of one finding, in FINDING_COLUMNS order, as text: the action verb (or an older
    free-text action) with its detail apart, figures with their unit, the reference with its source."""
    deficit, robust_z, value = finding.get("deficit_pct"), finding.get("robust_z"), finding.get("value")
    return [str(finding.get("severity", "")), str(finding.get("action") or ""), str(finding.get("kind", "")),
            finding_where(finding, full_uuid=full_uuid), str(finding.get("metric") or ""),
            "" if value is None else figure(value, finding.get("unit")), reference_text(finding),
            "" if deficit is None else _pct(deficit), "" if robust_z is None else f"{robust_z:.1f}",
            basis_words(finding), str(finding.get("evidence") or ""), str(finding.get("action_detail") or "")]


def host_group_rows(document: Document) -> list[list[str]]:
    """One row per status: status, folded hosts, count and the first host's error."""
    errors = {str(h.get("host")): h.get("error") for h in _hosts(document)}
    return [[status, fold_hosts(labels), str(len(labels)), "" if status == OK else str(errors.get(labels[0]) or "")]
            for status, labels in hosts_by_status(document).items()]


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return tabulate([[_md_cell(cell) for cell in row] for row in rows], headers=list(headers),
                    tablefmt="github", disable_numparse=True)


def _md_cell(value: object) -> str:
    # A '|' would end the cell and a newline the row.
    return str(value).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


# -------------------------------------------------------------------------------------------- JSON


def render_json(document: Document) -> str:
    """The document itself (indent 1, keys in their order), its findings sorted by cost."""
    ordered = dict(document)
    ordered["findings"] = sort_findings(_findings(document))
    return json.dumps(ordered, indent=1, sort_keys=False) + "\n"


# -------------------------------------------------------------------------------------------- HTML


def render_html(document: Document) -> str:
    """One self-contained HTML file: summary and impact, hosts by status, findings, the GEMM heat
    map (host × GPU) and the node-to-node link matrix. Raises InstallationError without templates."""
    template, css = (_read_template(name) for name in TEMPLATE_FILES)
    title = f"gpudiag sweep {document.get('sweep_id', '?')}"
    return string.Template(template).substitute(
        title=_e(title), css=css, summary=html_summary(document),
        impact=html_impact(document.get("impact")), hosts=html_hosts(document),
        findings=html_findings(sort_findings(_findings(document))), heatmap=html_heatmap(document),
        links=html_links(document), footer=_e(_footer(document)))


def html_summary(document: Document) -> str:
    """The summary line, escaped, its alarms (nothing could be compared, ...) set in ``<strong>``."""
    return " · ".join(f'<strong class="alert">{_e(text)}</strong>' if alarm else _e(text)
                      for text, alarm in summary_parts(document))


def html_impact(impact: Mapping[str, Any] | None) -> str:
    """The impact block of the header, or a muted line when the document carries no estimate."""
    rows = _impact_rows(impact)
    if not rows:
        return '<p class="muted">No job-impact estimate in this sweep.</p>'
    cells = "".join(f"<tr><th>{_e(label)}</th><td>{_e(value)}</td></tr>" for label, value in rows)
    return f'<table class="impact" id="impact">{cells}</table>'


def html_hosts(document: Document) -> str:
    """Hosts folded by status: status, hosts, count, first error."""
    rows = [f'<tr class="status-{_e(row[0])}">' + "".join(f"<td>{_e(cell)}</td>" for cell in row) + "</tr>"
            for row in host_group_rows(document)]
    return _html_table("host-status", HOST_COLUMNS, rows)


def html_findings(findings: Sequence[Mapping[str, Any]]) -> str:
    """The findings table (already sorted), one row per finding: the action verb as a badge, the GPU's
    full UUID and PCI bus id, figures with units, what it rests on, the evidence and the detail."""
    if not findings:
        return '<p class="muted">No findings.</p>'
    rows = []
    for finding in findings:
        cells = finding_row(finding, full_uuid=True)
        attributes = [""] * len(cells)
        verb = action_verb(finding)
        attributes[1] = f' class="action act-{verb}"' if verb else ' class="action"'
        ids = gpu_ids(finding, full_uuid=True)
        if ids:
            attributes[3] = f' title="{_e(f"GPU {ids}")}"'
        row = "".join(f"<td{attribute}>{_e(cell)}</td>" for attribute, cell in zip(attributes, cells, strict=True))
        rows.append(f'<tr class="{_e(finding.get("severity", ""))}">{row}</tr>')
    return _html_table("findings-table", FINDING_COLUMNS, rows)


def gemm_cells(document: Document) -> dict[str, dict[int, float]]:
    """GEMM TFLOP/s by host and GPU index (``cuda:N``), from ok results; several results of one GPU
    give their median."""
    gathered: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for host in _hosts(document):
        for result in host.get("results") or []:
            index = _gemm_gpu_index(result)
            if index is not None:
                gathered[str(host.get("host"))][index].append(float(result["value"]))
    return {host: {gpu: statistics.median(values) for gpu, values in gpus.items()}
            for host, gpus in gathered.items()}


def gemm_references(document: Document, cells: Mapping[str, Mapping[int, float]]) -> dict[str, float]:
    """The median GEMM TFLOP/s of each GPU model over the fleet: a GPU is coloured against GPUs of
    its own model, never against another SKU (DESIGN.md: never pool different baseline keys)."""
    pooled: dict[str, list[float]] = defaultdict(list)
    for host in _hosts(document):
        pooled[_gpu_model(host)].extend(cells.get(str(host.get("host")), {}).values())
    return {model: statistics.median(values) for model, values in pooled.items() if values}


def heat_colour(ratio: float) -> str:
    """CSS colour of a value at ``ratio`` of its reference: green at or above it, yellow at 10 %
    below, red at HEAT_RED_RATIO and below."""
    share = min(1.0, max(0.0, (ratio - HEAT_RED_RATIO) / (1.0 - HEAT_RED_RATIO)))
    return f"hsl({round(120 * share)},70%,{round(68 + 12 * share)}%)"


def html_heatmap(document: Document) -> str:
    """GEMM TFLOP/s per host (rows) and GPU (columns), coloured against the fleet median of the
    GPU model; hosts without GEMM results are a greyed row with their status."""
    cells = gemm_cells(document)
    if not cells:
        return '<p class="muted">No GEMM results in this sweep.</p>'
    gpus = sorted({gpu for row in cells.values() for gpu in row})
    references = gemm_references(document, cells)
    headers = ["host", *(f"GPU {gpu}" for gpu in gpus), "worst"]
    rows = []
    for host in _hosts(document):
        label = str(host.get("host"))
        if label in cells:
            rows.append(_heat_row(label, cells[label], gpus, references.get(_gpu_model(host))))
        else:
            rows.append(_greyed_row(host, len(gpus) + 1))
    legend = _heat_legend(references)
    return legend + _html_table("gemm-heatmap", headers, rows, css_class="heatmap")


def link_medians(document: Document) -> dict[tuple[str, str], float]:
    """Median link value per unordered host pair (keys sorted), over phases and rails, for the most
    common link metric of the sweep."""
    links = [link for link in document.get("links") or [] if link.get("value") is not None]
    if not links:
        return {}
    metric = Counter(str(link.get("metric")) for link in links).most_common(1)[0][0]
    pooled: dict[tuple[str, str], list[float]] = defaultdict(list)
    for link in links:
        if str(link.get("metric")) == metric and link.get("a") != link.get("b"):
            pooled[_pair(str(link["a"]), str(link["b"]))].append(float(link["value"]))
    return {pair: statistics.median(values) for pair, values in pooled.items()}


def html_links(document: Document) -> str:
    """The symmetric host × host matrix of median link bandwidth (or, for a large fleet, the slowest
    pairs); a line saying so when the sweep measured no links."""
    medians = link_medians(document)
    if not medians:
        return '<p class="muted" id="no-links">no link measurements in this sweep</p>'
    reference = statistics.median(medians.values())
    unit = _link_unit(document)
    hosts = _link_hosts(document, medians)
    note = (f'<p class="legend">Median {_e(unit)} over phases and rails; colour against the median pair, '
            f"{_e(format_value(reference, unit))}.</p>")
    if len(hosts) > LINK_MATRIX_MAX_HOSTS:
        return note + _slowest_pairs(medians, reference, unit)
    rows = [_link_row(host, hosts, medians, reference, unit) for host in hosts]
    return note + _html_table("link-matrix", ["", *hosts], rows, css_class="heatmap links")


# ------------------------------------------------------------------------------------ HTML helpers


def _heat_row(host: str, values: Mapping[int, float], gpus: Sequence[int], reference: float | None) -> str:
    cells = [f"<th>{_e(host)}</th>"]
    ratios = []
    for gpu in gpus:
        value = values.get(gpu)
        if value is None:
            cells.append(f'<td class="missing" title="{_e(f"{host} GPU {gpu}: no GEMM result")}">-</td>')
            continue
        ratio = value / reference if reference else 1.0
        ratios.append(ratio)
        title = f"{host} GPU {gpu}: {_fixed(value)} TFLOP/s ({100 * ratio:.1f} % of median)"
        cells.append(f'<td style="background:{heat_colour(ratio)}" title="{_e(title)}">{_fixed(value)}</td>')
    worst = min(ratios)
    cells.append(f'<td class="worst" style="background:{heat_colour(worst)}">{100 * worst:.1f} %</td>')
    return "<tr>" + "".join(cells) + "</tr>"


def _greyed_row(host: Mapping[str, Any], span: int) -> str:
    status = str(host.get("status"))
    text = f"{status}: {host.get('error')}" if host.get("error") else f"{status}: no GEMM result"
    return (f'<tr class="nodata"><th>{_e(host.get("host"))}</th>'
            f'<td colspan="{span}">{_e(text)}</td></tr>')


def _heat_legend(references: Mapping[str, float]) -> str:
    steps = [1.0, 0.95, 0.9, 0.85, HEAT_RED_RATIO]
    swatches = "".join(f'<span class="swatch" style="background:{heat_colour(r)}">{100 * r:.0f} %</span>'
                       for r in steps)
    medians = "; ".join(f"{model}: {format_value(value, 'TFLOP/s')}" for model, value in sorted(references.items()))
    return f'<p class="legend">Share of the fleet median of the GPU model ({_e(medians)}): {swatches}</p>'


def _link_row(host: str, hosts: Sequence[str], medians: Mapping[tuple[str, str], float], reference: float,
              unit: str) -> str:
    cells = [f"<th>{_e(host)}</th>"]
    for other in hosts:
        if other == host:
            cells.append('<td class="self">-</td>')
            continue
        value = medians.get(_pair(host, other))
        if value is None:
            cells.append('<td class="missing"></td>')
            continue
        ratio = value / reference if reference else 1.0
        title = f"{host} - {other}: {format_value(value, unit)}"
        cells.append(f'<td style="background:{heat_colour(ratio)}" title="{_e(title)}">{_fixed(value)}</td>')
    return "<tr>" + "".join(cells) + "</tr>"


def _slowest_pairs(medians: Mapping[tuple[str, str], float], reference: float, unit: str) -> str:
    pairs = sorted(medians.items(), key=lambda item: (item[1], item[0]))[:SLOWEST_PAIRS_SHOWN]
    rows = [f'<tr><td>{_e(a)}</td><td>{_e(b)}</td><td style="background:{heat_colour(value / reference)}">'
            f"{_fixed(value)}</td></tr>" for (a, b), value in pairs]
    caption = (f'<p class="legend">{len(medians)} pairs measured; the {len(pairs)} slowest are shown '
               "(the full matrix is in the JSON document).</p>")
    return caption + _html_table("link-pairs", ["host", "peer", unit], rows)


def _pair(a: str, b: str) -> tuple[str, str]:
    """The key of an unordered host pair."""
    return (a, b) if a <= b else (b, a)


def _link_hosts(document: Document, medians: Mapping[tuple[str, str], float]) -> list[str]:
    """Hosts with a link measurement, in the document's host order (then any others by name)."""
    present = {host for pair in medians for host in pair}
    ordered = [str(h.get("host")) for h in _hosts(document) if str(h.get("host")) in present]
    return ordered + sorted(present - set(ordered))


def _link_unit(document: Document) -> str:
    metrics = Counter(str(link.get("metric")) for link in document.get("links") or [])
    metric = metrics.most_common(1)[0][0] if metrics else ""
    return LINK_UNITS.get(metric, metric)


def _html_table(table_id: str, headers: Sequence[str], rows: Sequence[str], css_class: str = "") -> str:
    head = "".join(f"<th>{_e(header)}</th>" for header in headers)
    klass = f' class="{css_class}"' if css_class else ""
    return (f'<table id="{table_id}"{klass}><thead><tr>{head}</tr></thead>\n<tbody>\n'
            + "\n".join(rows) + "\n</tbody></table>")


def _footer(document: Document) -> str:
    return (f"{document.get('schema', 'gpudiag.sweep')} · started {document.get('started_at', '?')} · "
            f"finished {document.get('finished_at', '?')}")


def _read_template(name: str) -> str:
    path = reports_dir() / name
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise InstallationError(f"the report template {path} cannot be read ({error.strerror}); "
                                "reinstall gpudiag") from error


def reports_dir() -> Path:
    """The folder of the report templates: the installed ``gpudiag.reports`` package data, or the
    ``reports/`` of a source checkout. Raises InstallationError when neither is there."""
    spec = importlib.util.find_spec("gpudiag.reports")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    # An editable install made before reports/ joined the package mapping still finds the checkout's.
    checkout = Path(__file__).resolve().parents[1] / "reports"
    if (checkout / TEMPLATE_FILES[0]).is_file():
        return checkout
    raise InstallationError("the report templates (gpudiag.reports) are not installed; reinstall gpudiag")


# --------------------------------------------------------------------------------- shared helpers


def _hosts(document: Document) -> list[Mapping[str, Any]]:
    return list(document.get("hosts") or [])


def _findings(document: Document) -> list[Mapping[str, Any]]:
    return list(document.get("findings") or [])


def _gpu_model(host: Mapping[str, Any]) -> str:
    return str((host.get("facts") or {}).get("gpu_model") or "unknown GPU")


def _gemm_gpu_index(result: Mapping[str, Any]) -> int | None:
    """The GPU index of an ok GEMM TFLOP/s result on ``cuda:N``, else None."""
    if result.get("probe") != "gemm" or result.get("metric") != "tflops" or result.get("value") is None:
        return None
    if result.get("status", OK) != OK:
        return None
    return device_index(result.get("device", "")) if str(result.get("device", "")).startswith("cuda:") else None


def _deficit_words(finding: Mapping[str, Any]) -> str:
    words = []
    if finding.get("deficit_pct") is not None:
        words.append(f"-{_pct(finding['deficit_pct'])}")
    if finding.get("robust_z") is not None:
        words.append(f"z {finding['robust_z']:.1f}")
    return ", ".join(words)


def _impact_detail(impact: Mapping[str, Any] | None) -> str:
    rows = dict(_impact_rows(impact))
    shown = ("slowest", "exclude")
    return " · ".join(f"{label} {rows[label]}" for label in shown if label in rows)


def _impact_rows(impact: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """(label, text) pairs of the impact estimate; empty without one."""
    if not impact or impact.get("slowdown_pct") is None:
        return []
    rows = [("job slowdown", _pct(impact["slowdown_pct"]))]
    slowest = impact.get("slowest")
    if slowest:
        rows.append(("slowest", f"{finding_where(slowest)} {finding_measure(slowest)}".strip()))
    exclude = list(impact.get("exclude") or [])
    if exclude:
        total = impact.get("hosts_total")
        rows.append(("exclude", f"{fold_hosts(exclude)} ({len(exclude)} of {total} hosts)" if total
                     else fold_hosts(exclude)))
    if impact.get("recovered_pct") is not None:
        rows.append(("recovered by excluding", _pct(impact["recovered_pct"])))
    return rows


def _fixed(value: float) -> str:
    """One decimal for numbers from 10 up, three significant digits below: columns line up."""
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def _pct(value: float) -> str:
    return f"{float(value):.1f} %"


def _share(value: float) -> str:
    """``72 %``, ``72.5 %``: a share of hosts, whole where it is whole."""
    share = float(value)
    return f"{share:.0f} %" if share.is_integer() else f"{share:.1f} %"


def _number_text(value: object) -> str:
    """A count as it is, a measurement as ``_fixed`` writes it, anything else as text."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return str(value) if isinstance(value, int) else _fixed(value)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _remove_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
