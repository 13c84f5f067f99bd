"""Findings: what a sweep concluded, each with evidence and an action (the JSON contract's
``findings[]``).

``kind``, ``severity``, ``action`` and ``basis`` are fixed vocabularies, each defined here once as
a str enum (Kind, Severity, Action, Basis) whose members are their JSON strings. ``action`` is a
fixed verb a pre-flight hook can branch on; ``action_detail`` says it in plain words. ``basis``
says what a finding rests on; ``confirmed`` is true only where a re-test repeated the deficit.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

Item = TypeVar("Item")

# The sweep document's schema: the name and version of the JSON contract (docs/document.md).
SWEEP_SCHEMA = "gpudiag.sweep/1"

if sys.version_info >= (3, 11):
    class Words(enum.StrEnum):
        """A fixed vocabulary (the JSON contract's, or gpudiag.analysis.actions.Cause): each member is
        its string value (it equals, hashes, sorts, formats and is written to JSON or the store as
        that string)."""
else:  # pragma: no cover - Python 3.10: StrEnum's behaviour
    class Words(str, enum.Enum):
        """A fixed vocabulary (the JSON contract's, or gpudiag.analysis.actions.Cause): each member is
        its string value (it equals, hashes, sorts, formats and is written to JSON or the store as
        that string)."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return str(self.value).__format__(spec)


class Severity(Words):
    """How much a finding matters: ``fail`` (act on it), ``warn`` (watch it, or it could not be
    checked) or ``watch`` (information, never a drain, never an exit status of its own: a part
    sliding over the stored sweeps, a pair slow once and not on its re-test, a NIC suspect its
    other pairs cleared)."""

    FAIL = "fail"
    WARN = "warn"
    WATCH = "watch"


class Action(Words):
    """The fixed verbs of ``action``, most drastic first; the first three take the node out of
    service."""

    DRAIN = "drain"
    RESET_GPU = "reset_gpu"
    REBOOT = "reboot"
    INSPECT = "inspect"
    WATCH = "watch"


class Basis(Words):
    """What a finding rests on."""

    RETEST = "retest"              # a re-test repeated the deficit (confirmed)
    SINGLE_RUN = "single_run"      # one measurement, not re-tested (or the re-test could not run)
    TELEMETRY = "telemetry"        # NVML readings, the NIC ports in sysfs, the kernel log
    FACTS = "facts"                # the host's facts (GPU count, CPUs, load, memory)
    HOST_STATUS = "host_status"    # the host could not be probed
    ERROR_RECORD = "error_record"  # a probe reported an error instead of a figure
    COMPARISON = "comparison"      # a figure with nothing to compare it with
    HISTORY = "history"            # a line through the part's figures in the stored sweeps


class Kind(Words):
    """What a finding found (docs/document.md, "Finding kinds")."""

    SLOW_GPU = "slow_gpu"
    SLOW_NODE = "slow_node"
    THROTTLED = "throttled"
    DEGRADED_PCIE = "degraded_pcie"
    NVLINK_DOWN = "nvlink_down"
    NVLINK_ERRORS = "nvlink_errors"
    ECC = "ecc"
    MISSING_GPU = "missing_gpu"
    NIC_PORT = "nic_port"
    XID = "xid"
    SLOW_LINK = "slow_link"
    SLOW_NIC = "slow_nic"
    LINK_ERROR = "link_error"
    FLEET_SHIFT = "fleet_shift"
    SOFTWARE_REGRESSION = "software_regression"
    SLOW_FABRIC_LINK = "slow_fabric_link"
    SLOW_SWITCH = "slow_switch"
    SLOW_NETWORK = "slow_network"
    SLOW_DEGRADATION = "slow_degradation"
    UNCHECKED = "unchecked"


# Findings about the network between switches: they name no host (``host`` is None), drain none
# and keep none out of a job; whoever runs the network acts on them.
FABRIC_KINDS = frozenset({Kind.SLOW_FABRIC_LINK, Kind.SLOW_SWITCH})


@dataclass(frozen=True)
class FabricPart:
    """A part of the switched fabric a finding names, in the plane of ``rail`` (None: the plane
    every rail shares): a link between two switches (``switches``: its two ends, exactly as the
    topology names them; ``ports``: the port on each, where the link is one cable and both are
    known) or a switch (``switch``)."""

    rail: int | None
    switches: tuple[str, ...] = ()
    ports: tuple[str, str] | None = None
    switch: str | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.switch is not None:
            return {"rail": self.rail, "switch": self.switch}
        return {"rail": self.rail, "switches": list(self.switches),
                "ports": None if self.ports is None else list(self.ports)}


# What to do about a host that could not be checked, by its status.
# The status of a host the sweep was interrupted before it finished: unfinished, neither passed nor
# excluded (gpudiag.analysis.fleet).
INTERRUPTED = "interrupted"
UNCHECKED_ACTIONS = {
    "unreachable": "check that the node is up and reachable over SSH",
    "auth_failed": "fix SSH access for the sweep's user (authorized_keys, -i/--identity)",
    "host_key_unknown": "verify the node's host key and add it to known_hosts, or use --accept-new-host-keys",
    "host_key_changed": "verify the node's identity; if it was reinstalled, remove the stale known_hosts entry",
    "timeout": "the node did not finish in time: look for a hung GPU, driver or an overloaded host",
    "probe_error": "check the node's Python, torch and driver (see the error)",
    "identity_conflict": ("the node claims another host's identity: check its hostname and GPU inventory (a cloned "
                          "image, a wrong DNS or SSH alias, or a node posing as another), then sweep it again"),
    INTERRUPTED: "run the sweep again",
}


@dataclass(frozen=True, slots=True)
class Finding:
    """One conclusion about a host, a GPU, a GPU pair, a link between two hosts, a part of the
    fabric between switches (``host`` None, ``fabric`` naming it), or the fleet.

    ``value`` and ``reference`` are in ``unit``; ``deficit_pct`` is how far ``value`` falls below
    ``reference`` (percent); ``robust_z`` its distance from the reference in robust standard
    deviations; ``share_pct`` the share of hosts a fleet-wide finding touches. Fields that do not
    apply are None.
    """

    kind: Kind
    severity: Severity
    host: str | None
    evidence: str
    action: Action
    action_detail: str = ""
    basis: Basis = Basis.SINGLE_RUN
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
    fabric: tuple[FabricPart, ...] = ()  # the fabric part a finding of FABRIC_KINDS names, or the set it narrowed to

    def __post_init__(self) -> None:
        # A word read back from a document is a plain string: made its member here, so a finding
        # is the same whichever way it was made (a word outside the vocabulary raises ValueError).
        for name, words in (("kind", Kind), ("severity", Severity), ("action", Action), ("basis", Basis)):
            object.__setattr__(self, name, words(getattr(self, name)))

    def to_dict(self) -> dict[str, Any]:
        """The finding's JSON object (``FindingView`` reads the same without making it)."""
        return {"kind": self.kind, "severity": self.severity, "host": self.host, "peer": self.peer,
                "gpu": self.gpu, "peer_gpu": self.peer_gpu, "gpu_uuid": self.gpu_uuid,
                "pci_bus_id": self.pci_bus_id, "metric": self.metric, "value": self.value,
                "reference": self.reference, "unit": self.unit, "reference_source": self.reference_source,
                "deficit_pct": self.deficit_pct, "robust_z": self.robust_z, "share_pct": self.share_pct,
                "confirmed": self.confirmed, "basis": self.basis, "evidence": self.evidence,
                "action": self.action, "action_detail": self.action_detail, **self._fabric_dict()}

    def _fabric_dict(self) -> dict[str, Any]:
        """``fabric_link`` (a located link), ``switch`` (a located switch), or, for a set the
        tests could not split, both null and ``fabric_candidates`` listing it."""
        if not self.fabric:
            return {}
        if len(self.fabric) > 1:
            return {"fabric_link": None, "switch": None, "fabric_candidates": [p.to_dict() for p in self.fabric]}
        part = self.fabric[0]
        if part.switch is not None:
            return {"fabric_link": None, "switch": part.switch, "rail": part.rail}
        return {"fabric_link": part.to_dict(), "switch": None}


# The fields of Finding.to_dict that are the finding's own attributes, in the JSON object's order.
_PLAIN_FIELDS = ("kind", "severity", "host", "peer", "gpu", "peer_gpu", "gpu_uuid", "pci_bus_id", "metric", "value",
                 "reference", "unit", "reference_source", "deficit_pct", "robust_z", "share_pct", "confirmed",
                 "basis", "evidence", "action", "action_detail")
_PLAIN = frozenset(_PLAIN_FIELDS)


class FindingView(Mapping[str, Any]):
    """A finding read as its JSON object (``Finding.to_dict``, key for key) without making the dict:
    a report or the store reading a fleet's findings in this process holds 56 bytes a finding, not
    a dict of some twenty keys. Not JSON itself: ``dict(view)`` is."""

    __slots__ = ("finding",)

    def __init__(self, finding: Finding) -> None:
        self.finding = finding

    def __getitem__(self, name: str) -> Any:
        if name in _PLAIN:
            return getattr(self.finding, name)
        return self.finding._fabric_dict()[name]

    def __iter__(self) -> Iterator[str]:
        yield from _PLAIN_FIELDS
        yield from self.finding._fabric_dict()

    def __len__(self) -> int:
        return len(_PLAIN_FIELDS) + len(self.finding._fabric_dict())


class FindingViews(Sequence[FindingView]):
    """``findings`` as FindingViews, each made when it is read."""

    __slots__ = ("_findings",)

    def __init__(self, findings: Sequence[Finding]) -> None:
        self._findings = findings

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [FindingView(finding) for finding in self._findings[index]]
        return FindingView(self._findings[index])

    def __len__(self) -> int:
        return len(self._findings)


_SEVERITY_RANK = {Severity.FAIL: 0, Severity.WARN: 1, Severity.WATCH: 2}
# The parts of a finding's sort key (cost_order), most significant first.
_COST_PARTS: tuple[Callable[[Mapping[str, Any]], Any], ...] = (
    lambda finding: _SEVERITY_RANK.get(str(finding.get("severity")), 3),
    lambda finding: finding.get("deficit_pct") is None,
    lambda finding: -(finding.get("deficit_pct") or 0.0),
    lambda finding: str(finding.get("kind", "")),
    lambda finding: str(finding.get("host", "")),
    lambda finding: finding.get("peer") is not None,
    lambda finding: str(finding.get("peer") or ""),
    lambda finding: finding.get("gpu") is None,
    lambda finding: finding.get("gpu") if finding.get("gpu") is not None else 0,
    lambda finding: str(finding.get("metric") or ""),
    lambda finding: str(finding.get("evidence") or ""),
)


def cost_order(finding: Mapping[str, Any]) -> tuple[Any, ...]:
    """Sort key of a finding (its JSON object): what it costs a job first. ``fail`` before
    ``warn`` before ``watch``, the largest deficit first (None last), then kind, host, peer, GPU
    and metric, so the order is the same whatever order the findings came in."""
    return tuple(part(finding) for part in _COST_PARTS)


def sort_by_cost(items: Iterable[Item], view: Callable[[Item], Mapping[str, Any]] | None = None) -> list[Item]:
    """``items`` in cost_order of ``view(item)`` (a FindingView; without ``view``, each item is a
    finding's JSON object itself), sorted on one part of the key at a time, the least significant
    first (the sort is stable): the same order, without a key tuple for every item held at once (a
    fleet of unreachable hosts is a finding each)."""
    ordered = list(items)
    for part in reversed(_COST_PARTS):
        ordered.sort(key=part if view is None else lambda item: part(view(item)))  # noqa: B023 - this pass
    return ordered


def unchecked(host: str, status: str, error: str | None) -> Finding:
    """The finding for a host that could not be probed: a warning, so the run exits 3, not 1."""
    return Finding(kind=Kind.UNCHECKED, severity=Severity.WARN, host=host,
                   evidence=f"{status}: {error or 'no detail'}", action=Action.INSPECT,
                   action_detail=UNCHECKED_ACTIONS.get(status, "investigate the node"), basis=Basis.HOST_STATUS)
