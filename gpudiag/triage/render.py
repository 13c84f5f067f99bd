"""The triage explanation as plain text for the terminal: a headline, each finding with its next
action and evidence (most severe first), then what was checked, what could not be, notes and the
host's stored history."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

from ..exitcodes import ExitCode
from ..findings import Severity
from ..schema.text import clean_text
from .explain import ExplainedFinding, Triage

WIDTH = 100
# A line of the explanation is cut to this many characters (they are wrapped at WIDTH).
LINE_CHARS = 20_000
INDENT = "     "


def render_text(triage: Triage) -> str:
    """The whole explanation (ends with a newline)."""
    lines = [_headline(triage), ""]
    if triage.explained:
        for number, finding in enumerate(triage.explained, start=1):
            lines += _explained(number, finding)
    elif triage.status == "ok":
        scope = "in what could be checked (see what could not, below)" if triage.not_checked else \
            "in the measurements, the telemetry, the kernel log or the recovery actions (see what was checked below)"
        lines += [f"Nothing found {scope}.", ""]
    lines += _section("Checked", triage.checked)
    lines += _section("Not checked (not a pass)", triage.not_checked or ("nothing: every check ran",))
    lines += _section("Notes", triage.notes)
    lines += _section("History (newest first)", triage.history)
    # Kernel-log lines and stored records are a node's words: no escape sequence reaches the terminal.
    return "\n".join(clean_text(line, LINE_CHARS) for line in lines).rstrip() + "\n"


def _headline(triage: Triage) -> str:
    fails = sum(finding.severity == Severity.FAIL for finding in triage.explained)
    count = len(triage.explained)
    found = "nothing found" if not count else f"{count} problem{'s' if count != 1 else ''} ({fails} to act on)"
    status = "" if triage.status == "ok" else f" · host {triage.status}"
    meaning = {ExitCode.OK: "healthy", ExitCode.FAIL: "act on it", ExitCode.UNCHECKED: "not everything was checked",
               ExitCode.INTERRUPTED: "interrupted"}.get(triage.exit_code, "")
    return f"gpudiag triage {triage.host}: {found}{status} · exit {int(triage.exit_code)} ({meaning})"


def _explained(number: int, finding: ExplainedFinding) -> list[str]:
    lines = [f"{number}. {finding.severity.upper():4}  {finding.title}",
             *_wrapped(f"next: {finding.action} — {finding.next_step}", INDENT),
             *_wrapped(f"how: {finding.detail}", INDENT), f"{INDENT}evidence ({finding.source}):"]
    for item in finding.evidence:
        lines += _wrapped(f"- {item}", INDENT + "  ", INDENT + "    ")
    return [*lines, ""]


def _section(title: str, items: Iterable[str]) -> list[str]:
    items = list(items)
    if not items:
        return []
    lines = [f"{title}:"]
    for item in items:
        lines += _wrapped(f"- {item}", "  ", "    ")
    return [*lines, ""]


def _wrapped(text: str, first: str, rest: str | None = None) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=rest or first,
                         break_long_words=False, break_on_hyphens=False) or [first]
