"""The task of a gpudiag ``srun`` step, run on each node by the node's own Python (``python -c``
with this file's text): the standard library only, never imported by gpudiag itself.

``python -c <this> FOLDER TIMEOUT_S GRACE_S -- COMMAND...`` runs COMMAND in FOLDER (the staged
probe bundle) and frames everything it prints into short lines on stdout, because ``srun
--label`` cuts any line longer than 1,024 bytes into labelled pieces, and a probe record can be
far longer. Each line is a tag and a piece of at most PIECE bytes:

- ``@NODE``: first, the Slurm node this task runs on (``$SLURMD_NODENAME``);
- ``O+``/``E+`` a piece of a stdout/stderr line that goes on; ``O=``/``E=`` its last piece
  (the line ended with a newline); ``O-``/``E-`` the last piece of output without a newline;
- ``T``: COMMAND ran past TIMEOUT_S and was ended (TERM, then KILL after GRACE_S);
- ``X STATUS``: last, COMMAND's exit status (128 + N when signal N ended it).

A folder missing on the node (the bundle is not on a filesystem the nodes share) is an ``E``
line saying so and ``X 127``. SIGTERM or SIGINT (srun forwards them when it is cancelled) end
COMMAND's process group.
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


def main(arguments: list[str]) -> int:
    folder, timeout_s, grace_s = arguments[0], float(arguments[1]), float(arguments[2])
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
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)

    def end(signum: int, frame: Any) -> None:
        _signal_group(child, signal.SIGTERM)

    signal.signal(signal.SIGTERM, end)
    signal.signal(signal.SIGINT, end)
    readers = [threading.Thread(target=_frame, args=(child.stdout, b"O", emit)),
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


def _frame(stream: IO[bytes], tag: bytes, emit: Callable[[bytes, bytes], None]) -> None:
    for line in iter(stream.readline, b""):
        ended = line.endswith(b"\n")
        body = line[:-1] if ended else line
        pieces = [body[start:start + PIECE] for start in range(0, len(body), PIECE)] or [b""]
        for piece in pieces[:-1]:
            emit(tag + b"+", piece)
        emit(tag + (b"=" if ended else b"-"), pieces[-1])


def _signal_group(child: subprocess.Popen[bytes], signum: int) -> None:
    try:
        os.killpg(child.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
