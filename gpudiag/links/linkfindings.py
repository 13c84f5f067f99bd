"""Link suspects as findings (the sweep document's ``findings[]``): ``slow_nic`` names the host,
``slow_link`` and ``link_error`` both ends (``host`` and ``peer``), a line-rate shift the
hosts of its group. A pair that could not be tested is never a pass: ``link_error`` is a
warning, so the sweep exits 3 at least. A slow NIC or pair the re-tests could not confirm is an
``unchecked`` naming it (the NIC's host, or both ends), never a warning that exits 0. A NIC or
pair the re-tests cleared (measured again, and not slow again) is a ``watch``: said, never a
warning, as a GPU's suspect whose re-test did not repeat is dropped.

``touched_links`` reads findings back (from a stored sweep) to tell which pair figures a link
finding touched: those stay out of a baseline."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..analysis.actions import Cause, action
from ..findings import Action, Basis, Finding, Kind, Severity
from ..hosts import fold_hosts
from ..words import deficit_text, fixed, plural
from .attribution import HostLinkError, LinkAttribution, LinkError, LinkShift, LinkSuspect, NicSuspect
from .groups import LINE_RATE, GroupReference
from .schedule import Pair, pair_key
from .unreached import UnreachedRate

UNIT = "Gbit/s"
# Findings about one host's NIC, and about one pair (both ends named).
NIC_KINDS = frozenset({Kind.SLOW_NIC})
PAIR_KINDS = frozenset({Kind.SLOW_LINK, Kind.LINK_ERROR})
# _metric's form: link.<backend> (no rail, or several rails folded) or link.<backend>.rail<N>.
_METRIC = re.compile(r"link\.([a-z]+)(?:\.rail(\d+))?")


def link_findings(attribution: LinkAttribution, fail_deficit_pct: float) -> list[Finding]:
    """One finding per suspect, the rails of one NIC or pair folded into one: a confirmed
    deficit of ``fail_deficit_pct`` percent or more is a ``fail``; a smaller one a ``warn``; an
    unconfirmed one an ``unchecked`` (``_unconfirmed``). A slow pair whose end was tested with
    that partner only (``undecided``: its NIC may be the cause as well as the link) is still a
    ``slow_link`` finding, its evidence saying so: with two nodes, or no partner left to re-pair
    with, it is all there is to tell."""
    findings = [_nic(v, fail_deficit_pct) if v.confirmed or v.cleared else _unconfirmed(v) for v in attribution.nics]
    findings += [_link(v, fail_deficit_pct) if v.confirmed or _not_slow_again(v) else _unconfirmed(v)
                 for v in attribution.links]
    alone = {error.host for error in attribution.host_errors}
    findings += [_host_error(e) for e in attribution.host_errors]
    findings += [_error(e) for e in attribution.errors if not alone & {e.a, e.b}]
    findings += [_shift(s, fail_deficit_pct) for s in attribution.shifts]
    findings += [_not_compared(r) for r in attribution.references if not r.level_checked and r.pairs]
    findings = _never_every_host(_fold_rails(findings), attribution)
    named = {(f.host, _where(f.metric)[0]) for f in findings if f.kind in (Kind.SLOW_NIC, Kind.UNCHECKED)
             and f.severity != Severity.WATCH and f.peer is None}
    return findings + [_unreached(u) for u in attribution.unreached if (u.host, u.backend) not in named]


def _unreached(unreached: UnreachedRate) -> Finding:
    """An ``unchecked`` warning for a host no pair reached the own line rate of: measured at its
    partners' lower rate, its NIC could be slow at its own and pass."""
    rate, ran = f"{unreached.line_rate_gbps:g}", f"{unreached.reached_gbps:g}"
    why = (f"the pairs with {fold_hosts(unreached.peers)} at that rate could not be measured" if unreached.peers
           else f"no other host of the run reports {rate} {UNIT}")
    evidence = (f"{unreached.host}'s {unreached.backend} ports report {rate} {UNIT} a rail, and every pair it was "
                f"measured in ran at {ran} {UNIT}, its partners' rate ({why}): its NIC's own rate was not "
                f"measured (a pair with another host at {rate} {UNIT} measures it), not compared, not passed")
    verb, detail = action(Cause.UNCHECKED, Severity.WARN)
    return Finding(kind=Kind.UNCHECKED, severity=Severity.WARN, host=unreached.host,
                   metric=_metric(unreached.backend, None), basis=Basis.COMPARISON, evidence=evidence,
                   action=verb, action_detail=detail)


