"""A local command run in a process group of its own, so that ending it ends whatever it started:
``ssh -G`` runs the shell commands of ``Match exec`` lines, and a command that outlives its time
limit must not leave them running."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence

# How long the pipes of an ended command are drained before they are given up.
REAP_S = 2.0


def run_grouped(argv: Sequence[str], timeout_s: float,
                env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (no stdin; stdout and stderr as text; ``env``: its whole environment, None:
    this process's) in a new process group. Raises subprocess.TimeoutExpired once its group is
    ended when it runs past ``timeout_s`` seconds, and OSError where it cannot start. An
    interrupt while it runs ends its group too."""
    process = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        end_group(process)
        raise
    finally:
        if process.poll() is None:
            end_group(process)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def end_group(process: subprocess.Popen[str]) -> None:
    """Kill ``process``'s group (it and whatever it started) and reap it; a child that left the
    group and holds the pipes open does not keep this waiting."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        process.communicate(timeout=REAP_S)
    except subprocess.TimeoutExpired:
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
        process.wait()
