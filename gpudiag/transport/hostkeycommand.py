"""KnownHostsCommand (OpenSSH 8.5+): a command whose output is read as known_hosts lines, run as ssh runs it.

ssh splits the command into words as its own config parser does (quotes, no shell), expands the tokens of
ssh_config(5) and ``${VAR}`` in every word but the first, and runs the first, which must be an absolute path,
directly, with the environment kept and stdin closed. It runs it twice a connection: with ``%I`` ``ORDER``
before the handshake (to prefer the key types it knows; no key yet, so ``%K``, ``%f`` and ``%t`` are ``NONE``)
and with ``%I`` ``HOSTNAME`` to check the key the host offered (``%H`` is the name it is filed under,
``[host]:port`` off port 22). SSSD 2.9+ sets ``KnownHostsCommand /usr/bin/sss_ssh_knownhosts %H``.

As in ssh, a command that cannot start, is not an absolute path or has unbalanced quotes contributes no key
(it is said when the key is then unknown), while a token ssh cannot expand, a command that exits with a
non-zero status or one that outlives ``COMMAND_TIMEOUT_S`` stops the connection: the host's
``host_key_unknown``, never accepted with ``--accept-new-host-keys``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import socket
import subprocess
from dataclasses import dataclass

import paramiko

from . import HostKeyUnknown
from .hostkeyfile import COMMAND_SOURCE, KnownHostLine, parse_known_hosts
from .sshconfig import ResolvedHost
from .sshpaths import home_directory, local_user

# ssh waits for ever; a sweep cannot. Seconds.
COMMAND_TIMEOUT_S = 30.0
ORDER = "ORDER"
HOSTNAME = "HOSTNAME"
_NONE = "NONE"


class KnownHostsCommandFailed(HostKeyUnknown):
    """The KnownHostsCommand stopped the connection, as it stops ssh's; the message names it and the fix."""


@dataclass(frozen=True)
class CommandKeys:
    """What one run gave: its known_hosts lines, and ``note`` saying why it gave none when it could not run."""

    lines: tuple[KnownHostLine, ...]
    note: str | None = None


def run_known_hosts_command(host: ResolvedHost, invocation: str, filed_as: str,
                            key: paramiko.PKey | None) -> CommandKeys:
    """Run ``host.known_hosts_command`` for ``invocation`` (``ORDER`` or ``HOSTNAME``); ``filed_as`` is ``%H``,
    ``key`` the key the host offered (None before the handshake). Returns its lines (all of them: the caller
    picks those about the host). Raises KnownHostsCommandFailed as ssh would fail."""
    template = host.known_hosts_command
    if template is None:
        return CommandKeys(())
    try:
        words = shlex.split(template)
    except ValueError:
        return CommandKeys((), f"KnownHostsCommand {template!r} contains invalid quotes, so it was not run")
    if not words:
        return CommandKeys((), f"KnownHostsCommand {template!r} names no command")
    if not os.path.isabs(words[0]):
        return CommandKeys((), f"KnownHostsCommand {words[0]!r} is not an absolute path, so it was not run "
                               "(fix: give the full path, as ssh requires)")
    argv = [words[0], *(_expand(word, _tokens(host, invocation, filed_as, key), host) for word in words[1:])]
    return _run(argv, host)


def _run(argv: list[str], host: ResolvedHost) -> CommandKeys:
    shown = shlex.join(argv)
    try:
        completed = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=COMMAND_TIMEOUT_S,
                                   check=False)
    except subprocess.TimeoutExpired:
        raise KnownHostsCommandFailed(f"{host.label}: KnownHostsCommand {shown!r} did not end within "
                                      f"{COMMAND_TIMEOUT_S:g} s; fix: make it answer, or remove it from the ssh "
                                      "config") from None
    except OSError as error:
        return CommandKeys((), f"KnownHostsCommand {shown!r} could not run: {error.strerror or error}")
    if completed.returncode != 0:
        said = _last_line(completed.stderr)
        raise KnownHostsCommandFailed(f"{host.label}: KnownHostsCommand {shown!r} exited with status "
                                      f"{completed.returncode}{': ' + said if said else ''}; the host key cannot be "
                                      "checked (ssh fails too); fix: repair the command or the service it asks")
    text = completed.stdout.decode(errors="replace")
    return CommandKeys(tuple(parse_known_hosts(text, f"{COMMAND_SOURCE}{argv[0]}")))


def _last_line(data: bytes) -> str:
    lines = [line.strip() for line in data.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _tokens(host: ResolvedHost, invocation: str, filed_as: str, key: paramiko.PKey | None) -> dict[str, str]:
    """ssh's tokens of KnownHostsCommand (ssh_config(5) TOKENS) that a sweep can know."""
    local = socket.gethostname()
    jump = host.proxy_jump or ""
    values = {"%": "%", "d": home_directory(), "h": host.hostname, "H": filed_as, "I": invocation,
              "i": str(os.getuid()), "j": jump, "k": host.original_host or host.hostname, "L": local.split(".")[0],
              "l": local, "n": host.original_host or host.hostname, "p": str(host.port), "r": host.user,
              "u": local_user(), "t": key.get_name() if key else _NONE, "f": key.fingerprint if key else _NONE,
              "K": key.get_base64() if key else _NONE}
    # %C as ssh computes it: SHA-1 of %l%h%p%r, and %j where the ssh has it.
    values["C"] = hashlib.sha1(f"{local}{host.hostname}{host.port}{host.user}{jump}".encode()).hexdigest()
    return values


def _expand(word: str, tokens: dict[str, str], host: ResolvedHost) -> str:
    """``word`` with ``%x`` tokens and ``${VAR}`` expanded. Raises KnownHostsCommandFailed for an unknown token
    or an unset variable (ssh stops there too)."""
    def replace(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            value = os.environ.get(match.group(1))
            if value is None:
                raise _failed(host, f"${{{match.group(1)}}} is not set in the environment",
                              "set it before the sweep, or remove it from the command")
            return value
        token = match.group(2)
        if token not in tokens:
            raise _failed(host, f"%{token} is not a token ssh expands there" if token else "it ends with a lone %",
                          "write %% for a literal % in the ssh config")
        return tokens[token]

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|%(.?)", replace, word, flags=re.DOTALL)


def _failed(host: ResolvedHost, problem: str, fix: str) -> KnownHostsCommandFailed:
    return KnownHostsCommandFailed(f"{host.label}: KnownHostsCommand {host.known_hosts_command!r}: {problem}; "
                                   f"fix: {fix}")