def _never_every_host(findings: list[Finding], attribution: LinkAttribution) -> list[Finding]:
    """Suspects that would keep every host of a group out of the job (each an unconfirmed NIC or
    pair, or an end of a slow pair) as one warning about the group's network instead: which of
    its NICs, or whether the fabric, cannot be told, and a job kept off every node is no answer.
    Not a pass: the sweep exits 3."""
    for backend in sorted({reference.group.backend for reference in attribution.references}):
        groups = [r for r in attribution.references if r.group.backend == backend]
        members = {host for reference in groups for host in reference.members}
        suspects = [f for f in findings if f.kind in (Kind.UNCHECKED, Kind.SLOW_LINK) and f.basis != Basis.COMPARISON
                    and f.severity != Severity.WATCH and _where(f.metric)[0] == backend and {f.host, f.peer} & members]
        named = {end for f in suspects for end in (f.host, f.peer) if end is not None}
        if len(members) < 2 or not members <= named or any(f.kind == Kind.SLOW_NIC and f.severity != Severity.WATCH
                                                           for f in findings):
            continue
        findings = [f for f in findings if f not in suspects] + [_network_unsettled(backend, members, suspects)]
    return findings


def _network_unsettled(backend: str, members: set[str], suspects: Sequence[Finding]) -> Finding:
    verb, detail = action(Cause.SLOW_NETWORK, Severity.WARN)
    worst = max(suspects, key=lambda f: f.deficit_pct or 0.0)
    evidence = (f"every host of the {backend} pair tests ({fold_hosts(sorted(members))}) is suspected slow: "
                f"{'; '.join(sorted({f.evidence for f in suspects})[:3])}; which of their NICs, or whether the "
                "fabric, cannot be told from these pairs — not a pass, and no host is kept out for it")
    return Finding(kind=Kind.SLOW_NETWORK, severity=Severity.WARN, host=None, metric=_metric(backend, None),
                   value=worst.value, reference=worst.reference, unit=UNIT, reference_source=worst.reference_source,
                   deficit_pct=worst.deficit_pct, confirmed=False, basis=Basis.SINGLE_RUN, evidence=evidence,
                   action=verb, action_detail=detail)


def _fold_rails(findings: list[Finding]) -> list[Finding]:
    """The findings about one NIC (host) or one pair (host, peer) on several rails as one: the
    worst rail's figures, ``fail`` if any rail fails, and the rails named. A suspect some rails
    confirmed and others did not is the confirmed finding (the rest named as not yet confirmed);
    one no rail confirmed stays ``unchecked``. A slow pair one of whose ends is a slow NIC on
    other rails of the same backend is folded into that NIC: a NIC a little slow measured with
    noise reads as a slow pair now and then (its rails are named, so its port is checked too)."""
    nic_hosts = {(f.host, _where(f.metric)[0]) for f in findings if f.kind == Kind.SLOW_NIC and f.confirmed}
    groups: dict[tuple[Kind, str, str | None], list[Finding]] = {}
    for finding in findings:
        kind, host, peer = _folded_kind(finding), finding.host, finding.peer
        if kind == Kind.SLOW_LINK and peer is not None:
            end = next((e for e in (host, peer) if (e, _where(finding.metric)[0]) in nic_hosts), None)
            if end is not None:
                kind, host, peer = Kind.SLOW_NIC, end, None
        groups.setdefault((kind, host, peer), []).append(finding)
    folded = []
    for (kind, host, peer), group in groups.items():
        if len(group) == 1 and (group[0].host, group[0].peer) == (host, peer):
            folded.append(group[0])
            continue
        folded.append(_folded(kind, host, peer, group))
    return folded


def _folded_kind(finding: Finding) -> Kind:
    """``slow_nic``/``slow_link`` for a confirmed suspect or one not confirmed (an ``unchecked`` on a
    link metric), else the finding's own kind."""
    if finding.kind == Kind.UNCHECKED and (finding.metric or "").startswith("link.") and finding.value is not None:
        return Kind.SLOW_LINK if finding.peer else Kind.SLOW_NIC
    return finding.kind


def _rail(finding: Finding) -> str:
    rail = _where(finding.metric)[1]
    return "-" if rail is None else str(rail)


