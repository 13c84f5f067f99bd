"""Run a controller (``python -m gpudiag ...``) in a child process under an address-space limit, and
measure its peak memory: a regression that lets a node's output grow the controller fails the test
(the child's allocations fail) instead of taking the machine down.

Tests import it from this folder; benchmarks after putting the folder on ``sys.path`` (as for
``sshd_hosts.py``).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

GIB = 1 << 30
DEFAULT_ADDRESS_SPACE = 3 * GIB
# ``python -c TRACED PEAK_FILE ARGS...`` runs ``gpudiag ARGS...`` with tracemalloc on and writes, as it
# exits, the peak of the memory Python allocated (bytes) to PEAK_FILE: unlike the resident peak, it does
# not move with how the allocator's arenas fragment on a busy machine.
TRACED = """\
import sys, tracemalloc
peak_file = sys.argv.pop(1)
sys.argv[0] = "gpudiag"
tracemalloc.start()
try:
    from gpudiag.cli.main import main
    main()
finally:
    with open(peak_file, "w") as out:
        out.write(str(tracemalloc.get_traced_memory()[1]))
"""


@dataclass(frozen=True)
class LimitedRun:
    """How the child ended: exit status (negative: the signal that ended it), its output, its peak
    resident memory (KiB: its VmHWM, read while it ran; the kernel's ru_maxrss where none was read)
    and the wall time (s)."""

    returncode: int
    stdout: str
    stderr: str
    peak_rss_kib: int
    wall_s: float


def run_limited(argv: Sequence[str], *, address_space_bytes: int = DEFAULT_ADDRESS_SPACE, timeout_s: float = 300.0,
                cwd: str | Path | None = None) -> LimitedRun:
    """Run ``argv`` with RLIMIT_AS at ``address_space_bytes`` (set in the child before exec); kill it
    (and its process group) past ``timeout_s``. Returns the LimitedRun, the timed-out one too."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (address_space_bytes, address_space_bytes))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        process = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=cwd,
                                   preexec_fn=limit, start_new_session=True)
        status, usage, peak_kib = _wait(process.pid, started + timeout_s, [str(word) for word in argv])
        wall_s = time.monotonic() - started
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        out.seek(0)
        err.seek(0)
        return LimitedRun(process.returncode, out.read().decode(errors="replace"),
                          err.read().decode(errors="replace"), peak_kib or usage.ru_maxrss, wall_s)


def _wait(pid: int, deadline: float, argv: list[str]) -> tuple[int, resource.struct_rusage, int]:
    """(wait status, resource usage, peak resident KiB) of ``pid`` once it ended; killed with its group
    at ``deadline``. The peak is the largest VmHWM read while it ran ``argv`` (every 20 ms): the
    kernel's ru_maxrss also counts the forking parent's resident memory from before the exec (a
    pytest worker's, a benchmark's), which is not the controller's; 0 when none was read."""
    peak_kib = 0
    while True:
        peak_kib = max(peak_kib, _hwm_kib(pid, argv))
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done == pid:
            return status, usage, peak_kib
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, status, usage = os.wait4(pid, 0)
            return status, usage, peak_kib
        time.sleep(0.02)


def _hwm_kib(pid: int, argv: list[str]) -> int:
    """VmHWM of ``pid`` once it runs ``argv`` (not the parent's copy it was forked as); 0 before."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            if cmdline.read().split(b"\0")[:len(argv)] != [word.encode() for word in argv]:
                return 0
        with open(f"/proc/{pid}/status") as status:
            return next((int(line.split()[1]) for line in status if line.startswith("VmHWM:")), 0)
    except (OSError, ValueError):
        return 0
