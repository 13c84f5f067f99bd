"""Findings: what a sweep concluded, each with evidence and an action (the JSON contract's
``findings[]``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

FAIL = "fail"
WARN = "warn"

# What to do about a host that could not be checked, by its status.
UNCHECKED_ACTIONS = {
    "unreachable": "check that the node is up and reachable over SSH",
    "auth_failed": "fix SSH access for the sweep's user (authorized_keys, -i/--identity)",
    "host_key_unknown": "verify the node's host key and add it to known_hosts, or use --accept-new-host-keys",
    "host_key_changed": "verify the node's identity; if it was reinstalled, remove the stale known_hosts entry",
    "timeout": "the node did not finish in time: look for a hung GPU, driver or an overloaded host",
    "probe_error": "check the node's Python, torch and driver (see the error)",
    "interrupted": "run the sweep again",
}


@dataclass(frozen=True)
class Finding:
    """One conclusion about a host, a GPU, or a link between two hosts.

    ``deficit_pct`` is how far ``value`` falls below ``reference`` (percent); ``robust_z`` its
    distance from the reference in robust standard deviations. Fields that do not apply are None.
    """

    kind: str
    severity: str
    host: str
    evidence: str
    action: str
    peer: str | None = None
    gpu: int | None = None
    metric: str | None = None
    value: float | None = None
    reference: float | None = None
    deficit_pct: float | None = None
    robust_z: float | None = None
    confirmed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "severity": self.severity, "host": self.host, "peer": self.peer,
                "gpu": self.gpu, "metric": self.metric, "value": self.value, "reference": self.reference,
                "deficit_pct": self.deficit_pct, "robust_z": self.robust_z, "confirmed": self.confirmed,
                "evidence": self.evidence, "action": self.action}


def cost_order(finding: Mapping[str, Any]) -> tuple[Any, ...]:
    """Sort key of a finding (its JSON object): what it costs a job first. ``fail`` before
    ``warn``, the largest deficit first (None last), then kind, host, peer, GPU and metric, so
    the order is the same whatever order the findings came in."""
    severity_rank = {FAIL: 0, WARN: 1}.get(str(finding.get("severity")), 2)
    deficit = finding.get("deficit_pct")
    gpu = finding.get("gpu")
    return (severity_rank, deficit is None, -(deficit or 0.0), str(finding.get("kind", "")),
            str(finding.get("host", "")), finding.get("peer") is not None, str(finding.get("peer") or ""),
            gpu is None, gpu if gpu is not None else 0, str(finding.get("metric") or ""))


def unchecked(host: str, status: str, error: str | None) -> Finding:
    """The finding for a host that could not be probed: a warning, so the run exits 3, not 1."""
    return Finding(kind="unchecked", severity=WARN, host=host, evidence=f"{status}: {error or 'no detail'}",
                   action=UNCHECKED_ACTIONS.get(status, "investigate the node"), confirmed=True)