def _rails_words(group: Sequence[Finding]) -> str:
    """``3 rails (0, 4, 6)``; a finding of no rail in a railed backend is its rails together
    (gpudiag.links.acrossrails): ``all its rails together and rail 6``."""
    railed = [_rail(f) for f in group if _where(f.metric)[1] is not None]
    words = f"{plural(len(railed), 'rail')} ({', '.join(railed)})" if len(railed) > 1 else \
        f"rail {railed[0]}" if railed else ""
    if len(railed) == len(group):
        return words
    return "all its rails together" + (f" and {words}" if words else "")


def _folded(kind: Kind, host: str, peer: str | None, group: list[Finding]) -> Finding:
    confirmed = [f for f in group if f.kind == kind and f.confirmed]
    # a rail left unchecked is never hidden under one the re-tests cleared (a watch)
    basis = confirmed or [f for f in group if f.severity != Severity.WATCH] or group
    worst = max(basis, key=lambda f: (f.deficit_pct or 0.0, f.metric or ""))
    evidence = f"on {_rails_words(group)}; worst: {worst.evidence}"
    if not confirmed:
        return dataclasses.replace(worst, host=host, peer=peer, confirmed=False,
                                   metric=(worst.metric or "").rsplit(".rail", 1)[0], evidence=evidence)
    others = [f for f in group if f not in confirmed]
    if others:
        evidence += "; also: " + "; ".join(
            f"{_rails_words([f])} {f.host}{' ↔ ' + f.peer if f.peer else ''} {deficit_text(f.deficit_pct or 0.0)}"
            f"{'' if f.confirmed else ' (not yet confirmed)'}" for f in others)
    severity = Severity.FAIL if any(f.severity == Severity.FAIL for f in confirmed) else Severity.WARN
    return dataclasses.replace(worst, kind=kind, severity=severity, host=host, peer=peer, confirmed=True,
                               metric=(worst.metric or "").rsplit(".rail", 1)[0], evidence=evidence)


def _severity(confirmed: bool, deficit_pct: float, fail_deficit_pct: float, cleared: bool = False) -> Severity:
    """``fail`` for a confirmed deficit of ``fail_deficit_pct`` or more, ``watch`` for a suspect the
    re-tests cleared, else ``warn``."""
    if cleared:
        return Severity.WATCH
    return Severity.FAIL if confirmed and deficit_pct >= fail_deficit_pct else Severity.WARN


def _action(cause: Cause, severity: Severity) -> tuple[Action, str]:
    """The finding's action; a ``watch`` (a suspect the re-tests cleared) is watched, never acted on."""
    if severity == Severity.WATCH:
        return Action.WATCH, "measured slow, and not slow again when re-tested: re-check at the next sweep"
    return action(cause, severity)


def _metric(backend: str, rail: int | None) -> str:
    return f"link.{backend}" if rail is None else f"link.{backend}.rail{rail}"


def _nic(suspect: NicSuspect, fail_deficit_pct: float) -> Finding:
    """A slow NIC: confirmed (a fail at ``fail_deficit_pct`` or more, else a warning), or cleared by
    its further partners (a ``watch`` resting on the re-test)."""
    severity = _severity(suspect.confirmed, suspect.deficit_pct, fail_deficit_pct, suspect.cleared)
    verb, detail = _action(Cause.SLOW_NIC, severity)
    return Finding(kind=Kind.SLOW_NIC, severity=severity, host=suspect.host,
                   metric=_metric(suspect.backend, suspect.rail), value=round(suspect.gbps, 3),
                   reference=round(suspect.reference_gbps, 3), unit=UNIT,
                   reference_source=suspect.reference_source, deficit_pct=round(suspect.deficit_pct, 2),
                   robust_z=None if suspect.robust_z is None else round(suspect.robust_z, 2),
                   confirmed=suspect.confirmed,
                   basis=Basis.RETEST if suspect.confirmed or suspect.cleared else Basis.SINGLE_RUN,
                   evidence=suspect.evidence, action=verb, action_detail=detail)


