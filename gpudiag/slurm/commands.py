"""Running Slurm's client commands (``scontrol``, ``sinfo``) from the controller."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

# Seconds a Slurm client command gets: slurmctld answers in milliseconds, or retries for
# MessageTimeout (10 s by default) when it is down.
COMMAND_TIMEOUT_S = 60.0


class SlurmCommandError(Exception):
    """A Slurm command could not run or failed; the message names it and says why."""


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


def run_slurm(argv: Sequence[str], timeout_s: float = COMMAND_TIMEOUT_S, check: bool = True) -> SlurmOutput:
    """Run ``argv`` and return what it printed. Raises SlurmCommandError when the program is
    missing, runs past ``timeout_s`` seconds, or (with ``check``) exits non-zero."""
    argv = tuple(argv)
    try:
        done = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except FileNotFoundError as error:
        raise SlurmCommandError(f"{argv[0]} not found: install Slurm's client commands on this machine "
                                f"(Debian: slurm-client) or put them on PATH") from error
    except subprocess.TimeoutExpired as error:
        raise SlurmCommandError(f"{shlex.join(argv)} did not answer within {timeout_s:g} s "
                                f"(is slurmctld up?)") from error
    except OSError as error:
        raise SlurmCommandError(f"{shlex.join(argv)} could not run: {error}") from error
    output = SlurmOutput(argv, done.returncode, done.stdout, done.stderr)
    if check and done.returncode != 0:
        raise SlurmCommandError(f"{output.command} failed: {output.why()}")
    return output
