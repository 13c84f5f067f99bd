"""The triage explanation as plain text for the terminal: a headline, each finding with its next
action and evidence (most severe first), then what was checked, what could not be, notes and the
host's stored history."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..exitcodes import ExitCode
from ..findings import Severity
from ..schema.text import clean_text
from .explain import ExplainedFinding, Triage

# A line of the explanation is cut to this many characters. Lines are not wrapped here: on a
# terminal gpudiag.cli.textout wraps them to its width, and in a log each item stays one line.
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
    lines += _section("In the fabric", triage.run.fabric)
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
             f"{INDENT}next: {finding.action} — {finding.next_step}"]
    how = _how(finding.detail, str(finding.action))
    if how:
        lines.append(f"{INDENT}how: {how}")
    lines.append(f"{INDENT}evidence ({finding.source}):")
    lines += [f"{INDENT}  - {item}" for item in finding.evidence]
    return [*lines, ""]


def _how(detail: str, action: str) -> str:
    """The action's detail without the clauses that only say the action again (``drain if it
    persists`` under ``next: drain``): the verb is said once, on the line above."""
    verb = action.replace("_", " ")
    clauses = [clause for clause in re.split(r";\s*", detail)
               if clause and not re.match(rf"(then )?{re.escape(verb)}\b", clause.strip(), re.IGNORECASE)]
    return "; ".join(clauses)


def _section(title: str, items: Iterable[str]) -> list[str]:
    items = list(items)
    if not items:
        return []
    return [f"{title}:", *(f"  - {item}" for item in items), ""]
