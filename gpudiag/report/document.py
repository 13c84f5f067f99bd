"""The sweep document (docs/document.md): written one host at a time, at the detail asked for
(gpudiag.report.detail), strict JSON, replacing its file in one step."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from typing import Any

from ..run.fanout import SweepResult
from ..schema.jsonout import dumps as strict_dumps
from . import write_report
from .detail import COMPACT, FULL, compact_host, flagged_gpus


def write_sweep_json(result: SweepResult, path: str, detail: str = COMPACT,
                     parts: Mapping[str, Any] | None = None) -> None:
    """Write the sweep document to ``path`` (``-``: stdout) at ``detail`` (gpudiag.report.detail: full or
    compact), with a use case's ``parts`` (see document_chunks), one host at a time, replacing the
    file in one step so a reader never sees half a document. Raises OutputError when it cannot be
    written."""
    chunks = document_chunks(result, detail, parts)
    if path == "-":
        for chunk in chunks:
            sys.stdout.write(chunk)
        sys.stdout.flush()
        return
    write_report(chunks, path)


def write_exclude_list(result: SweepResult, path: str) -> None:
    """Write the hosts a job should not get (the impact's ``exclude``), one per line, to ``path``.
    Raises OutputError when it cannot be written."""
    exclude = (result.impact or {}).get("exclude") or []
    write_report("".join(f"{host}\n" for host in exclude), path)


def document_chunks(result: SweepResult, detail: str = COMPACT,
                    parts: Mapping[str, Any] | None = None) -> Iterator[str]:
    """The sweep document's JSON text in pieces, each host's records unpacked only for its own
    piece; ``detail`` is COMPACT or FULL. The document says its detail (``json_detail``);
    ``parts`` are fields a use case adds after the sweep's own (a pre-flight's ``preflight``).
    Strict JSON: a non-finite figure is null (gpudiag.schema.jsonout), never a bare NaN or
    Infinity."""
    # The hosts and the findings are written one at a time: a fleet's worth of their dicts, or of
    # their JSON in one string, is never held at once.
    skeleton = {**result.to_dict(records=False, items=False), **(parts or {})}
    flagged = flagged_gpus(finding.to_dict() for finding in result.findings) if detail == COMPACT else {}
    fields = list(skeleton)
    fields.insert(fields.index("hosts"), "json_detail")
    skeleton["json_detail"] = detail
    yield "{"
    for index, name in enumerate(fields):
        yield ("" if index == 0 else ", ") + strict_dumps(name) + ": "
        if name == "hosts":
            entries: Iterator[Mapping[str, Any]] = (
                host.to_dict() if detail == FULL else compact_host(host, flagged.get(host.host, frozenset()))
                for host in result.hosts)
        elif name == "findings":
            entries = (finding.to_dict() for finding in result.findings)
        else:
            yield strict_dumps(skeleton[name])
            continue
        yield "["
        for number, entry in enumerate(entries):
            yield ("" if number == 0 else ", ") + strict_dumps(entry)
        yield "]"
    yield "}\n"
