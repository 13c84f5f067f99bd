"""OpenSSH client configuration for each host, resolved the way ``ssh`` itself would.

With the ``ssh`` binary present, ``ssh -G`` is the authority: it evaluates ``Host``/``Match`` blocks,
``Include`` and every token exactly as a later ``ssh`` would. Without it, ``paramiko.SSHConfig`` reads
the same file with the same precedence (it does not follow ``Include``, and ``%r``/``%p`` in
``IdentityFile`` use the config's User/Port rather than the command line's).

Precedence, as in ssh: ``user@``/``:port`` from the hosts file, then ``-l``/``--user``, then the config
file, then ssh's defaults. ``-i`` files come before the config's ``IdentityFile`` lines, and
``--known-hosts`` replaces ``UserKnownHostsFile``.
"""

from __future__ import annotations

import getpass
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import paramiko

from .errors import InputError
from .hosts import HostSpec

SSH_G_TIMEOUT_S = 10.0
RESOLVE_WORKERS = 16
DEFAULT_PORT = 22
# What the fallback tries without any IdentityFile: the key types paramiko can load, in ssh's order
# of preference among them.
DEFAULT_IDENTITY_FILES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
DEFAULT_KNOWN_HOSTS_FILES = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
USER_CONFIG_FILE = "~/.ssh/config"

# ssh -G prints yes/no as true/false; results use the words of ssh_config(5).
_STRICT_WORDS = {"true": "yes", "yes": "yes", "false": "no", "no": "no", "off": "no",
                 "accept-new": "accept-new", "ask": "ask"}
_TIME_UNITS_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True)
class SshOptions:
    """The command line's SSH settings: ``--ssh-config``, ``-i``, ``-l``, ``--known-hosts``."""

    config_file: str | None = None
    identity_files: tuple[str, ...] = ()
    user: str | None = None
    known_hosts: str | None = None
    connect_timeout_s: float = 10.0


@dataclass(frozen=True)
class ResolvedHost:
    """Everything needed to open an SSH connection to one host.

    ``identity_files`` and ``known_hosts_files`` are tilde-expanded and may name files that do not
    exist (the transport tries those that do). ``proxy_jump`` is the raw ProxyJump value, None for
    none. ``strict_host_key_checking`` is ``yes``, ``no``, ``accept-new`` or ``ask``.
    """

    label: str
    hostname: str
    user: str
    port: int
    identity_files: tuple[str, ...]
    proxy_jump: str | None
    connect_timeout_s: float
    known_hosts_files: tuple[str, ...]
    strict_host_key_checking: str


@dataclass(frozen=True)
class _RawConfig:
    """A host's settings as the config source gave them, before gpudiag's options are applied."""

    hostname: str
    user: str
    port: int
    identity_files: tuple[str, ...]
    proxy_jump: str | None
    connect_timeout: str | None
    known_hosts_files: tuple[str, ...]
    strict_host_key_checking: str


def resolve_host(spec: HostSpec, options: SshOptions, ssh_binary: str | None = "ssh") -> ResolvedHost:
    """The connection settings of one host.

    ``ssh_binary`` is the ssh client to ask (``ssh -G``), looked up on PATH when it is a bare name;
    None, or a binary that cannot be found, uses the paramiko fallback.

    Raises:
        InputError: the config file cannot be read, or ssh rejects it (the message names the file and
            carries ssh's own words).
    """
    binary = shutil.which(ssh_binary) if ssh_binary else None
    if binary is None:
        raw = _lookup_paramiko(spec, options)
    else:
        raw = _lookup_ssh(binary, spec, options)
    return _apply_options(spec, options, raw)


def resolve_all(specs: Iterable[HostSpec], options: SshOptions,
                ssh_binary: str | None = "ssh") -> list[ResolvedHost]:
    """``resolve_host`` for every spec, in input order.

    Hosts with the same host, user and port are resolved once. ``ssh -G`` runs in a pool of
    ``RESOLVE_WORKERS`` threads, since one process start per host adds up over a 1,000-node fleet.

    Raises:
        InputError: as ``resolve_host``; raised once, before the pool starts, for a bad config.
    """
    ordered = list(specs)
    unique = list(dict.fromkeys(ordered))
    if not unique:
        return []
    _check_readable(options.config_file)
    binary = shutil.which(ssh_binary) if ssh_binary else None
    # The first host alone: a broken config then fails once, not once per host in the pool.
    resolved = {unique[0]: resolve_host(unique[0], options, binary)}
    rest = unique[1:]
    if rest:
        def resolve_one(spec: HostSpec) -> ResolvedHost:
            return resolve_host(spec, options, binary)

        with ThreadPoolExecutor(max_workers=min(RESOLVE_WORKERS, len(rest))) as pool:
            resolved.update(zip(rest, pool.map(resolve_one, rest), strict=True))
    return [resolved[spec] for spec in ordered]


