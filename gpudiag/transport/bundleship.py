"""The probe bundle over SFTP: into a content-hashed folder of the remote user's cache, once per
bundle version, staged and renamed into place so that a half-copied bundle is never used."""

from __future__ import annotations

import contextlib
import io
import stat
import uuid

import paramiko

from ..bundle import Bundle
from .remotefolder import check_bundle_folder

# Where the bundles live, under the remote user's home.
_BUNDLE_CACHE = ".cache/gpudiag"


def ship_bundle(sftp: paramiko.SFTPClient, bundle: Bundle) -> str:
    """Upload into a staging folder of its own and rename it into place, so a half-copied bundle is
    never used. Hosts that share a home (NFS) race to rename: the loser removes its staging folder
    and uses the winner's. Returns the absolute remote folder. Raises UnsafeFolder when the cache
    folders, or a bundle folder found there, are not only the remote user's (gpudiag.transport.
    remotefolder), OSError (staging removed), TimeoutError at once when the server stops
    answering (nothing more can be done over it)."""
    name = f"bundle-{bundle.content_hash[:16]}"
    home = sftp.normalize(".")
    final = f"{home}/{_BUNDLE_CACHE}/{name}"
    cache = tuple(f"{home}/{'/'.join(_BUNDLE_CACHE.split('/')[:depth])}"
                  for depth in range(1, _BUNDLE_CACHE.count("/") + 2))
    if _exists(sftp, f"{final}/.complete"):
        check_bundle_folder(sftp, home, cache, final)  # a folder of that name is not ours by its name
        return final
    _makedirs(sftp, f"{home}/{_BUNDLE_CACHE}")
    check_bundle_folder(sftp, home, cache, None)
    staging = f"{final}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        _upload(sftp, bundle, staging)
        sftp.posix_rename(staging, final)
    except TimeoutError:
        raise
    except OSError:
        won_by_another = _exists(sftp, f"{final}/.complete")
        _remove_tree(sftp, staging)
        if not won_by_another:
            raise  # not a lost race with another host or sweep: a real failure (disk full, ...)
        check_bundle_folder(sftp, home, (), final)
    return final


def _upload(sftp: paramiko.SFTPClient, bundle: Bundle, staging: str) -> None:
    for folder in sorted({str(p.parent) for p in bundle.files} | {"."}):
        _makedirs(sftp, f"{staging}/{folder}")
    for relative, data in bundle.contents.items():
        sftp.putfo(io.BytesIO(data), f"{staging}/{relative.as_posix()}")
    sftp.putfo(io.BytesIO(bundle.content_hash.encode()), f"{staging}/.complete")


def _remove_tree(sftp: paramiko.SFTPClient, path: str) -> None:
    """Remove the folder ``path`` and everything in it, as far as it goes: a staging folder left
    behind is litter, not a failure of the host."""
    try:
        entries = sftp.listdir_attr(path)
    except OSError:
        return  # never made, or gone already
    for entry in entries:
        child = f"{path}/{entry.filename}"
        try:
            if stat.S_ISDIR(entry.st_mode or 0):
                _remove_tree(sftp, child)
            else:
                sftp.remove(child)
        except OSError:
            continue
    with contextlib.suppress(OSError):
        sftp.rmdir(path)


def _exists(sftp: paramiko.SFTPClient, path: str) -> bool:
    try:
        sftp.stat(path)
    except FileNotFoundError:
        return False
    return True


def _makedirs(sftp: paramiko.SFTPClient, path: str) -> None:
    parts = path.strip("/").split("/")
    for depth in range(1, len(parts) + 1):
        partial = "/" + "/".join(parts[:depth])
        if not _exists(sftp, partial):
            try:
                sftp.mkdir(partial, mode=0o700)
            except OSError:
                if not _exists(sftp, partial):  # another sweep made it meanwhile
                    raise
