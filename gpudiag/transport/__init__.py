"""How the controller runs a command on a node: the small Protocol every transport implements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class CommandResult:
    """What one command did: exit status (None when it was killed), output, and wall time (s)."""

    exit_status: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float


class Session(Protocol):
    """A connection to one node, reused for every command a run sends there."""

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        """Run ``argv`` in the node's bundle folder; kill it after ``timeout_s`` seconds."""
        ...
