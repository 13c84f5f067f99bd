"""Host keys, checked as ssh checks them: against the host's UserKnownHostsFile and GlobalKnownHostsFile files
and its KnownHostsCommand's output (``hostkeyfile.py`` reads the lines, ``hostkeycommand.py`` runs the command).

- Host names are matched as ssh matches them, without regard to case (``hostkeyfile.py``): an entry
  ``[LOCALHOST]:2299``, plain, hashed or a pattern, in any of the files or the command's output, is about
  the host ``localhost`` on port 2299.
- A key filed under a ``@revoked`` line for the host is refused, always, whatever else is on file.
- A key on file (plain, or hashed ``|1|...``, or under a matching pattern) is trusted.
- Another key on file for the host is a changed key: always refused (stricter than ssh, which calls a key of
  another type new: a node that offers another type than the one on file is refused too).
- An unknown key is refused unless accept-new was asked, which appends it to the first UserKnownHostsFile
  under a file lock (no lost lines, even with several sweeps at once). The file is judged again under the
  lock, so a conflicting entry another sweep wrote meanwhile is never joined by a second key. A global file
  is never written, nor a name with a pattern character (``*``, ``?``, ``!``, ``,``): it would vouch for
  other hosts too.
- ``@cert-authority`` lines are read but host certificates are not checked: a host vouched for only by a
  certificate authority is unknown, and the error says so.

Off port 22, a key filed under the bare host name is trusted too, as ssh does. Files are read once per sweep
and read again when they change; after a miss on a host reached through a ProxyCommand they are read again
regardless (SSSD's ``sss_ssh_knownhostsproxy`` writes the key into its global file while it connects).
Before the handshake the host key algorithms of the keys known for the host are put first, as ssh does, so
a node that has several keys offers the one on file.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import paramiko

from . import HostKeyChanged, HostKeyUnknown
from .hostkeycommand import HOSTNAME, ORDER, CommandKeys, run_known_hosts_command
from .hostkeyfile import (
    Judgement,
    KnownHostLine,
    Verdict,
    judge,
    known_key_types,
    lower_host_name,
    parse_known_hosts,
)
from .sshconfig import ResolvedHost

# The host key algorithms that present a key of each type (an RSA key signs with SHA-2).
_ALGORITHMS = {"ssh-rsa": ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")}
# A name with these filed by accept-new would be a pattern (or a list) and vouch for other hosts too.
_NOT_IN_A_NAME = frozenset("*?!,") | frozenset(" \t\r\n")


def known_hosts_name(hostname: str, port: int) -> str:
    """The name OpenSSH files a host under: ``host`` on port 22, ``[host]:port`` otherwise."""
    return hostname if port == 22 else f"[{hostname}]:{port}"


class KnownHosts:
    """The host keys of one sweep: every connection's check goes through one of these."""

    def __init__(self) -> None:
        self._files = _KnownHostsFiles()
        self._accept_lock = threading.Lock()
        # (name, key) accepted with accept-new this sweep, written or not (UserKnownHostsFile none, read-only home).
        self._accepted: set[tuple[str, bytes]] = set()

    def preferred_key_types(self, host: ResolvedHost, offered: Sequence[str]) -> list[str]:
        """``offered`` (host key algorithms, in preference order) with those of the keys known for ``host``
        first. Raises KnownHostsCommandFailed (a host_key_unknown) when its KnownHostsCommand fails."""
        name = known_hosts_name(host.hostname, host.port)
        command = run_known_hosts_command(host, ORDER, host.hostname, None)
        lines = self._lines(host, name, command, reread=False) + self._lines(host, host.hostname, command, False)
        known = {algorithm for key_type in known_key_types(lines)
                 for algorithm in _ALGORITHMS.get(key_type, (key_type,))}
        return [algorithm for algorithm in offered if algorithm in known] + \
            [algorithm for algorithm in offered if algorithm not in known]

    def check(self, host: ResolvedHost, key: paramiko.PKey, accept_new: bool) -> None:
        """Return if ``key`` is ``host``'s known key; record it when unknown and ``accept_new``.

        Raises:
            HostKeyChanged: the key is revoked, or another key is on file (never accepted).
            HostKeyUnknown: the key is on file nowhere (KnownHostsCommandFailed: its command failed).
        """
        name = known_hosts_name(host.hostname, host.port)
        command = run_known_hosts_command(host, HOSTNAME, name, key)
        judgement = self._judge(host, name, key, command, reread=False)
        if judgement.verdict is Verdict.UNKNOWN and host.proxy_command is not None:
            judgement = self._judge(host, name, key, command, reread=True)
        if judgement.verdict is Verdict.TRUSTED:
            return
        if judgement.verdict is Verdict.REVOKED:
            raise HostKeyChanged(_revoked_message(name, key, judgement.line))
        if judgement.verdict is Verdict.CHANGED:
            raise HostKeyChanged(_changed_message(name, key, judgement.line))
        self._unknown(host, name, key, accept_new, judgement, command)

    def _unknown(self, host: ResolvedHost, name: str, key: paramiko.PKey, accept_new: bool,
                 judgement: Judgement, command: CommandKeys) -> None:
        with self._accept_lock:
            if (name, key.asbytes()) in self._accepted:
                return
            if judgement.line is not None:
                raise HostKeyUnknown(_certificate_message(name, key, judgement.line, host))
            if not accept_new:
                raise HostKeyUnknown(_unknown_message(name, key, host, command))
            if any(char in name for char in _NOT_IN_A_NAME):
                raise HostKeyUnknown(_pattern_name_message(name, key, host))
            if host.known_hosts_files:
                _append_unless_known(host.known_hosts_files[0], name, key)
            self._accepted.add((name, key.asbytes()))

    def _judge(self, host: ResolvedHost, name: str, key: paramiko.PKey, command: CommandKeys,
               reread: bool) -> Judgement:
        judgement = judge(self._lines(host, name, command, reread), key.asbytes(), key.get_name())
        if judgement.verdict is Verdict.UNKNOWN and name != host.hostname:
            # As ssh: off port 22, the key may be filed under the bare host name; only a match counts there.
            bare = judge(self._lines(host, host.hostname, command, reread), key.asbytes(), key.get_name())
            if bare.verdict in (Verdict.TRUSTED, Verdict.REVOKED):
                return bare
        return judgement

    def _lines(self, host: ResolvedHost, name: str, command: CommandKeys, reread: bool) -> list[KnownHostLine]:
        """The lines about ``name`` in the host's user files, global files and command output, in that order."""
        found = []
        for path in (*host.known_hosts_files, *host.global_known_hosts_files):
            found += self._files.about(path, name, reread)
        return found + [line for line in command.lines if line.matches(name)]


