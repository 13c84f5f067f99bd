"""The errors gpudiag reports to its user, each tied to the exit code it ends the run with.

The CLI's one handler prints the message as one line on stderr and exits with ``exit_code``;
everything below it raises these and never calls ``sys.exit`` itself.
"""

from __future__ import annotations

import json
from typing import Any

from .exitcodes import ExitCode


class GpudiagError(Exception):
    """An error the user can act on; the message says what and how to fix it."""

    exit_code: ExitCode = ExitCode.USAGE


class InputError(GpudiagError):
    """Bad input: an option, a file or a line in it. Nothing was run and nothing was stored."""

    exit_code = ExitCode.USAGE

    @classmethod
    def at_line(cls, path: str, line_number: int, problem: str, fix: str) -> InputError:
        """An error naming the file and line, the problem, and the fix, as one line."""
        return cls(f"{path}:{line_number}: {problem}; {fix}")


def read_json_file(path: str, what: str) -> Any:
    """The parsed JSON of ``path``. Raises InputError naming the file (and the line and column of
    a syntax error); ``what`` says what the file should be, e.g. "the thresholds file"."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise InputError(f"{path}: cannot read {what}: {reason}") from error
    except json.JSONDecodeError as error:
        raise InputError(f"{path}:{error.lineno}:{error.colno}: not valid JSON: {error.msg}") from error


class ProbeOutputError(GpudiagError):
    """The probe bundle printed something that is not a record; the node could not be checked."""

    exit_code = ExitCode.UNCHECKED


class InstallationError(GpudiagError):
    """gpudiag itself is incomplete (e.g. the probe bundle is missing)."""

    exit_code = ExitCode.USAGE


class OutputError(GpudiagError):
    """A result could not be written where the user asked (the path is in the message)."""

    exit_code = ExitCode.USAGE


class StoreError(GpudiagError):
    """The local store (an SQLite file) cannot be opened, read or written as asked. The message
    names the file and the fix; the file itself is left exactly as it was."""

    exit_code = ExitCode.USAGE
