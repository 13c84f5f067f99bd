"""The task of a gpudiag ``srun`` step, run on each node by the node's own Python (``python -c``
with this file's text): the standard library only, never imported by gpudiag itself.

``python -c <this> FOLDER TIMEOUT_S GRACE_S MAX_BYTES MAX_LINE_BYTES -- COMMAND...`` runs
COMMAND in FOLDER (the staged probe bundle) and frames everything it prints into short lines on
stdout, because ``srun --label`` cuts any line longer than 1,024 bytes into labelled pieces, and a
probe record can be far longer. Each line is a tag and a piece of at most PIECE bytes:

- ``@NODE``: first, the Slurm node this task runs on (``$SLURMD_NODENAME``; the controller
  checks it against where Slurm placed the task, and never trusts it);
- ``O+``/``E+`` a piece of a stdout/stderr line that goes on; ``O=``/``E=`` its last piece
  (the line ended with a newline); ``O-``/``E-`` the end of output without a newline;
- ``V LINE``/``V BYTES``: COMMAND's stdout passed MAX_LINE_BYTES in one line or MAX_BYTES in
  all (the controller's OutputLimits, counted as it counts them: the piece that passed the cap
  is the last one sent); COMMAND was ended (TERM, then KILL after GRACE_S) and the rest of its
  stdout dropped;
- ``T``: COMMAND ran past TIMEOUT_S and was ended (TERM, then KILL after GRACE_S);
- ``X STATUS``: last, COMMAND's exit status (128 + N when signal N ended it).

Output is read in pieces, so a line that never ends costs the node no more than a piece.
COMMAND's stdin is this task's own: ``/dev/null`` in a step of many nodes, srun's forwarded
stdin in a started one (it reaches EOF when the controller closes it or dies). A folder missing
on the node (the bundle is not on a filesystem the nodes share) is an ``E`` line saying so and
``X 127``. SIGTERM or SIGINT (srun forwards them when it is cancelled) end COMMAND's process
group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO, Any

PIECE = 768
MISSING_FOLDER_STATUS = 127


class OutputCap:
    """COMMAND's stdout counted as the controller's BoundedOutput counts it: at most
    ``max_line_bytes`` in one line, and whole lines (each with its newline) of at most
    ``max_bytes`` in all."""

    def __init__(self, max_bytes: int, max_line_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.max_line_bytes = max_line_bytes
        self.kept = 0
        self.line = 0

    def passed(self, piece: int, ended: bool) -> bytes | None:
        """Count a piece of ``piece`` bytes (``ended``: its line ended after it); the cap it
        passed (``LINE``/``BYTES``), or None."""
        self.line += piece
        if self.line > self.max_line_bytes:
            return b"LINE"
        if ended:
            self.kept += self.line + 1
            self.line = 0
            if self.kept > self.max_bytes:
                return b"BYTES"
        return None


def main(arguments: list[str]) -> int:
    folder, timeout_s, grace_s = arguments[0], float(arguments[1]), float(arguments[2])
    cap = OutputCap(int(arguments[3]), int(arguments[4]))
    command = arguments[arguments.index("--") + 1:]
    lock = threading.Lock()
    out = sys.stdout.buffer

    def emit(tag: bytes, data: bytes) -> None:
        with lock:
            out.write(tag + data + b"\n")
            out.flush()

    emit(b"@", os.environ.get("SLURMD_NODENAME", "").encode())
    try:
        os.chdir(folder)
    except OSError as error:
        node = os.environ.get("SLURMD_NODENAME", "?")
        emit(b"E=", (f"gpudiag: the probe bundle folder {folder} is not on node {node} ({error.strerror}): stage "
                     f"it on a filesystem the nodes share (--slurm-bundle-dir)").encode())
        emit(b"X ", str(MISSING_FOLDER_STATUS).encode())
        return MISSING_FOLDER_STATUS
    # The bundle folder may be shared: no bytecode of ours is left in it, for anyone's umask to open.
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                             env=environment)

    def end(signum: int, frame: Any) -> None:
        _signal_group(child, signal.SIGTERM)

    def over(passed: bytes) -> None:
        emit(b"V ", passed)
        _end_group(child, grace_s)

    signal.signal(signal.SIGTERM, end)
    signal.signal(signal.SIGINT, end)
    readers = [threading.Thread(target=_frame, args=(child.stdout, b"O", emit, cap, over)),
               threading.Thread(target=_frame, args=(child.stderr, b"E", emit))]
    for reader in readers:
        reader.daemon = True
        reader.start()
    try:
        status = child.wait(timeout_s)
    except subprocess.TimeoutExpired:
        _signal_group(child, signal.SIGTERM)
        try:
            child.wait(grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(child, signal.SIGKILL)
        status = child.wait()
        emit(b"T", b"")
    _signal_group(child, signal.SIGKILL)  # what the command left running in its group
    for reader in readers:
        reader.join(5.0)
    status = 128 - status if status < 0 else status
    emit(b"X ", str(status).encode())
    return status


def _frame(stream: IO[bytes], tag: bytes, emit: Callable[[bytes, bytes], None], cap: OutputCap | None = None,
           over: Callable[[bytes], None] | None = None) -> None:
    """Frame ``stream`` piece by piece (at most PIECE bytes read at a time) until EOF; past
    ``cap``, call ``over`` with the cap and drop the rest."""
    going_on = False
    for piece in iter(lambda: stream.readline(PIECE), b""):
        ended = piece.endswith(b"\n")
        body = piece[:-1] if ended else piece
        emit(tag + (b"=" if ended else b"+"), body)
        going_on = not ended
        passed = cap.passed(len(body), ended) if cap is not None else None
        if passed is not None and over is not None:
            over(passed)
            for _ in iter(lambda: stream.read(65536), b""):
                pass  # the rest is dropped; read so the command never blocks on a full pipe before it ends
            return
    if going_on:
        emit(tag + b"-", b"")


def _end_group(child: subprocess.Popen[bytes], grace_s: float) -> None:
    """TERM to the command's group now, KILL after ``grace_s`` (from a timer: the caller goes on)."""
    _signal_group(child, signal.SIGTERM)
    killer = threading.Timer(grace_s, _signal_group, (child, signal.SIGKILL))
    killer.daemon = True
    killer.start()


def _signal_group(child: subprocess.Popen[bytes], signum: int) -> None:
    try:
        os.killpg(child.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
