"""Times in the sweep document and the store: ISO 8601 in UTC to the second
(``2026-11-21T10:15:41Z``), written and read back in one way."""

from __future__ import annotations

from datetime import datetime, timezone

ISO_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def iso_time(moment: datetime) -> str:
    """``moment`` (an aware datetime) in UTC, to the second: ``2026-11-21T10:15:41Z``."""
    return moment.astimezone(timezone.utc).strftime(ISO_FORMAT)


def now_iso() -> str:
    """This moment as :func:`iso_time` writes it."""
    return iso_time(datetime.now(timezone.utc))


def parse_time(text: object) -> datetime | None:
    """An ISO 8601 time as an aware datetime (no offset: UTC), or None when it is not one."""
    if not isinstance(text, str):
        return None
    try:
        parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)
