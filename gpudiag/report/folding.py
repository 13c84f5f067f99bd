"""Findings that differ only by their host, said once: after an interrupt, 61 hosts ``unchecked``
with the same evidence and action are one line ``warn unchecked node[004-064] (61 hosts) · ...``,
in every format (text, markdown, HTML). The document keeps every finding; only the reports fold.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..hosts import fold_hosts

# A folded finding's hosts (the document's findings have one ``host`` each).
HOSTS = "hosts"
_HOST_MARK = "\x00host\x00"


def fold_findings(findings: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``findings`` (in report order) with those alike but for their host made one, at the place
    of the first: its ``host`` the folded set (``node[004-064]``), ``hosts`` the hosts. A finding
    with a GPU, a peer or a figure of its own differs in that field too, and stays apart."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for index, finding in enumerate(findings):
        # a finding of no host (the fabric's) names its own part: never folded with another
        key = _likeness(finding) if finding.get("host") is not None else f"\x00apart\x00{index}"
        groups.setdefault(key, []).append(finding)
    folded: list[Mapping[str, Any]] = []
    for group in groups.values():
        if len(group) == 1:
            folded.append(group[0])
            continue
        hosts = [str(finding.get("host")) for finding in group]
        first, label = group[0], fold_hosts(hosts)
        folded.append({**{name: _renamed(value, str(first.get("host")), label) for name, value in first.items()},
                       "host": label, HOSTS: hosts})
    return folded


def host_count_words(finding: Mapping[str, Any]) -> str:
    """`` (61 hosts)`` for a folded finding; empty for one of one host."""
    hosts = finding.get(HOSTS)
    return f" ({len(hosts)} hosts)" if isinstance(hosts, list) and len(hosts) > 1 else ""


def _likeness(finding: Mapping[str, Any]) -> str:
    """Every field but the host, with the host's name in its texts masked: equal for findings that
    differ only by their host."""
    host = str(finding.get("host") or "")
    rest = {name: _renamed(value, host, _HOST_MARK) for name, value in finding.items() if name != "host"}
    return json.dumps(rest, sort_keys=True, default=str)


def _renamed(value: Any, host: str, name: str) -> Any:
    return value.replace(host, name) if host and isinstance(value, str) else value
