"""What a pre-flight says about each host it was given, for ``--undrain``: the checks it made on
the host and the host passed, and why the host does not pass the run (gpudiag.slurm.resume's
HostChecks).

A host passes the run when it was probed (status ``ok``) and no ``fail`` finding, nothing
``unchecked`` and no untested pair names it (fleet-wide findings name no one host; findings that
name folded host sets, as "not compared" ones do, name each host of the set). A check passes on
it when the run made it there and it answered: a probe whose records on the host include an ok
one and no error (``facts``: the host's facts were read), ``links`` when a pair test with the host
measured a figure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..analysis.fleet import NOT_EXCLUDING
from ..findings import Finding, Severity
from ..hosts import hosts_named
from ..run.fanout import NOT_CHECKED, SweepResult
from ..run.outcome import HostOutcome
from ..slurm.drain import finding_words
from ..slurm.reason import LINKS_CHECK
from ..slurm.resume import HostChecks


def host_checks(result: SweepResult) -> dict[str, HostChecks]:
    """Each host of ``result`` (by name): the checks it passed in this run, and why it does not
    pass the run (None when it does)."""
    names = [host.host for host in result.hosts]
    blocked = _first_blocking_finding(result.findings, set(names))
    linked = _measured_link_hosts(result.links)
    checks = {}
    for host in result.hosts:
        failed = None if host.ok else f"{host.status}: {host.error or 'no detail'}"
        failed = failed or blocked.get(host.host)
        passed = _passed_probes(host) | ({LINKS_CHECK} if host.host in linked else set())
        checks[host.host] = HostChecks(host.host, frozenset(passed), failed)
    return checks


def _first_blocking_finding(findings: Iterable[Finding], names: set[str]) -> dict[str, str]:
    """For each of ``names`` that a ``fail`` or not-checked finding names (as its host or peer),
    that first finding in a few words."""
    blocked: dict[str, str] = {}
    for finding in findings:
        if finding.kind in NOT_EXCLUDING or not (finding.severity == Severity.FAIL or finding.kind in NOT_CHECKED):
            continue
        words = " ".join(finding_words(finding.to_dict()))
        if finding.kind in NOT_CHECKED:
            words += f": {finding.evidence}"
        for side in (finding.host, finding.peer):
            for name in hosts_named(side, names):
                blocked.setdefault(name, f"{finding.severity} {words}")
    return blocked


def _passed_probes(host: HostOutcome) -> set[str]:
    """The probes whose records on ``host`` include an ok one and no error (facts: read)."""
    if not host.ok:
        return set()
    answered: set[str] = {"facts"} if host.facts else set()
    errored: set[str] = set()
    for record in host.results:
        if record.status == "ok":
            answered.add(record.probe)
        elif record.status == "error":
            errored.add(record.probe)
    return answered - errored


def _measured_link_hosts(links: Iterable[Mapping[str, Any]]) -> set[str]:
    """The hosts of the pair tests that measured a figure."""
    return {str(link[end]) for link in links if link.get("value") is not None for end in ("a", "b") if link.get(end)}