def _link(suspect: LinkSuspect, fail_deficit_pct: float) -> Finding:
    """A slow pair: confirmed (a fail at ``fail_deficit_pct`` or more, else a warning), or re-tested
    and not slow again (``_not_slow_again``: a ``watch`` resting on the re-test)."""
    severity = _severity(suspect.confirmed, suspect.deficit_pct, fail_deficit_pct, _not_slow_again(suspect))
    verb, detail = _action(Cause.SLOW_NETWORK_LINK, severity)
    return Finding(kind=Kind.SLOW_LINK, severity=severity, host=suspect.a, peer=suspect.b,
                   metric=_metric(suspect.backend, suspect.rail), value=round(suspect.gbps, 3),
                   reference=round(suspect.reference_gbps, 3), unit=UNIT, reference_source=suspect.reference_source,
                   deficit_pct=round(suspect.deficit_pct, 2),
                   robust_z=None if suspect.robust_z is None else round(suspect.robust_z, 2),
                   confirmed=suspect.confirmed,
                   basis=Basis.RETEST if suspect.confirmed or _not_slow_again(suspect) else Basis.SINGLE_RUN,
                   evidence=suspect.evidence, action=verb, action_detail=detail)


def _not_slow_again(suspect: LinkSuspect) -> bool:
    """A slow pair whose ends are both fine with other partners, run again and not slow again: a
    dip of one run (a busy node, a burst on the fabric), which the re-test measured and did not
    repeat. Its finding is an unconfirmed ``slow_link`` at ``watch``: said, never a warning nor a
    fail, and no reason to keep either host out of a job (a GPU's suspect whose re-test did not
    repeat is dropped). A healthy 48-node fleet at 4 % link noise had such a warning in one
    sweep in twenty."""
    return not suspect.confirmed and not suspect.undecided and len(suspect.runs_gbps) >= 2


def _unconfirmed(suspect: NicSuspect | LinkSuspect) -> Finding:
    """An ``unchecked`` warning naming a slow NIC (its host) or a slow pair (both ends) that the
    re-tests could not confirm: too few known-good partners (a small job, hosts slow only with
    each other), or runs that did not all repeat the deficit. Measured slow once is no verdict,
    and never a pass."""
    is_nic = isinstance(suspect, NicSuspect)
    host, peer = (suspect.host, None) if isinstance(suspect, NicSuspect) else (suspect.a, suspect.b)
    verb, detail = action(Cause.UNCHECKED, Severity.WARN)
    return Finding(kind=Kind.UNCHECKED, severity=Severity.WARN, host=host, peer=peer,
                   metric=_metric(suspect.backend, suspect.rail), value=round(suspect.gbps, 3),
                   reference=round(suspect.reference_gbps, 3), unit=UNIT, reference_source=suspect.reference_source,
                   deficit_pct=round(suspect.deficit_pct, 2),
                   robust_z=None if suspect.robust_z is None else round(suspect.robust_z, 2), confirmed=False,
                   basis=Basis.SINGLE_RUN,
                   evidence=f"{Kind.SLOW_NIC if is_nic else Kind.SLOW_LINK} suspected, not confirmed, not passed: "
                            f"{suspect.evidence}",
                   action=verb, action_detail=detail)


def _error(error: LinkError) -> Finding:
    verb, detail = action(Cause.LINK_ERROR, Severity.WARN)
    return Finding(kind=Kind.LINK_ERROR, severity=Severity.WARN, host=error.a, peer=error.b,
                   metric=_metric(error.backend, error.rail), basis=Basis.ERROR_RECORD, evidence=error.evidence,
                   action=verb, action_detail=detail)


def _host_error(error: HostLinkError) -> Finding:
    verb, detail = action(Cause.HOST_LINK_ERROR, Severity.WARN)
    return Finding(kind=Kind.LINK_ERROR, severity=Severity.WARN, host=error.host, basis=Basis.ERROR_RECORD,
                   evidence=error.evidence, action=verb, action_detail=detail)


def _not_compared(reference: GroupReference) -> Finding:
    """An ``unchecked`` warning for a group whose figures had nothing to be compared with: too few
    hosts for a fleet level, no stored baseline, and no line rate its backend reaches. Measured is
    not passed."""
    group = reference.group
    line = ("no line rate known" if group.line_rate_gbps is None
            else f"a line rate of {group.line_rate_gbps:g} {UNIT} that {group.backend} does not reach")
    evidence = (f"{group.describe()}: {reference.pairs} pair{'s' if reference.pairs != 1 else ''} between "
                f"{plural(reference.hosts, 'host')} measured, too few hosts to compare with the fleet, with no stored "
                f"baseline and {line}: not compared, not passed")
    if reference.job_level:
        evidence += (f" (compared among themselves, at {fixed(reference.level_gbps)} {UNIT}: a part slower than "
                     "the others is found, a cause they all share is not)")
    verb, detail = action(Cause.UNCHECKED, Severity.WARN)
    return Finding(kind=Kind.UNCHECKED, severity=Severity.WARN, host=fold_hosts(reference.members),
                   metric=_metric(group.backend, group.rail), basis=Basis.COMPARISON, evidence=evidence,
                   action=verb, action_detail=detail)


