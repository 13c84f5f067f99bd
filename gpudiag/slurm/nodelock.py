"""One check at a time on a node: a lock per node name, held for the whole check.

A lock is a file ``<node>.lock`` in a lock folder of this machine, held with ``flock``: the
kernel lets it go when the process that holds it ends, however it ends (SIGKILL, a crash), so a
dead check never holds a node. The file is opened close-on-exec, so no program the check starts
(a probe, ssh, srun) keeps it held after gpudiag is gone. A check takes every node's lock
without waiting, in name order; where another check holds one, it takes none and says whose.

The lock folder is ``$GPUDIAG_LOCK_DIR`` when set, else ``/run/gpudiag/locks`` for root (a
prolog or health check), ``$XDG_RUNTIME_DIR/gpudiag/locks`` or ``/tmp/gpudiag-<uid>/locks`` for
anyone else. It must be the user's own and writable by no one else, as must each folder above it
be the user's or root's (unless sticky): another user could otherwise hold or replace the locks.
So the lock keeps apart the checks of one machine, one user: a prolog, a health check and a timer
on the node itself (``--here``), or the checks a controller runs. Point ``$GPUDIAG_LOCK_DIR`` at
a folder the machines share, on a filesystem where ``flock`` works across machines, to keep a
controller's checks apart from the nodes' own.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .reason import safe_line
from .staging import folder_problem

LOCK_DIR_VARIABLE = "GPUDIAG_LOCK_DIR"
ROOT_LOCK_DIR = Path("/run/gpudiag/locks")
LOCK_SUFFIX = ".lock"
FILE_MODE = 0o600
FOLDER_MODE = 0o700
# A node name longer than this is kept as its first characters and a hash of the whole.
_NAME_CHARS = 120
_SAFE_NAME = frozenset("abcdefghijklmnopqrstuvwxyz0123456789._-")
# What a lock file says about its holder, read by a check it keeps out.
_HOLDER_CHARS = 300


class NodeLockError(Exception):
    """The lock folder cannot be used (another user's, writable by others, not a folder): no
    check runs. The message names it and the fix."""


@dataclass(frozen=True)
class Busy:
    """A node another check holds: its name and what that check wrote in the lock (``pid=...
    since=... argv``, or "" where it had not yet written it)."""

    node: str
    holder: str

    def describe(self) -> str:
        """``another gpudiag check holds n1 (pid=4242 since=2026-11-29T10:00:00Z gpudiag preflight ...)``."""
        return f"another gpudiag check holds {self.node}" + (f" ({self.holder})" if self.holder else "")


class NodeLocks:
    """The locks one check holds (a context manager: released on leaving, or with ``release``)."""

    def __init__(self, held: Mapping[str, int], folder: Path | None) -> None:
        self._held = dict(held)
        self.folder = folder

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(self._held)

    def release(self) -> None:
        for descriptor in self._held.values():
            with contextlib.suppress(OSError):
                os.close(descriptor)  # closing the one descriptor lets the flock go
        self._held.clear()

    def __enter__(self) -> NodeLocks:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


def lock_folder(environ: Mapping[str, str] | None = None) -> Path:
    """Where this user's node locks live (see the module docstring)."""
    environ = os.environ if environ is None else environ
    if environ.get(LOCK_DIR_VARIABLE):
        return Path(environ[LOCK_DIR_VARIABLE])
    uid = os.geteuid()
    if uid == 0:
        return ROOT_LOCK_DIR
    runtime = environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "gpudiag" / "locks"
    return Path("/tmp") / f"gpudiag-{uid}" / "locks"


def lock_nodes(names: Iterable[str], folder: Path | None = None, holder: str = "") -> NodeLocks | Busy:
    """Take the lock of every node of ``names`` (in ``folder``, default lock_folder()) without
    waiting, in name order: the locks held, or the first node another check holds (then none is
    held). ``holder``: what the locks say about this check to one they keep out. Raises
    NodeLockError when the folder cannot be used."""
    folder = _usable_folder(folder if folder is not None else lock_folder())
    held: dict[str, int] = {}
    note = f"pid={os.getpid()} since={datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ} {holder}".strip()
    taken = False  # every lock taken: kept; else (busy, an error, an interrupt) none is
    try:
        for name in sorted(set(names), key=_key):
            path = folder / (_key(name) + LOCK_SUFFIX)
            descriptor = _open(path)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                busy = Busy(name, _holder(descriptor))
                os.close(descriptor)
                return busy
            held[name] = descriptor
            _write(descriptor, note)
        taken = True
    finally:
        if not taken:
            NodeLocks(held, folder).release()
    return NodeLocks(held, folder)


def _key(name: str) -> str:
    """A node's lock file name: lower case (host names are), characters other than letters,
    digits, ``. _ -`` and a leading ``.`` as ``%XX`` (never ``.``, ``..`` or hidden); a long one
    cut, with a hash of the whole."""
    key = "".join(c if c in _SAFE_NAME and not (c == "." and i == 0) else f"%{ord(c):02X}"
                  for i, c in enumerate(name.lower())) or "%"
    if len(key) > _NAME_CHARS:
        key = f"{key[:_NAME_CHARS]}-{hashlib.sha256(name.lower().encode()).hexdigest()[:16]}"
    return key


def _usable_folder(folder: Path) -> Path:
    """``folder`` (resolved), made where missing (each folder made mode 0700), once it and the
    folders above pass staging.folder_problem. Raises NodeLockError."""
    fix = f"make it yours and writable by you alone, or set ${LOCK_DIR_VARIABLE} to a folder of your own"
    try:
        for path in [*reversed(folder.absolute().parents), folder.absolute()]:
            if not os.path.lexists(path):
                with contextlib.suppress(FileExistsError):  # made meanwhile: checked like any other
                    os.mkdir(path, FOLDER_MODE)
    except OSError as error:
        raise NodeLockError(f"the node lock folder {folder} cannot be made ({error.strerror}): {fix}") from error
    problem = folder_problem(folder.absolute())
    if problem is not None:
        raise NodeLockError(f"the node lock folder {folder}: {problem}: {fix}")
    return Path(os.path.realpath(folder))


def _open(path: Path) -> int:
    """The lock file's descriptor (made where missing; never through a link; close-on-exec).
    Raises NodeLockError for a file that is not a regular file of ours."""
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    except OSError as error:
        raise NodeLockError(f"the node lock {path} cannot be opened ({error.strerror})") from error
    info = os.fstat(descriptor)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(descriptor)
        raise NodeLockError(f"the node lock {path} is not a file of yours: remove it")
    return descriptor


def _write(descriptor: int, note: str) -> None:
    with contextlib.suppress(OSError):
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, (note + "\n").encode(), 0)


def _holder(descriptor: int) -> str:
    """What the holder wrote in the lock, one line of safe characters ("" when it has not yet)."""
    try:
        return safe_line(os.pread(descriptor, _HOLDER_CHARS, 0).decode(errors="replace"), _HOLDER_CHARS)
    except OSError:
        return ""
