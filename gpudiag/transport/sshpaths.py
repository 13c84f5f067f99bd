"""Where ssh looks on this machine, as ``ssh`` itself decides it: the local user and their home
from the password database (not ``$USER`` or ``$HOME``, which sudo, cron and batch systems often
set to something else), ``~`` expansion, and the known_hosts files a host is checked against when
its configuration names none."""

from __future__ import annotations

import getpass
import os
from collections.abc import Sequence

DEFAULT_KNOWN_HOSTS_FILES = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS_FILES = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")


def local_user() -> str:
    """The local account name as ssh takes it: from the password database, not from $USER."""
    try:
        import pwd
    except ImportError:  # not POSIX: no password database to ask
        return getpass.getuser()
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid without a passwd entry, as in some containers
        return getpass.getuser()


def home_directory() -> str:
    """The local user's home as ssh takes it: the password database's, not ``$HOME`` (which sudo,
    cron and batch systems often set to something else); ``$HOME`` only for a uid without an entry."""
    try:
        import pwd
    except ImportError:  # not POSIX: no password database to ask
        return os.path.expanduser("~")
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:  # a uid without a passwd entry, as in some containers
        return os.path.expanduser("~")


def expand_home(path: str) -> str:
    """``~`` and ``~/...`` as ``home_directory()``, ``~name/...`` as that user's home (as ssh does);
    a path without a leading ``~``, or naming an unknown user, comes back unchanged."""
    if not path.startswith("~"):
        return path
    name, slash, rest = path[1:].partition("/")
    if not name:
        return home_directory() + slash + rest
    try:
        import pwd

        return pwd.getpwnam(name).pw_dir + slash + rest
    except (ImportError, KeyError):
        return path


def known_hosts_files(paths: Sequence[str] | None) -> tuple[str, ...]:
    if paths is None:
        return tuple(expand_home(path) for path in DEFAULT_KNOWN_HOSTS_FILES)
    if [path.lower() for path in paths] == ["none"]:
        return ()
    return tuple(expand_home(path) for path in paths)


def global_known_hosts_files(value: str | None) -> tuple[str, ...]:
    """GlobalKnownHostsFile's files: ssh expands ``~`` in them, and no token."""
    if value is None:
        return DEFAULT_GLOBAL_KNOWN_HOSTS_FILES
    paths = value.split()
    if [path.lower() for path in paths] == ["none"]:
        return ()
    return tuple(expand_home(path) for path in paths)


# Path lists nearly every host of a fleet resolves alike (ssh -G lists seven default identity
# files): one tuple for all of them, not one a host (bounded: a fleet has few).
_SHARED_PATHS: dict[tuple[str, ...], tuple[str, ...]] = {}
_SHARED_PATHS_MAX = 4096


def shared_paths(paths: tuple[str, ...]) -> tuple[str, ...]:
    """``paths``, as the one tuple of those paths every caller shares."""
    found = _SHARED_PATHS.get(paths)
    if found is None:
        if len(_SHARED_PATHS) >= _SHARED_PATHS_MAX:
            _SHARED_PATHS.clear()
        found = _SHARED_PATHS[paths] = paths
    return found