def _apply_options(spec: HostSpec, options: SshOptions, raw: _RawConfig) -> ResolvedHost:
    explicit = tuple(os.path.expanduser(path) for path in options.identity_files)
    identities = explicit + tuple(path for path in raw.identity_files if path not in explicit)
    if options.known_hosts is not None:
        known_hosts: tuple[str, ...] = (os.path.expanduser(options.known_hosts),)
    else:
        known_hosts = raw.known_hosts_files
    timeout_s = options.connect_timeout_s
    if raw.connect_timeout is not None:
        timeout_s = _parse_seconds(raw.connect_timeout, options)
    return ResolvedHost(label=spec.label, hostname=raw.hostname, user=raw.user, port=raw.port,
                        identity_files=identities, proxy_jump=raw.proxy_jump, connect_timeout_s=timeout_s,
                        known_hosts_files=known_hosts, strict_host_key_checking=raw.strict_host_key_checking)


def _refuse_proxy_command(command: str | None, jump: str | None, spec: HostSpec, options: SshOptions) -> None:
    """ProxyCommand is not supported; connecting directly instead would bypass the user's path."""
    if command and command.lower() != "none" and _proxy_jump(jump) is None:
        raise InputError(f"{_config_name(options)}: host {spec.host} uses ProxyCommand, which gpudiag does not "
                         "run; use ProxyJump (a jump host) for it instead")


def _config_name(options: SshOptions) -> str:
    return options.config_file or USER_CONFIG_FILE


def _check_readable(config_file: str | None) -> None:
    if config_file is None:
        return
    try:
        with open(config_file, "rb"):
            pass
    except OSError as exc:
        raise InputError(f"--ssh-config {config_file}: cannot read it ({exc.strerror}); "
                         "fix: check the path and its permissions") from None


# --- ssh -G ---------------------------------------------------------------------------------------


def _lookup_ssh(binary: str, spec: HostSpec, options: SshOptions) -> _RawConfig:
    _check_readable(options.config_file)
    command = _ssh_g_command(binary, spec, options)
    try:
        completed = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                   timeout=SSH_G_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise InputError(f"{_config_name(options)}: 'ssh -G {spec.host}' took more than {SSH_G_TIMEOUT_S:g} s; "
                         "fix: check Match exec lines in the ssh config") from None
    if completed.returncode != 0:
        raise InputError(f"{_config_name(options)}: ssh rejects the configuration for {spec.host}: "
                         f"{_ssh_message(completed.stderr)}; fix: correct the ssh config file")
    values = parse_ssh_g(completed.stdout)
    return _raw_from_ssh_g(values, spec, options)


def _ssh_g_command(binary: str, spec: HostSpec, options: SshOptions) -> list[str]:
    command = [binary, "-G"]
    if options.config_file is not None:
        command += ["-F", options.config_file]
    user = spec.user or options.user
    if user is not None:
        command += ["-l", user]
    if spec.port is not None:
        command += ["-p", str(spec.port)]
    for path in options.identity_files:
        command += ["-i", path]
    # "--": a host name can never be taken for an option.
    return command + ["--", spec.host]


def parse_ssh_g(text: str) -> dict[str, list[str]]:
    """``ssh -G`` output as lowercase keyword → every value given, in order (IdentityFile repeats)."""
    values: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            values.setdefault(key.lower(), []).append(value.strip())
    return values


def _raw_from_ssh_g(values: Mapping[str, Sequence[str]], spec: HostSpec, options: SshOptions) -> _RawConfig:
    def first(key: str) -> str | None:
        found = values.get(key)
        return found[0] if found else None

    hostname = first("hostname") or spec.host.lower()
    user = first("user") or _local_user()
    port = _parse_port(first("port") or str(DEFAULT_PORT), options)
    tokens = {"%%": "%", "%d": os.path.expanduser("~"), "%u": _local_user(), "%h": hostname,
              "%p": str(port), "%r": user, "%n": spec.host}
    identities = tuple(_expand_tokens(path, tokens) for path in values.get("identityfile", ()))
    timeout = first("connecttimeout")
    _refuse_proxy_command(first("proxycommand"), first("proxyjump"), spec, options)
    return _RawConfig(hostname=hostname, user=user, port=port, identity_files=identities,
                      proxy_jump=_proxy_jump(first("proxyjump")),
                      connect_timeout=None if timeout in (None, "none") else timeout,
                      known_hosts_files=_known_hosts(first("userknownhostsfile")),
                      strict_host_key_checking=_strict(first("stricthostkeychecking"), options))


