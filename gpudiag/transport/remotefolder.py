"""Whether the bundle folder on a node may be run from: ours, and writable by no one else.

The probe bundle lives in ``~/.cache/gpudiag/bundle-<hash>`` on the node, a name anyone can
predict. A folder of that name that another user made (a shared or careless home), or that
anyone may write to, could hold other code than ours, and the sweep would run it as the remote
user (often root). As OpenSSH's StrictModes judges ``~/.ssh``: every folder from the cache down,
and everything in the bundle folder, must be owned by the remote user (or root), no symbolic
link, and not writable by group or others.
"""

from __future__ import annotations

import stat

import paramiko

# Entries of a bundle folder looked at, at most (a bundle has a few dozen files).
MAX_ENTRIES = 10_000


class UnsafeFolder(Exception):
    """A folder or file the bundle would run from that is not only the remote user's; the
    message names it and why."""


def check_bundle_folder(sftp: paramiko.SFTPClient, home: str, folders: tuple[str, ...], bundle_dir: str | None,
                        ) -> None:
    """Check ``folders`` (absolute, the cache folders above the bundle) and, when given, the
    bundle folder ``bundle_dir`` and everything in it, against the owner of ``home`` (the remote
    user). Raises UnsafeFolder naming the first path that fails, OSError when SFTP fails."""
    owner = sftp.stat(home).st_uid
    for folder in folders:
        _check(folder, sftp.lstat(folder), owner, folder=True)
    if bundle_dir is not None:
        _check_tree(sftp, bundle_dir, owner)


def _check_tree(sftp: paramiko.SFTPClient, root: str, owner: int | None) -> None:
    _check(root, sftp.lstat(root), owner, folder=True)
    todo, seen = [root], 0
    while todo:
        folder = todo.pop()
        for entry in sftp.listdir_attr(folder):
            seen += 1
            if seen > MAX_ENTRIES:
                raise UnsafeFolder(f"{root} holds more than {MAX_ENTRIES} entries: not a probe bundle")
            path = f"{folder}/{entry.filename}"
            _check(path, entry, owner, folder=False)
            if stat.S_ISDIR(entry.st_mode or 0):
                todo.append(path)


def _check(path: str, attributes: paramiko.SFTPAttributes, owner: int | None, folder: bool) -> None:
    mode = attributes.st_mode or 0
    if stat.S_ISLNK(mode):
        raise UnsafeFolder(f"{path} is a symbolic link")
    if folder and not stat.S_ISDIR(mode):
        raise UnsafeFolder(f"{path} is not a folder")
    if attributes.st_uid not in (owner, 0):
        raise UnsafeFolder(f"{path} belongs to user id {attributes.st_uid}, not to the remote user ({owner})")
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeFolder(f"{path} may be written by {'others' if mode & stat.S_IWOTH else 'its group'} "
                           f"(mode {stat.S_IMODE(mode):04o})")
