"""Host keys: checked against known_hosts, loaded once per sweep and shared by every connection.

An unknown key is refused unless the user asked for accept-new, which appends it under a file
lock (no lost lines, even with several sweeps at once). A changed key is always refused.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Sequence

import paramiko

from . import HostKeyChanged, HostKeyUnknown

DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts",)


def known_hosts_name(hostname: str, port: int) -> str:
    """The name OpenSSH files a host under: ``host`` on port 22, ``[host]:port`` otherwise."""
    return hostname if port == 22 else f"[{hostname}]:{port}"


class KnownHosts:
    """The keys of one list of known_hosts files; new keys go into the first file."""

    def __init__(self, paths: Sequence[str]) -> None:
        self._paths = tuple(os.path.expanduser(path) for path in (paths or DEFAULT_KNOWN_HOSTS))
        self._lock = threading.Lock()
        self._keys = paramiko.HostKeys()
        for path in self._paths:
            if os.path.isfile(path):
                self._keys.load(path)

    def check(self, hostname: str, port: int, key: paramiko.PKey, accept_new: bool) -> None:
        """Return if ``key`` is the known key of the host; append it when unknown and
        ``accept_new``. Raises HostKeyChanged (always refused) or HostKeyUnknown."""
        name = known_hosts_name(hostname, port)
        with self._lock:
            known = self._keys.lookup(name)
            if known is not None and any(k == key for k in known.values()):
                return
            if known is not None:
                # A different key, of the same or another type, is on file: treat it as changed,
                # as OpenSSH's StrictHostKeyChecking=yes/accept-new refuse it.
                raise HostKeyChanged(
                    f"{name}: the host key ({key.get_name()} {key.fingerprint}) differs from the one in "
                    f"{self._paths[0]}; if the node was reinstalled, remove the old entry "
                    f"(ssh-keygen -R '{name}' -f {self._paths[0]}) and run again")
            if not accept_new:
                raise HostKeyUnknown(
                    f"{name}: host key {key.get_name()} {key.fingerprint} is not in {', '.join(self._paths)}; "
                    "check it and add it, or run with --accept-new-host-keys")
            self._append(name, key)
            self._keys.add(name, key.get_name(), key)

    def _append(self, name: str, key: paramiko.PKey) -> None:
        path = self._paths[0]
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        line = f"{name} {key.get_name()} {key.get_base64()}\n"
        with open(path, "a+", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # other sweeps (other processes) append too
            try:
                handle.seek(0)
                existing = handle.read()
                if line.strip() in existing.splitlines():  # another sweep added it meanwhile
                    return
                if existing and not existing.endswith("\n"):
                    line = "\n" + line  # never glue our entry onto someone's last line
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


class KnownHostsRegistry:
    """One KnownHosts per distinct list of files, created on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_paths: dict[tuple[str, ...], KnownHosts] = {}

    def get(self, paths: Sequence[str]) -> KnownHosts:
        key = tuple(paths)
        with self._lock:
            if key not in self._by_paths:
                self._by_paths[key] = KnownHosts(key)
            return self._by_paths[key]
