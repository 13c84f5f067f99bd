"""Running Slurm's client commands (``scontrol``, ``sinfo``) from the controller.

Each command runs in a process group of its own, so one that hangs (a controller that does not
answer, a wrapper script stuck in a sleep) is ended whole at its time limit, children included,
and reported as having been ended.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..transport.groupproc import run_grouped

# Seconds a Slurm client command gets: slurmctld answers in milliseconds, or retries for
# MessageTimeout (10 s by default) when it is down.
COMMAND_TIMEOUT_S = 60.0
# A command is not started with less time than this left before its deadline (seconds): it
# could not even reach slurmctld.
MIN_COMMAND_S = 0.5


class SlurmCommandError(Exception):
    """A Slurm command could not run or failed; the message names it and says why."""


class NoTimeLeft(SlurmCommandError):
    """A Slurm command was not started: its deadline left it too little time."""


@dataclass(frozen=True)
class SlurmOutput:
    """What a Slurm command printed, and its exit status."""

    argv: tuple[str, ...]
    exit_status: int
    stdout: str
    stderr: str

    @property
    def command(self) -> str:
        """The command as a shell would take it."""
        return shlex.join(self.argv)

    def why(self) -> str:
        """Its error output's last line, or its exit status where it printed none."""
        lines = [line for line in (self.stderr + "\n" + self.stdout).strip().splitlines() if line.strip()]
        return lines[-1] if lines else f"exit status {self.exit_status}"


def time_left_s(deadline: float | None, default_s: float = COMMAND_TIMEOUT_S) -> float:
    """Seconds a command may take to end by ``deadline`` (time.monotonic()), at most
    ``default_s``; ``default_s`` when there is no deadline. Raises NoTimeLeft when less than
    MIN_COMMAND_S is left (the command is then not started)."""
    if deadline is None:
        return default_s
    left = deadline - time.monotonic()
    if left < MIN_COMMAND_S:
        raise NoTimeLeft("not run: the --budget had no time left for it")
    return min(default_s, left)


def run_slurm(argv: Sequence[str], timeout_s: float = COMMAND_TIMEOUT_S, check: bool = True,
              env: Mapping[str, str] | None = None) -> SlurmOutput:
    """Run ``argv`` and return what it printed. ``env``: variables set for it on top of this
    process's environment. Raises SlurmCommandError when the program is missing, runs past
    ``timeout_s`` seconds (it is then ended, with its children), or (with ``check``) exits
    non-zero."""
    argv = tuple(argv)
    environment = {**os.environ, **env} if env else None
    try:
        done = run_grouped(argv, timeout_s, environment)  # ended with its children at the limit or an interrupt
    except FileNotFoundError as error:
        raise SlurmCommandError(f"{argv[0]} not found: install Slurm's client commands on this machine "
                                f"(Debian: slurm-client) or put them on PATH") from error
    except OSError as error:
        raise SlurmCommandError(f"{shlex.join(argv)} could not run: {error}") from error
    except subprocess.TimeoutExpired as error:
        raise SlurmCommandError(f"{shlex.join(argv)} did not answer within {timeout_s:.3g} s and was ended "
                                f"(is slurmctld up?)") from error
    output = SlurmOutput(argv, done.returncode, done.stdout, done.stderr)
    if check and done.returncode != 0:
        raise SlurmCommandError(f"{output.command} failed: {output.why()}")
    return output