def _ssh_message(stderr: str) -> str:
    # ssh -G also warns about a missing -i file or a non-terminal stdin: noise, not the cause.
    noise = ("Pseudo-terminal will not be allocated", "Warning: Identity file")
    lines = [line.strip() for line in stderr.splitlines() if line.strip() and not line.startswith(noise)]
    return " / ".join(lines) or "no message"


def _expand_tokens(path: str, tokens: Mapping[str, str]) -> str:
    expanded = re.sub(r"%.", lambda match: tokens.get(match.group(0), match.group(0)), path)
    return os.path.expanduser(expanded)


# --- paramiko fallback ----------------------------------------------------------------------------


def _lookup_paramiko(spec: HostSpec, options: SshOptions) -> _RawConfig:
    config = _read_paramiko_config(options)
    found = config.lookup(spec.host)
    user = spec.user or options.user or found.get("user") or _local_user()
    port = spec.port or _parse_port(found.get("port", str(DEFAULT_PORT)), options)
    from_config = tuple(os.path.expanduser(path) for path in found.get("identityfile", ()))
    # As ssh: the defaults only when neither the config nor an existing -i file names a key.
    has_explicit = any(os.path.isfile(os.path.expanduser(path)) for path in options.identity_files)
    defaults = () if from_config or has_explicit else tuple(os.path.expanduser(p) for p in DEFAULT_IDENTITY_FILES)
    _refuse_proxy_command(found.get("proxycommand"), found.get("proxyjump"), spec, options)
    return _RawConfig(hostname=found.get("hostname", spec.host).lower(), user=user, port=port,
                      identity_files=from_config + defaults, proxy_jump=_proxy_jump(found.get("proxyjump")),
                      connect_timeout=found.get("connecttimeout"),
                      known_hosts_files=_known_hosts(found.get("userknownhostsfile")),
                      strict_host_key_checking=_strict(found.get("stricthostkeychecking"), options))


def _read_paramiko_config(options: SshOptions) -> paramiko.SSHConfig:
    path = options.config_file or os.path.expanduser(USER_CONFIG_FILE)
    if options.config_file is None and not os.path.isfile(path):
        return paramiko.SSHConfig()
    try:
        return paramiko.SSHConfig.from_path(path)
    except OSError as exc:
        raise InputError(f"--ssh-config {path}: cannot read it ({exc.strerror}); "
                         "fix: check the path and its permissions") from None
    except paramiko.ssh_exception.ConfigParseError as exc:
        raise InputError(f"{path}: {exc}; fix: correct the ssh config file") from None


# --- values shared by both sources ----------------------------------------------------------------


def _local_user() -> str:
    """The local account name as ssh takes it: from the password database, not from $USER."""
    try:
        import pwd
    except ImportError:  # not POSIX: no password database to ask
        return getpass.getuser()
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid without a passwd entry, as in some containers
        return getpass.getuser()


def _proxy_jump(value: str | None) -> str | None:
    return None if value is None or value.lower() == "none" else value


def _known_hosts(value: str | None) -> tuple[str, ...]:
    if value is None:
        return tuple(os.path.expanduser(path) for path in DEFAULT_KNOWN_HOSTS_FILES)
    if value.lower() == "none":
        return ()
    return tuple(os.path.expanduser(path) for path in value.split())


def _strict(value: str | None, options: SshOptions) -> str:
    word = _STRICT_WORDS.get((value or "ask").lower())
    if word is None:
        raise InputError(f"{_config_name(options)}: StrictHostKeyChecking {value!r} is not one of "
                         "yes, no, accept-new, ask; fix: correct the ssh config file")
    return word


def _parse_port(text: str, options: SshOptions) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise InputError(f"{_config_name(options)}: Port {text!r} is not a number from 1 to 65535; "
                         "fix: correct the ssh config file")
    return int(text)


def _parse_seconds(text: str, options: SshOptions) -> float:
    """An ssh_config time (``30``, ``1m30s``) in seconds."""
    parts = re.findall(r"(\d+)([smhdwSMHDW]?)", text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise InputError(f"{_config_name(options)}: ConnectTimeout {text!r} is not a time such as 30 or 1m30s; "
                         "fix: correct the ssh config file")
    return float(sum(int(number) * _TIME_UNITS_S[unit.lower()] for number, unit in parts))