def _shift(shift: LinkShift, fail_deficit_pct: float) -> Finding:
    """A group below its line rate is its network as a whole (``slow_network``: the fabric or
    every one of its NICs, in a job of any size), a finding of no host; one below its stored
    baseline a ``fleet_shift`` of the fabric."""
    reference = shift.reference_gbps  # the line rate, or the baseline's median
    deficit = 100 * (reference - shift.fleet_gbps) / reference
    severity = _severity(shift.confirmed, deficit, fail_deficit_pct)
    kind, cause = (Kind.SLOW_NETWORK, Cause.SLOW_NETWORK) if shift.source == LINE_RATE else \
        (Kind.FLEET_SHIFT, Cause.FLEET_SHIFT)
    verb, detail = action(cause, severity)
    return Finding(kind=kind, severity=severity, host=None if kind == Kind.SLOW_NETWORK else f"{shift.backend} fabric",
                   metric=_metric(shift.backend, shift.rail), value=round(shift.fleet_gbps, 3),
                   reference=round(reference, 3), unit=UNIT, reference_source=shift.source,
                   deficit_pct=round(deficit, 2), share_pct=round(100 * shift.pairs_below / max(1, shift.pairs), 1),
                   confirmed=shift.confirmed, basis=Basis.RETEST if shift.confirmed else Basis.SINGLE_RUN,
                   evidence=shift.evidence, action=verb, action_detail=detail)


# (backend, rail): None for either is every backend or every rail (a finding folded over rails,
# or one whose metric does not say).
_Where = tuple[str | None, int | None]


@dataclass(frozen=True)
class TouchedLinks:
    """The NICs (host, backend, rail) and pairs (pair, backend, rail) that link findings named."""

    nics: frozenset[tuple[str, str | None, int | None]] = frozenset()
    pairs: frozenset[tuple[Pair, str | None, int | None]] = frozenset()

    def touches(self, a: str, b: str, backend: str, rail: int | None) -> bool:
        """Whether a finding named this pair, or either end's NIC, on this backend and rail."""
        pair = pair_key(a, b)
        for where in {(backend, rail), (backend, None), (None, None)}:
            if (pair, *where) in self.pairs or (a, *where) in self.nics or (b, *where) in self.nics:
                return True
        return False


def touched_links(findings: Iterable[Mapping[str, Any]]) -> TouchedLinks:
    """What a sweep's findings (``findings[]`` items) say about its links: every ``slow_nic``
    host and every ``slow_link`` or ``link_error`` pair (and the NICs and pairs of link
    ``unchecked`` findings: suspects not confirmed), on the backend and rail of the
    finding's metric (a finding folded over several rails names the backend only: every rail).
    Other findings — a ``fleet_shift`` included, which names no NIC or pair — touch nothing."""
    nics: set[tuple[str, str | None, int | None]] = set()
    pairs: set[tuple[Pair, str | None, int | None]] = set()
    for finding in findings:
        kind, host, peer = finding.get("kind"), finding.get("host"), finding.get("peer")
        if kind == Kind.UNCHECKED and str(finding.get("metric") or "").startswith("link."):
            kind = Kind.LINK_ERROR if peer else Kind.SLOW_NIC  # a suspect not confirmed stays out as the finding would
        if kind in NIC_KINDS and host:
            nics.add((str(host), *_where(finding.get("metric"))))
        elif kind in PAIR_KINDS and host and peer and host != peer:
            pairs.add((pair_key(str(host), str(peer)), *_where(finding.get("metric"))))
    return TouchedLinks(frozenset(nics), frozenset(pairs))


def _where(metric: object) -> _Where:
    match = _METRIC.fullmatch(metric) if isinstance(metric, str) else None
    if match is None:
        return (None, None)
    return (match.group(1), None if match.group(2) is None else int(match.group(2)))
