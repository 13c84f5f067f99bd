"""The process exit codes of gpudiag, and the one place that decides which applies.

| code | meaning |
| ---- | ------- |
| 0    | every host checked, nothing at ``fail`` |
| 1    | at least one ``fail`` finding |
| 2    | usage or input error (bad hosts file, bad option, unreadable baseline) |
| 3    | no ``fail`` finding, but some hosts, GPUs or measurements could not be checked or compared |
| 4    | gpudiag itself failed (an unexpected error): inconclusive, never "this node failed" |
| 130  | interrupted (partial results were still saved) |
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAIL = 1
    USAGE = 2
    UNCHECKED = 3
    INTERNAL = 4
    INTERRUPTED = 130


def decide_exit_code(*, has_fail: bool, has_unchecked: bool, interrupted: bool = False) -> ExitCode:
    """The exit code for a finished run: interruption first, then fail findings, then gaps."""
    if interrupted:
        return ExitCode.INTERRUPTED
    if has_fail:
        return ExitCode.FAIL
    if has_unchecked:
        return ExitCode.UNCHECKED
    return ExitCode.OK
