"""Findings: what a sweep concluded, each with evidence and an action (the JSON contract's
``findings[]``).

``action`` is a fixed verb a pre-flight hook can branch on; ``action_detail`` says it in plain
words. ``basis`` says what a finding rests on; ``confirmed`` is true only where a re-test
repeated the deficit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The sweep document's schema: the name and version of the JSON contract (docs/document.md).
SWEEP_SCHEMA = "gpudiag.sweep/1"

FAIL = "fail"
WARN = "warn"

# The fixed verbs of ``action``, most drastic first.
DRAIN = "drain"
RESET_GPU = "reset_gpu"
REBOOT = "reboot"
INSPECT = "inspect"
WATCH = "watch"
ACTION_VERBS = (DRAIN, RESET_GPU, REBOOT, INSPECT, WATCH)

# What a finding rests on.
BASIS_RETEST = "retest"            # a re-test repeated the deficit (confirmed)
BASIS_SINGLE_RUN = "single_run"    # one measurement, not re-tested (or the re-test could not run)
BASIS_TELEMETRY = "telemetry"      # NVML readings
BASIS_FACTS = "facts"              # the host's facts (GPU count, CPUs, load, memory)
BASIS_HOST_STATUS = "host_status"  # the host could not be probed
BASIS_ERROR_RECORD = "error_record"  # a probe reported an error instead of a figure
BASIS_COMPARISON = "comparison"    # a figure with nothing to compare it with

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
    """One conclusion about a host, a GPU, a GPU pair, a link between two hosts, or the fleet.

    ``value`` and ``reference`` are in ``unit``; ``deficit_pct`` is how far ``value`` falls below
    ``reference`` (percent); ``robust_z`` its distance from the reference in robust standard
    deviations; ``share_pct`` the share of hosts a fleet-wide finding touches. Fields that do not
    apply are None.
    """

    kind: str
    severity: str
    host: str
    evidence: str
    action: str
    action_detail: str = ""
    basis: str = BASIS_SINGLE_RUN
    peer: str | None = None
    gpu: int | None = None
    peer_gpu: int | None = None
    gpu_uuid: str | None = None
    pci_bus_id: str | None = None
    metric: str | None = None
    value: float | None = None
    reference: float | None = None
    unit: str | None = None
    reference_source: str | None = None
    deficit_pct: float | None = None
    robust_z: float | None = None
    share_pct: float | None = None
    confirmed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "severity": self.severity, "host": self.host, "peer": self.peer,
                "gpu": self.gpu, "peer_gpu": self.peer_gpu, "gpu_uuid": self.gpu_uuid,
                "pci_bus_id": self.pci_bus_id, "metric": self.metric, "value": self.value,
                "reference": self.reference, "unit": self.unit, "reference_source": self.reference_source,
                "deficit_pct": self.deficit_pct, "robust_z": self.robust_z, "share_pct": self.share_pct,
                "confirmed": self.confirmed, "basis": self.basis, "evidence": self.evidence,
                "action": self.action, "action_detail": self.action_detail}


def cost_order(finding: Mapping[str, Any]) -> tuple[Any, ...]:
    """Sort key of a finding (its JSON object): what it costs a job first. ``fail`` before
    ``warn``, the largest deficit first (None last), then kind, host, peer, GPU and metric, so
    the order is the same whatever order the findings came in."""
    severity_rank = {FAIL: 0, WARN: 1}.get(str(finding.get("severity")), 2)
    deficit = finding.get("deficit_pct")
    gpu = finding.get("gpu")
    return (severity_rank, deficit is None, -(deficit or 0.0), str(finding.get("kind", "")),
            str(finding.get("host", "")), finding.get("peer") is not None, str(finding.get("peer") or ""),
            gpu is None, gpu if gpu is not None else 0, str(finding.get("metric") or ""),
            str(finding.get("evidence") or ""))


def unchecked(host: str, status: str, error: str | None) -> Finding:
    """The finding for a host that could not be probed: a warning, so the run exits 3, not 1."""
    return Finding(kind="unchecked", severity=WARN, host=host, evidence=f"{status}: {error or 'no detail'}",
                   action=INSPECT, action_detail=UNCHECKED_ACTIONS.get(status, "investigate the node"),
                   basis=BASIS_HOST_STATUS)
