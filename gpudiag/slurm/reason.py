"""The drain reason gpudiag gives Slurm, written and read back, and the safe one-line text that
reasons and hook log lines are made of.

A reason names the checks that drained the node, as Slurm's NHC names its check
(``NHC: check_fs_mount: ...``), then the costliest finding in a few words and its evidence::

    gpudiag: gemm: slow_gpu GPU 3 gemm.tflops -18%: HW thermal slowdown active, SM clock 1410 of 1980 MHz
    gpudiag: links: slow_nic link.tcp -41%: slow with every partner, and 1 more

Each drain command's reason ends with gpudiag's drain marker, ``gpudiag-drain=<time>-<tail>``
(when gpudiag wrote it, UTC, and a random tail: ``gpudiag-drain=20261129T100000Z-3f2a``). Slurm
stamps the reason with who set it and when (``[root@...]``, gpudiag.slurm.nodes); the marker
read against that stamp tells gpudiag's own drain from a reason a person typed (no marker) or
pasted from an older drain (Slurm's stamp then far from the marker's time).

Slurm keeps the reason, so a later run knows which checks must run again and pass before the node
may be resumed (NHC's rule; gpudiag.slurm.resume). A check is a probe's name (``gemm``,
``telemetry``, ...) or ``links`` (the pair tests); ``all`` stands for a finding no one check can
clear, which no run resumes. Reasons from before the checks were named (``gpudiag: slow_gpu GPU 3
gemm.tflops -30%``) are read from their kind and metric where those tell the check.

Node text (NVML and CUDA errors, a host's error output) reaches reasons and summary lines; a
reason may be pasted into a shell or read by a hook. Both are one line of a safe character set:
letters, digits, space and ``. , : = _ + / % @ -``; no shell metacharacter, quote, backslash,
dollar, backtick or control character, bounded in length.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..findings import Basis, Finding, Kind, Severity
from ..records import PROBE_NAMES

REASON_PREFIX = "gpudiag:"
# Long enough for the checks, kind, GPU, metric, deficit and the start of the evidence; Slurm keeps
# reasons whole, but sinfo -R and squeue columns are read by people. The drain marker comes on top.
MAX_REASON_CHARS = 120
# The last word of every reason gpudiag drains with: when it wrote the reason (UTC) and a random tail.
DRAIN_MARKER = "gpudiag-drain="
_MARKER_TIME = "%Y%m%dT%H%M%SZ"
_MARKED = re.compile(r"(.*?) " + re.escape(DRAIN_MARKER) + r"([0-9]{8}T[0-9]{6}Z)-([0-9a-f]{4,16})")
LINKS_CHECK = "links"
# A finding no one check can clear: only a person resumes the node.
ALL_CHECKS = "all"
# Every check a reason can name, in the order a reason names them.
CHECKS = (*PROBE_NAMES, LINKS_CHECK)
# What a run must make again, and pass, to clear a finding whose metric does not name its probe.
KIND_CHECKS: Mapping[str, tuple[str, ...]] = {
    # NVML's throttle reasons and PCIe link width under load come with the GEMM's load
    Kind.THROTTLED: ("telemetry", "gemm"),
    Kind.DEGRADED_PCIE: ("telemetry", "gemm"),
    Kind.NVLINK_DOWN: ("telemetry",),
    Kind.NVLINK_ERRORS: ("telemetry",),
    "pcie_replays": ("telemetry",),
    Kind.ECC: ("telemetry",),
    Kind.NIC_PORT: ("telemetry",),  # the NIC ports' state, rate and counters (sysfs) come with telemetry
    Kind.XID: ("xid",),
    Kind.MISSING_GPU: ("facts", "telemetry"),  # the GPU counts, and NVML's "lost"
    Kind.SLOW_NIC: (LINKS_CHECK,),
    Kind.SLOW_LINK: (LINKS_CHECK,),
    Kind.LINK_ERROR: (LINKS_CHECK,),
}
BASIS_CHECKS = {Basis.TELEMETRY: "telemetry", Basis.FACTS: "facts"}
# Characters kept in node text: no shell metacharacter (| & ; ( ) < >), quote, backslash, $ or
# backtick, no glob or comment character, no control character. Quotes are dropped (``"failed"``
# reads failed), ``;`` becomes ``,``, anything else a space.
_QUOTES = str.maketrans({'"': None, "'": None, "`": None, ";": ","})
_UNSAFE_TEXT = re.compile(r"[^A-Za-z0-9 .,:=_+/%@-]")
# A summary line may also name folded host sets (n[1-4]).
_UNSAFE_LINE = re.compile(r"[^A-Za-z0-9 .,:=_+/%@\[\]-]")
_CHECK_LIST = re.compile(r"gpudiag: ([a-z0-9_]+(?:,[a-z0-9_]+)*): ")
_METRIC = re.compile(r"([a-z0-9_]+)\.[a-z0-9_.]+")


def safe_text(text: object, limit: int | None = None) -> str:
    """``text`` as one line of safe characters (see the module docstring), runs of spaces made one,
    and cut to ``limit`` characters (ending ``...``) where it is longer."""
    line = " ".join(_UNSAFE_TEXT.sub(" ", str(text).translate(_QUOTES)).split())
    return _cut(line, limit)


def safe_line(text: str, limit: int | None = None) -> str:
    """A whole summary line made safe as :func:`safe_text` does, keeping the ``[ ]`` of folded host
    sets."""
    line = " ".join(_UNSAFE_LINE.sub(" ", text.translate(_QUOTES)).split())
    return _cut(line, limit)


def _cut(line: str, limit: int | None) -> str:
    if limit is None or len(line) <= limit:
        return line
    return line[:max(0, limit - 3)].rstrip() + "..."


def finding_words(finding: Mapping[str, Any]) -> list[str]:
    """A finding (its dict) in a few safe words: ``slow_gpu GPU 3 gemm.tflops -18 % below`` (its kind, GPU,
    peer, metric and deficit, those it has): drain reasons and one-line summaries."""
    words = [safe_text(finding.get("kind") or Severity.FAIL)]
    if finding.get("gpu") is not None:
        words.append(f"GPU {safe_text(finding['gpu'])}")
    if finding.get("peer"):
        words.append(f"with {safe_text(finding['peer'])}")
    if finding.get("metric"):
        words.append(safe_text(finding["metric"]))
    if isinstance(finding.get("deficit_pct"), (int, float)):
        words.append(f"-{finding['deficit_pct']:.0f} % below")  # ASCII: Slurm's reason
    return [word for word in words if word]


def finding_checks(finding: Finding | Mapping[str, Any]) -> tuple[str, ...]:
    """The checks that must run again, and pass, before a node drained for ``finding`` may be
    resumed: its metric's probe (``gemm.tflops`` → gemm; ``link.tcp`` → links), what its kind
    rests on (KIND_CHECKS) and its basis (NVML telemetry, the host's facts); ``(all,)`` when none
    of these says."""
    fields = _fields(finding)
    return _checks(str(fields.get("kind") or ""), fields.get("metric"), fields.get("basis"))


def _checks(kind: str, metric: object, basis: object) -> tuple[str, ...]:
    found = set(KIND_CHECKS.get(kind, ()))
    match = _METRIC.fullmatch(str(metric)) if metric else None
    if match is not None:
        probe = match.group(1)
        if probe == "link":
            found.add(LINKS_CHECK)
        elif probe in PROBE_NAMES:
            found.add(probe)
    if isinstance(basis, str) and basis in BASIS_CHECKS:
        found.add(BASIS_CHECKS[basis])
    return ordered_checks(found) or (ALL_CHECKS,)


def ordered_checks(checks: Iterable[str]) -> tuple[str, ...]:
    """``checks`` in the order reasons name them (``all`` alone stands for every one)."""
    names = set(checks)
    if ALL_CHECKS in names:
        return (ALL_CHECKS,)
    return tuple(check for check in CHECKS if check in names)


def drain_reason(findings: Sequence[Finding | Mapping[str, Any]]) -> str:
    """The drain reason for one node's findings (the first, the costliest, is named; the rest
    counted): ``gpudiag: gemm: slow_gpu GPU 3 gemm.tflops -18%: HW thermal slowdown ...``, the
    checks of every finding named. Safe characters only, at most MAX_REASON_CHARS."""
    first = _fields(findings[0])
    checks = ordered_checks(check for finding in findings for check in finding_checks(finding))
    text = f"{REASON_PREFIX} {','.join(checks)}: {' '.join(finding_words(first))}"
    evidence = safe_text(first.get("evidence") or "")
    if evidence:
        text += f": {evidence}"
    more = f", and {len(findings) - 1} more" if len(findings) > 1 else ""
    return _cut(text, MAX_REASON_CHARS - len(more)) + more


def mark_reason(reason: str, now: datetime | None = None, tail: str | None = None) -> str:
    """``reason`` with gpudiag's drain marker after it: ``<reason> gpudiag-drain=20261129T100000Z-3f2a``
    (``now``, default the present, in UTC; ``tail``, default four random hex digits)."""
    when = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return f"{reason} {DRAIN_MARKER}{when:{_MARKER_TIME}}-{tail or secrets.token_hex(2)}"


@dataclass(frozen=True)
class DrainMarker:
    """What a marked reason says: the reason before the marker (``text``) and when gpudiag wrote
    it (``written``, seconds since the epoch)."""

    text: str
    written: float


def read_marker(reason: str | None) -> DrainMarker | None:
    """The drain marker of a reason gpudiag wrote; None for a reason without one (a person's, an
    older gpudiag's) or with one that is not gpudiag's form."""
    found = _MARKED.fullmatch(reason or "")
    if found is None:
        return None
    try:
        written = datetime.strptime(found.group(2), _MARKER_TIME).replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    return DrainMarker(found.group(1), written.timestamp())


def unmarked(reason: str) -> str:
    """``reason`` less its drain marker (the whole reason where it has none)."""
    marker = read_marker(reason)
    return reason if marker is None else marker.text


@dataclass(frozen=True)
class ReasonChecks:
    """What a gpudiag drain reason says: the checks that drained the node (``(all,)``: no one
    check clears it), and whether it was read from a reason older than the named checks."""

    checks: tuple[str, ...]
    legacy: bool = False


def read_reason(reason: str | None) -> ReasonChecks | None:
    """The checks a gpudiag drain reason names; None when the reason is not gpudiag's (no
    ``gpudiag:`` prefix) or gpudiag cannot tell its checks (then no run may resume the node).
    An older reason without checks is read from its kind and metric where they tell."""
    if not reason or not reason.startswith(REASON_PREFIX):
        return None
    reason = unmarked(reason)
    match = _CHECK_LIST.match(reason)
    if match is not None:
        names = match.group(1).split(",")
        if all(name in CHECKS or name == ALL_CHECKS for name in names):
            return ReasonChecks(ordered_checks(names))
        return None
    return _read_legacy(reason[len(REASON_PREFIX):])


def _read_legacy(text: str) -> ReasonChecks | None:
    """``slow_gpu GPU 3 gemm.tflops -30%: evidence`` (the form before checks were named): its
    kind, then a ``probe.metric`` word among the words before the evidence."""
    words = text.split(":", 1)[0].split()
    if not words:
        return None
    kind = words[0]
    metric = next((word for word in words[1:] if _METRIC.fullmatch(word)), None)
    if kind not in KIND_CHECKS and metric is None:
        return None
    checks = _checks(kind, metric, None)
    return None if checks == (ALL_CHECKS,) else ReasonChecks(checks, legacy=True)


def _fields(finding: Finding | Mapping[str, Any]) -> Mapping[str, Any]:
    return finding.to_dict() if isinstance(finding, Finding) else finding