@dataclass(frozen=True)
class _ParsedFile:
    """One known_hosts file as read: ``signature`` says whether it changed since; lines with literal host names
    are looked up by name, the others (patterns, hashed names) tried one by one."""

    signature: tuple[int, ...]
    by_name: dict[str, tuple[KnownHostLine, ...]]
    others: tuple[KnownHostLine, ...]

    @classmethod
    def read(cls, lines: Sequence[KnownHostLine], signature: tuple[int, ...]) -> _ParsedFile:
        by_name: dict[str, list[KnownHostLine]] = {}
        others = []
        for line in lines:
            if line.is_hashed or any(char in line.hosts for char in "*?!"):
                others.append(line)
                continue
            # as ssh: a name on file is about the host whatever its case ([LOCALHOST]:2299 is [localhost]:2299)
            for host_name in dict.fromkeys(lower_host_name(line.hosts).split(",")):
                by_name.setdefault(host_name, []).append(line)
        return cls(signature, {key: tuple(value) for key, value in by_name.items()}, tuple(others))

    def about(self, name: str) -> list[KnownHostLine]:
        lowered = lower_host_name(name)
        return [*self.by_name.get(lowered, ()), *(line for line in self.others if line.matches(lowered))]


class _KnownHostsFiles:
    """known_hosts files read once and shared by every connection; a file is read again when its size, times
    or inode changed, or when asked. A file that is missing or unreadable has no line, as for ssh."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parsed: dict[str, _ParsedFile] = {}

    def about(self, path: str, name: str, reread: bool) -> list[KnownHostLine]:
        try:
            status = os.stat(path)
        except OSError:
            return []
        signature = (status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
        with self._lock:
            parsed = self._parsed.get(path)
        if parsed is None or parsed.signature != signature or reread:
            try:
                with open(path, encoding="utf-8", errors="replace") as handle:
                    text = handle.read()
            except OSError:
                return []
            parsed = _ParsedFile.read(parse_known_hosts(text, path), signature)
            with self._lock:
                self._parsed[path] = parsed
        return parsed.about(name)


def _key_words(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key.fingerprint}"


def _revoked_message(name: str, key: paramiko.PKey, line: KnownHostLine | None) -> str:
    where = line.where() if line else "known_hosts"
    return (f"{name}: the host key ({_key_words(key)}) is marked @revoked ({where}) and is never accepted; "
            "fix: find out why it was revoked (the node may be compromised) and give the node a new host key")


def _changed_message(name: str, key: paramiko.PKey, line: KnownHostLine | None) -> str:
    assert line is not None
    said = f"{name}: the host key ({_key_words(key)}) differs from the {line.key_type} key on file ({line.where()})"
    if line.from_command:
        return (f"{said}; fix: if the node was reinstalled, update its keys where the command reads them "
                "(FreeIPA: ipa host-mod --sshpubkey)")
    return (f"{said}; if the node was reinstalled, remove the old entry (ssh-keygen -R '{name}' -f {line.source}; "
            "a global file needs its administrator) and run again")


def _certificate_message(name: str, key: paramiko.PKey, line: KnownHostLine, host: ResolvedHost) -> str:
    target = host.known_hosts_files[0] if host.known_hosts_files else "~/.ssh/known_hosts"
    return (f"{name}: no key is on file for the host, only a certificate authority (@cert-authority, "
            f"{line.where()}), and gpudiag does not check host certificates; fix: check the host key "
            f"({_key_words(key)}) and add it to {target} (ssh-keyscan -p {host.port} {host.hostname})")


def _pattern_name_message(name: str, key: paramiko.PKey, host: ResolvedHost) -> str:
    return (f"{name}: host key {_key_words(key)} is not on file, and accept-new does not file it: the name holds a "
            "pattern character (* ? ! ,) and the entry would vouch for other hosts too; fix: check the key and add "
            f"it by hand for the host's own name (HostName of {host.label} in the ssh config)")


def _unknown_message(name: str, key: paramiko.PKey, host: ResolvedHost, command: CommandKeys) -> str:
    places = [*host.known_hosts_files, *host.global_known_hosts_files]
    if host.known_hosts_command is not None:
        places.append(f"the output of KnownHostsCommand {host.known_hosts_command!r}")
    note = f" ({command.note})" if command.note else ""
    return (f"{name}: host key {_key_words(key)} is not in {', '.join(places) or 'any known_hosts file'}{note}; "
            "check it and add it, or run with --accept-new-host-keys")


def _append_unless_known(path: str, name: str, key: paramiko.PKey) -> None:
    """Append ``name``'s ``key`` to ``path`` unless the file, read again under its lock, already says something
    about it: the key itself (another sweep just added it) returns, another key or a ``@revoked`` one raises.
    An ``OSError`` (a read-only home) leaves the key accepted for this sweep only, as ssh goes on when it
    cannot record one.

    Raises:
        HostKeyChanged: another sweep filed another key for ``name`` (or revoked this one) meanwhile.
    """
    line = f"{name} {key.get_name()} {key.get_base64()}\n"
    try:
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        with open(path, "a+", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # other sweeps (other processes) append too
            try:
                handle.seek(0)
                existing = handle.read()
                if _filed_meanwhile(existing, path, name, key):
                    return
                if existing and not existing.endswith("\n"):
                    line = "\n" + line  # never glue our entry onto someone's last line
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
    except OSError:
        return


def _filed_meanwhile(text: str, path: str, name: str, key: paramiko.PKey) -> bool:
    """True when ``text`` (the user file under its lock) already trusts ``key`` for ``name``. Raises
    HostKeyChanged when it holds another key for ``name`` or revokes this one."""
    about = [line for line in parse_known_hosts(text, path) if line.matches(name)]
    judgement = judge(about, key.asbytes(), key.get_name())
    if judgement.verdict is Verdict.REVOKED:
        raise HostKeyChanged(_revoked_message(name, key, judgement.line))
    if judgement.verdict is Verdict.CHANGED:
        raise HostKeyChanged(_changed_message(name, key, judgement.line))
    return judgement.verdict is Verdict.TRUSTED
