"""Hosts that claim another host's identity, set aside before anything reads their records.

A host's identity is the controller's: the name it was reached by. What a node says of itself
(its facts' hostname, its GPUs' UUIDs) only ever describes that host. A node whose facts give the
name of another host of the sweep (the same name, or the same short name of a DNS name), or
whose GPU UUIDs another host of the sweep reports too, is an impostor or a cloned image: its
records are set aside (status ``identity_conflict``, no facts, no records: an ``unchecked``
finding, exit 3), and the host it names keeps its own records, untouched in every output. A node
set aside for the name it gives is left out of the UUID comparison: the UUIDs it copied from the
host it poses as cost that host nothing.

Two hosts reporting one GPU UUID cannot both be right. Where the store saw that UUID on one of
them before (``owners``), the others are set aside; where it did not, every one of them is:
which one lies cannot be told, and none of them is passed on a word that may be another's.
PCI bus ids are not compared: every node of a model has GPUs at the same bus ids.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

from ..errors import StoreError
from ..hosts import another_host_named
from ..store.store import Store
from .fanout import SweepResult
from .outcome import HostOutcome

IDENTITY_CONFLICT = "identity_conflict"


def set_aside(hosts: Sequence[HostOutcome], owner_of: Callable[[str], str | None] = lambda uuid: None
              ) -> tuple[list[HostOutcome], dict[str, str]]:
    """``hosts`` with each impostor's outcome replaced (status IDENTITY_CONFLICT, why in its
    error, no facts, no records), and why each was set aside. ``owner_of``: the host the store
    last saw a GPU UUID on (None: never)."""
    why = impostors(hosts, owner_of)
    if not why:
        return list(hosts), {}
    return [HostOutcome(host.host, IDENTITY_CONFLICT, why[host.host], host.duration_s) if host.host in why else host
            for host in hosts], why


def impostors(hosts: Sequence[HostOutcome], owner_of: Callable[[str], str | None] = lambda uuid: None
              ) -> dict[str, str]:
    """Why each host that claims another's identity is set aside (see the module docstring)."""
    labels = {host.host for host in hosts}
    why: dict[str, str] = {}
    for host in hosts:
        other = another_host_named(str(host.facts.get("hostname") or ""), host.host, labels)
        if other is not None:
            why[host.host] = (f"its facts give the hostname {other[0]!r}, the name of {other[1]}, another host of this "
                              "sweep: its records are set aside, and that host keeps its own")
    holders: dict[str, set[str]] = defaultdict(set)
    # A node that names another host already lies about who it is: the UUIDs it copied from that
    # host accuse no one else.
    for host in (host for host in hosts if host.host not in why):
        for uuid in gpu_uuids(host.facts):
            holders[uuid].add(host.host)
    for uuid, claimed in sorted(holders.items()):
        if len(claimed) < 2:
            continue
        owner = owner_of(uuid)
        for host in sorted(claimed - {owner} if owner in claimed else claimed):
            others = sorted(claimed - {host})
            said = (f"; the store last saw it on {owner}" if owner in claimed
                    else "; which of them has it cannot be told, so none is passed on its word")
            verb = "reports" if len(others) == 1 else "report"
            why.setdefault(host, f"it reports GPU {uuid}, which {', '.join(others)} also {verb}{said}")
    return why


def gpu_uuids(facts: Mapping[str, object]) -> set[str]:
    """The GPU UUIDs a host's facts name (``gpu_uuids`` and each of ``gpus``' ``gpu_uuid``)."""
    found = set(_strings(facts.get("gpu_uuids")))
    gpus = facts.get("gpus")
    if isinstance(gpus, list):
        found |= {gpu["gpu_uuid"] for gpu in gpus if isinstance(gpu, Mapping) and isinstance(gpu.get("gpu_uuid"), str)}
    return {uuid for uuid in found if uuid}


def _strings(value: object) -> Iterable[str]:
    return (item for item in value if isinstance(item, str)) if isinstance(value, list) else ()


def set_aside_impostors(first: SweepResult, store: Store | None,
                        record: Callable[[HostOutcome], None]) -> SweepResult:
    """The first pass with each host that claims another's identity set aside, before any phase
    reads its records: recorded again as set aside (``record``), where the store recorded it as
    it finished; the analysis gives it its ``unchecked`` finding, as any host not ``ok``. Nothing
    after this sees its records: no analysis, re-test, pair test (nor a reference peer's part)
    or output."""
    hosts, why = set_aside(first.hosts, _owner_of(store, first.sweep_id))
    if not why:
        return first
    warnings = []
    for host in (host for host in hosts if host.host in why):
        try:
            record(host)  # replaces the row the store wrote as the host finished
        except StoreError as error:
            warnings.append(f"the store could not set {host.host} aside ({error}): its stored row of this sweep "
                            "may still hold what it claimed; the sweep document has it set aside")
    return dataclasses.replace(first, hosts=tuple(hosts), warnings=(*first.warnings, *warnings))


def _owner_of(store: Store | None, sweep_id: str) -> Callable[[str], str | None]:
    """Which host the store last saw a GPU UUID on, in an analysed sweep before this one (None:
    none, no store, or a store that cannot be read: then no claimant is believed)."""
    def owner(uuid: str) -> str | None:
        if store is None:
            return None
        try:
            return store.last_holder(uuid, sweep_id)
        except StoreError:
            return None

    return owner
