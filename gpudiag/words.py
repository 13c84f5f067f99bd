"""How gpudiag writes figures and counts, the same in every finding, report, table and line of
evidence: a figure with its unit (``612.0 TFLOP/s``), a deficit (``−17.5 % below``), a share
(``93.1 % of line rate``), a count with its noun (``3 hosts``).

A deficit is how far a figure falls below its reference, in percent of the reference; a share is
a figure as a percentage of another (the line rate, the reference). The two are never written
alike: a deficit always says "below" (or "above"), a share always says "of" what.
"""

from __future__ import annotations

MINUS = "\u2212"
# units a figure is written without: a count is its number
UNSHOWN_UNITS = ("count", "bool")


def plural(count: int, noun: str) -> str:
    """``1 pair``, ``2 pairs``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def fixed(value: float) -> str:
    """One decimal from 10 up, three significant digits below (``392.0``, ``0.0482``): columns
    line up, and a test network or a port trained far down still reads."""
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def number(value: object) -> str:
    """A count as it is, a measurement as ``fixed`` writes it, anything else as text."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return str(value) if isinstance(value, int) else fixed(value)


def figure(value: object, unit: object) -> str:
    """A number with its unit: ``612.0 TFLOP/s``, ``9.41 Gbit/s``, ``7`` (a count)."""
    text = number(value)
    return f"{text} {unit}" if unit and unit not in UNSHOWN_UNITS else text


def pct(value: float) -> str:
    """``17.5 %``."""
    return f"{float(value):.1f} %"


def deficit_text(deficit_pct: float) -> str:
    """A deficit: ``−17.5 % below`` (a negative deficit: ``+3.0 % above``)."""
    value = float(deficit_pct)
    return f"{MINUS}{pct(value)} below" if value >= 0 else f"+{pct(-value)} above"


def share_text(share_pct: float, of: str) -> str:
    """A share: ``93.1 % of line rate``."""
    return f"{pct(share_pct)} of {of}"
