"""Reports from a sweep document (docs/document.md): plain text, markdown, JSON and one self-contained HTML file.

Every format starts from the same document (``SweepResult.to_dict()`` or a file written with ``--json``)
and may use its optional ``impact`` object: the estimated slowdown of a synchronous job on these hosts
(it runs at the pace of its slowest GPU), what excluding the flagged hosts recovers, and which they are::

    {"slowdown_pct": 30.0, "slowest": {"host", "gpu", "metric", "value", "reference"},
     "recovered_pct": 28.0, "exclude": ["node012", ...], "hosts_total": 64}

With the network counted it also carries ``gpu_slowdown_pct`` and ``network_slowdown_pct`` (the job's
slowdown is the larger; None where the GPUs were not compared), the slowest link and ``fabric``: each
slow part of the fabric between switches with its rail, the nodes behind it and what it costs.
A finding of no host (``slow_fabric_link``, ``slow_switch``, ``slow_network``) is shown where it is:
its switches, ports and rail, or the network of its pair tests.

Findings are always listed by what they cost the job (``sort_findings``); hosts are folded by status.
Each finding shows its figures with their unit and the source of the reference, the GPU by index, UUID
and PCI bus id, its action verb (``drain`` ... ``watch``) with the detail, and what it rests on
(``basis``). Documents stored before those fields existed still render: a missing key counts as null
and an ``action`` that is not one of the verbs is shown as the text it is.
The HTML report needs no network and no JavaScript: colours are computed here and written inline.

The parts: ``phrasing`` (the words of a finding, its figures and host groups, shared by every
format), ``summary`` (the summary line and the impact estimate), ``linkfigures`` (the pair figures
per rail against the reference of their group, hosts ordered suspects first; shared by every
format), one module per format (``text``, ``markdown``, ``html``; JSON is here), and the HTML
report's colour grids (``heatmap``: the colour scale and the device grid, each GPU's worst figure
across every measured metric, read by ``gpufigures``; ``linkmap``: the link
section, one row per host with its partners, and the host × host matrix for a small fleet) and
table markup (``markup``).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..errors import InputError, OutputError
from ..schema.jsonout import dumps as strict_dumps
from .heatmap import heat_colour
from .html import render_html, reports_dir
from .markdown import render_markdown
from .phrasing import Document, _findings, finding_measure, finding_where, hosts_by_status, sort_findings
from .summary import impact_phrase, summary_line, summary_parts
from .text import render_text

__all__ = [
    "FORMATS",
    "finding_measure",
    "finding_where",
    "heat_colour",
    "hosts_by_status",
    "impact_phrase",
    "render_html",
    "render_json",
    "render_markdown",
    "render_report",
    "render_text",
    "reports_dir",
    "sort_findings",
    "summary_line",
    "summary_parts",
    "write_report",
]

FORMATS = ("text", "md", "json", "html")


def render_report(document: Document, fmt: str, *, outputs: Sequence[str] | None = ()) -> str:
    """The report of one sweep document in ``fmt`` (``text``, ``md``, ``json`` or ``html``); the
    text ends with the verdict line, naming ``outputs`` (where the run's outputs went, in words;
    None: no verdict line, for a caller that ends with its own).

    Returns the whole report as one string, ending with a newline. Raises ValueError for another
    format, and InstallationError when the HTML templates are missing from the installation.
    """
    renderers: dict[str, Callable[[Document], str]] = {
        "text": lambda document: render_text(document, outputs), "md": render_markdown, "json": render_json,
        "html": render_html}
    if fmt not in renderers:
        raise ValueError(f"unknown report format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return renderers[fmt](document)


def render_json(document: Document) -> str:
    """The document itself (indent 1, keys in their order), its findings sorted by cost."""
    ordered = dict(document)
    ordered["findings"] = sort_findings(_findings(document))
    return strict_dumps(ordered, indent=1, sort_keys=False) + "\n"


def write_report(text: str | Iterable[str], path: str | os.PathLike[str]) -> None:
    """Write ``text`` (UTF-8; a string, or pieces of one written as they come) to ``path`` in one
    step: a temporary file in the same folder, then ``os.replace``, so a reader never sees half a
    report. The file gets the usual permissions (0666 less the umask). Raises OutputError when it
    cannot be written."""
    target = Path(path)
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    created = replaced = False
    try:
        # os.open applies the umask; tempfile's private 0600 would hide a report meant to be shared.
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        created = True
        with open(descriptor, "w", encoding="utf-8") as out:
            for piece in [text] if isinstance(text, str) else text:
                out.write(piece)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)
        replaced = True
    except OSError as error:
        raise OutputError(f"{path}: cannot write the report: {error.strerror or error}") from error
    finally:
        if created and not replaced:
            _remove_quietly(temporary)


def check_writable(path: str | os.PathLike[str], option: str) -> None:
    """Raise InputError (naming ``option``, the path and the fix) unless ``write_report`` could
    write ``path``: its folder exists and takes a new file, and the path is no folder. Tried
    with a real file, so a read-only file system or a full disk is caught before any work."""
    target = Path(path)
    if target.is_dir():
        raise InputError(f"{option} {path}: is a folder; give a file path")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"{option} {path}: the folder {folder} does not exist; create it or give another path")
    probe = folder / f".{target.name}.{secrets.token_hex(4)}.check"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as error:
        raise InputError(f"{option} {path}: cannot write in {folder} ({error.strerror or error}); "
                         "give a writable path") from None
    _remove_quietly(probe)


def _remove_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
