"""The probe bundle staged where a Slurm step's nodes find it, in a folder no one else could
have written.

The bundle is copied once per content hash into ``FOLDER/bundle-<hash>`` (``~/.cache/gpudiag``
or ``--slurm-bundle-dir``), a name anyone can predict, and every node runs it as the user who
launched gpudiag (root in a prolog). So before a copy is used, the folder and everything in it
must be owned by that user and writable by no one else, and every folder above it owned by that
user or root and writable by no one else (unless sticky, as ``/tmp``: no one can then rename
what is ours), as OpenSSH asks of ``~/.ssh``; and the copy must hold exactly this bundle's
bytes. A folder that fails is refused with its name and the fix, and never used.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import uuid
from pathlib import Path

from ..bundle import Bundle

BUNDLE_CACHE = Path(".cache") / "gpudiag"
COMPLETE_MARK = ".complete"
DIR_MODE = 0o755
FILE_MODE = 0o644
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


class UnsafeBundleFolder(Exception):
    """A staging folder or bundle copy another user could have written (or not this bundle's
    bytes): never used. The message names it and the fix, on one line."""


def bundle_folder_name(bundle: Bundle) -> str:
    """``bundle-<first 16 hex digits of the content hash>``."""
    return f"bundle-{bundle.content_hash[:16]}"


def stage_bundle(bundle: Bundle, folder: Path) -> Path:
    """Copy the bundle into ``folder/bundle-<hash>`` unless a copy is there: a staging folder of
    its own renamed into place, so no node ever sees half a bundle (and concurrent controllers
    sharing the folder keep one copy). ``folder`` is made where missing. Returns the bundle's
    folder, checked as the module says. Raises UnsafeBundleFolder for a folder or copy that
    fails the check, OSError when the copy cannot be made."""
    root = _own_folder(folder.absolute())
    final = root / bundle_folder_name(bundle)
    if not os.path.lexists(final):
        _copy_into_place(bundle, root, final)
    check_bundle_copy(bundle, final)
    return final


def check_bundle_copy(bundle: Bundle, final: Path) -> None:
    """Refuse ``final`` unless it and everything in it are ours, writable by no one else,
    folders and regular files only, complete, and hold ``bundle``'s bytes. Raises
    UnsafeBundleFolder naming the path and the fix."""
    fix = (f"remove {final} (gpudiag stages it again) or pass --slurm-bundle-dir DIR, a folder of "
           f"your own; gpudiag never runs a bundle another user could have written")
    uid = os.geteuid()
    for path in [final, *_tree(final)]:
        problem = _not_ours(path, uid)
        if problem is not None:
            raise UnsafeBundleFolder(f"the staged probe bundle {final}: {problem}: {fix}")
    for relative, data in [(Path(COMPLETE_MARK), f"{bundle.content_hash}\n".encode()), *bundle.contents.items()]:
        try:
            same = (final / relative).read_bytes() == data
        except OSError as error:
            raise UnsafeBundleFolder(f"the staged probe bundle {final}: {relative} cannot be read "
                                     f"({error.strerror}): {fix}") from error
        if not same:
            raise UnsafeBundleFolder(f"the staged probe bundle {final}: {relative} is not this gpudiag's: {fix}")


def _own_folder(folder: Path) -> Path:
    """``folder`` (made where missing, mode 0755), resolved, once it is ours and writable by no
    one else and every folder above it is ours or root's and writable by no one else (unless
    sticky). Raises UnsafeBundleFolder, OSError when it cannot be made."""
    _make_folders(folder)
    real = Path(os.path.realpath(folder))
    problem = folder_problem(real)
    if problem is not None:
        raise UnsafeBundleFolder(f"the bundle staging folder {folder}: {problem}: make it yours and writable by "
                                 f"you alone (chown, chmod go-w) or pass --slurm-bundle-dir DIR, a folder of your "
                                 f"own; gpudiag never runs a bundle from a folder another user can write")
    return real


def folder_problem(folder: Path) -> str | None:
    """Why another user could write in ``folder`` (resolved), or swap it, or None: it must be
    ours and writable by no one else, every folder above it ours or root's and writable by no one
    else (unless sticky)."""
    real = Path(os.path.realpath(folder))
    uid = os.geteuid()
    for above in reversed(real.parents):
        problem = _not_trusted_above(above, uid)
        if problem is not None:
            return f"{above} above it {problem}"
    return _not_ours(real, uid)


def _make_folders(folder: Path) -> None:
    """Make ``folder`` and the folders above it that are missing, each mode 0755 (never group-
    or world-writable, whatever the umask)."""
    missing = [path for path in [*reversed(folder.parents), folder] if not os.path.lexists(path)]
    for path in missing:
        try:
            os.mkdir(path, DIR_MODE)
        except FileExistsError:
            pass  # made meanwhile (another controller): checked like any other


def _copy_into_place(bundle: Bundle, root: Path, final: Path) -> None:
    """Write the bundle into a new folder of ``root`` and rename it to ``final``. A rename that
    loses a race (another controller's copy is there) is fine: that copy is checked."""
    staging = root / f"{final.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        os.mkdir(staging, DIR_MODE)
        for relative, data in [*bundle.contents.items(), (Path(COMPLETE_MARK), f"{bundle.content_hash}\n".encode())]:
            target = staging / relative
            _make_folders_below(staging, target.parent)
            _write_new(target, data)
        os.rename(staging, final)
    except OSError:
        if not os.path.lexists(final):
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone when renamed; the loser of a race removes its own


def _make_folders_below(top: Path, folder: Path) -> None:
    for path in [*reversed(folder.relative_to(top).parents), folder.relative_to(top)]:
        if str(path) != "." and not (top / path).is_dir():
            os.mkdir(top / path, DIR_MODE)


def _write_new(path: Path, data: bytes) -> None:
    """Write a new file (never through a link), mode 0644."""
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    with os.fdopen(handle, "wb") as stream:
        stream.write(data)


def _tree(folder: Path) -> list[Path]:
    """Every path below ``folder``, without following links."""
    found: list[Path] = []
    for directory, folders, files in os.walk(folder, followlinks=False):
        found += [Path(directory) / name for name in (*folders, *files)]
    return found


def _not_ours(path: Path, uid: int) -> str | None:
    """Why ``path`` is not ours alone to write, or None: a link, not a folder or regular file,
    another owner, or group/world-writable."""
    try:
        info = os.lstat(path)
    except OSError as error:
        return f"{path} cannot be read ({error.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link"
    if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
        return f"{path} is neither a folder nor a regular file"
    if info.st_uid != uid:
        return f"{path} is owned by {_user(info.st_uid)}, not by you ({_user(uid)})"
    if info.st_mode & _OTHERS_WRITE:
        return f"{path} is writable by {_writers(info.st_mode)} (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _not_trusted_above(path: Path, uid: int) -> str | None:
    """Why a folder above the staging folder lets someone else swap what is below it, or None:
    owned by neither us nor root, or writable by others without the sticky bit."""
    try:
        info = os.stat(path)
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    if info.st_uid not in (uid, 0):
        return f"is owned by {_user(info.st_uid)}"
    if info.st_mode & _OTHERS_WRITE and not info.st_mode & stat.S_ISVTX:
        return f"is writable by {_writers(info.st_mode)} without the sticky bit (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _writers(mode: int) -> str:
    return " and ".join(who for who, bit in (("its group", stat.S_IWGRP), ("everyone", stat.S_IWOTH)) if mode & bit)


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:  # no name for it here
        return f"uid {uid}"
