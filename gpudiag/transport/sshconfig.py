"""OpenSSH client configuration for each host, resolved the way ``ssh`` itself would.

With the ``ssh`` binary present, ``ssh -G`` is the authority: it evaluates ``Host``/``Match`` blocks,
``Include`` and every token exactly as a later ``ssh`` would. Without it, ``paramiko.SSHConfig`` reads
the same file with the same precedence (it does not follow ``Include``, and where a host gets both a
ProxyJump and a ProxyCommand the ProxyJump wins, whichever came first); gpudiag expands the tokens of
``IdentityFile``, ``UserKnownHostsFile`` and ``ProxyCommand`` itself, with the final user and port.

Precedence, as in ssh: ``user@``/``:port`` from the hosts file, then ``-l``/``--user``, then the config
file, then ssh's defaults. ``-i`` files come before the config's ``IdentityFile`` lines, and
``--known-hosts`` replaces ``UserKnownHostsFile`` (not ``GlobalKnownHostsFile``, as ``-o UserKnownHostsFile``
would not). ``~`` and ``%d`` are the home directory of the password database, as ssh takes it, never ``$HOME``.

A configuration that ssh rejects for one host (a token it cannot expand there, a bad value in that host's
block for the fallback) is that host's ``ConfigProblem`` (``resolve_all``); only a file that cannot be read
or parsed, or one that fails every host the same way, stops the sweep before it starts.

ProxyCommand and ProxyJump are kept as written: each is turned into a connection when that host is
reached (``proxy_command_line``, ``resolve_jump_host``; ``transport/jump.py`` reads ProxyJump entries), so a
host whose value cannot be used is that host's failure (``ProxySettingError``), not the sweep's.

Host and user names are checked as OpenSSH 9.6+ checks those of its command line (``hosts.host_name_problem``),
wherever they come from: ``-l``/``--user`` before anything runs (an InputError), the name given before ``ssh -G``
sees it (its ``Match exec`` runs a shell), and the HostName and User that the config gives a host after it is
resolved (OpenSSH itself takes those unchecked, and they reach a ProxyCommand's ``%h``/``%r``): a bad one is that
host's ``ConfigProblem``. ``proxy_command_line`` checks again what it expands.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import paramiko
from paramiko.config import SSHConfig

from ..errors import InputError
from ..hosts import FIX_HOST_NAME, FIX_USER_NAME, HostSpec, host_name_problem, user_name_problem
from .fdlimit import children_at_once
from .groupproc import run_grouped
from .sshpaths import (
    DEFAULT_GLOBAL_KNOWN_HOSTS_FILES,
    expand_home,
    global_known_hosts_files,
    home_directory,
    known_hosts_files,
    local_user,
    shared_paths,
)

SSH_G_TIMEOUT_S = 10.0
RESOLVE_WORKERS = 16
# Hosts handed to the resolving pool at once (each a future until it is resolved).
RESOLVE_CHUNK = 1024
DEFAULT_PORT = 22
# What the fallback tries without any IdentityFile: the key types paramiko can load, in ssh's order
# of preference among them.
DEFAULT_IDENTITY_FILES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
USER_CONFIG_FILE = "~/.ssh/config"
SYSTEM_CONFIG_FILE = "/etc/ssh/ssh_config"
FIX_CONFIG = "correct the ssh config file"

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


@dataclass(frozen=True, slots=True)
class ResolvedHost:
    """Everything needed to open an SSH connection to one host.

    ``identity_files`` and ``known_hosts_files`` are tilde-expanded and may name files that do not
    exist (the transport tries those that do). ``proxy_jump`` is the raw ProxyJump value (jump hosts
    separated by commas), None for none. ``proxy_command`` is the raw ProxyCommand, tokens not yet
    expanded (``proxy_command_line``), None for none or where a ProxyJump takes precedence.
    ``original_host`` is the name as given (ssh's ``%n``). ``strict_host_key_checking`` is ``yes``,
    ``no``, ``accept-new`` or ``ask``. ``global_known_hosts_files`` (GlobalKnownHostsFile, tilde-expanded,
    never written) are checked after ``known_hosts_files``; ``known_hosts_command`` is the raw
    KnownHostsCommand, its tokens expanded when the host key is checked (``transport/hostkeycommand.py``).
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
    proxy_command: str | None = None
    original_host: str = ""
    global_known_hosts_files: tuple[str, ...] = DEFAULT_GLOBAL_KNOWN_HOSTS_FILES
    known_hosts_command: str | None = None


class ProxySettingError(ValueError):
    """A ProxyJump or ProxyCommand value that cannot be used; the message names it and the fix."""


class HostConfigError(InputError):
    """The ssh configuration cannot be applied to one host; other hosts may be fine.

    ``where`` is the config file (``FILE:LINE`` where the line is known), ``reason`` what is wrong without
    naming the host (the same text for every host when the whole file is at fault), ``fix`` what to do.
    """

    def __init__(self, where: str, host: str, reason: str, fix: str = FIX_CONFIG) -> None:
        super().__init__(f"{where}: {reason} (for host {host}); fix: {fix}")
        self.where = where
        self.reason = reason
        self.fix = fix


class _BadSetting(ValueError):
    """A value ``keyword value`` that ssh (or gpudiag, for a name) would refuse; ``problem`` says why, without
    the host; ``fix`` what to do."""

    def __init__(self, keyword: str, value: str, problem: str, fix: str = FIX_CONFIG) -> None:
        super().__init__(f"{keyword} {value!r} {problem}")
        self.keyword = keyword
        self.value = value
        self.fix = fix


@dataclass(frozen=True)
class ConfigProblem:
    """A host whose SSH settings could not be resolved. ``message`` names the config file, the line where it
    is known, and the fix; the sweep reports the host ``unreachable`` with it."""

    label: str
    message: str


@dataclass(frozen=True)
class ResolvedFleet:
    """The SSH settings of a sweep's hosts, by label in input order: ``hosts`` those resolved, ``problems``
    those whose configuration ssh (or the fallback) rejects."""

    hosts: Mapping[str, ResolvedHost]
    problems: Mapping[str, ConfigProblem]


@dataclass(frozen=True)
class _RawConfig:
    """A host's settings as the config source gave them, before gpudiag's options are applied."""

    hostname: str
    user: str
    port: int
    identity_files: tuple[str, ...]
    proxy_jump: str | None
    proxy_command: str | None
    connect_timeout: str | None
    known_hosts_files: tuple[str, ...]
    strict_host_key_checking: str
    global_known_hosts_files: tuple[str, ...]
    known_hosts_command: str | None


def resolve_host(spec: HostSpec, options: SshOptions, ssh_binary: str | None = "ssh") -> ResolvedHost:
    """The connection settings of one host.

    ``ssh_binary`` is the ssh client to ask (``ssh -G``), looked up on PATH when it is a bare name;
    None, or a binary that cannot be found, uses the paramiko fallback.

    Raises:
        InputError: the config file cannot be read or parsed as a whole.
        HostConfigError: ssh rejects the configuration for this host, or a value in it (the message names
            the file, the line where it is known, and carries ssh's own words).
    """
    return _resolve(spec, options, None, ssh_binary)


def resolve_jump_host(hop: HostSpec, options: SshOptions, via: str | None, ssh_binary: str | None = "ssh"
                      ) -> ResolvedHost:
    """The connection settings of a jump host, as the ``ssh -W`` that ssh starts for it would see them.

    ``hop`` carries the jump host's own ``user@``/``:port``; ``-l``/``--user`` is for the nodes and does not
    apply (ssh passes neither ``-l`` nor the target's options on to its jump hosts). ``via`` is the rest
    of a ``ProxyJump a,b`` chain in front of this hop (``a`` when resolving ``b``): it replaces the hop's
    own ProxyJump and ProxyCommand, as ``ssh -J`` does; None keeps the hop's own configuration.

    Raises:
        InputError: as ``resolve_host`` (ssh also rejects a malformed ``via``).
    """
    return _resolve(hop, dataclasses.replace(options, user=None), via, ssh_binary)


def _resolve(spec: HostSpec, options: SshOptions, via: str | None, ssh_binary: str | None) -> ResolvedHost:
    _check_given_names(spec, options)
    binary = shutil.which(ssh_binary) if ssh_binary else None
    try:
        if binary is None:
            raw = _lookup_paramiko(spec, options)
            if via is not None:
                raw = dataclasses.replace(raw, proxy_jump=_none_is_none(via), proxy_command=None)
        else:
            raw = _lookup_ssh(binary, spec, options, via)
        return _apply_options(spec, options, _checked_names(raw))
    except _BadSetting as bad:
        raise HostConfigError(_setting_where(options, bad), spec.host, str(bad), bad.fix) from None


def _check_given_names(spec: HostSpec, options: SshOptions) -> None:
    """Raises HostConfigError when the host or user name given for ``spec`` is one ssh would refuse: it must
    not reach ``ssh -G`` (whose ``Match exec`` expands it into a shell command) nor a ProxyCommand. The hosts
    file, ``-l`` and ProxyJump entries are checked where they are read; this is the last guard."""
    problem = host_name_problem(spec.host)
    if problem is not None:
        raise HostConfigError(_config_name(options), spec.host, f"host name {spec.host!r} {problem}", FIX_HOST_NAME)
    for user in (spec.user, options.user):
        problem = user_name_problem(user) if user is not None else None
        if problem is not None:
            raise HostConfigError(_config_name(options), spec.host, f"user name {user!r} {problem}", FIX_USER_NAME)


def _checked_names(raw: _RawConfig) -> _RawConfig:
    """``raw`` when its HostName and User are names ssh would take on its command line; raises _BadSetting
    (the config gave them, or a token such as ``%h`` in HostName brought them in)."""
    problem = host_name_problem(raw.hostname)
    if problem is not None:
        raise _BadSetting("HostName", raw.hostname, problem, f"correct the ssh config ({FIX_HOST_NAME})")
    problem = user_name_problem(raw.user)
    if problem is not None:
        raise _BadSetting("User", raw.user, problem, f"correct the ssh config ({FIX_USER_NAME})")
    return raw


def resolve_all(specs: Iterable[HostSpec], options: SshOptions, ssh_binary: str | None = "ssh") -> ResolvedFleet:
    """``resolve_host`` for every spec: one host's bad configuration is that host's ``ConfigProblem``.

    Hosts with the same host, user and port are resolved once. ``ssh -G`` runs in a pool of
    ``RESOLVE_WORKERS`` threads, since one process start per host adds up over a 1,000-node fleet.

    Raises:
        InputError: the config file cannot be read or parsed (once, before the pool starts), or every host
            fails for one and the same reason (a broken file, not a host's block): the message names the
            file, the line where it is known, and the fix.
    """
    unique = list(dict.fromkeys(specs))
    if not unique:
        return ResolvedFleet({}, {})
    _check_user_option(options.user)
    _check_readable(options.config_file)
    binary = shutil.which(ssh_binary) if ssh_binary else None

    def resolve_one(spec: HostSpec) -> ResolvedHost | HostConfigError:
        try:
            return resolve_host(spec, options, binary)
        except HostConfigError as error:
            return error

    # The first host alone: a file that cannot be parsed then fails once, not once per host in the pool.
    outcomes = [resolve_one(unique[0])]
    if len(unique) > 1:
        # Each `ssh -G` child holds three pipes: as many at once as the open-file limit allows.
        with ThreadPoolExecutor(max_workers=children_at_once(min(RESOLVE_WORKERS, len(unique) - 1))) as pool:
            # a chunk at a time: a future per host of a 100,000-host fleet at once took 200 MiB
            for start in range(1, len(unique), RESOLVE_CHUNK):
                outcomes += pool.map(resolve_one, unique[start:start + RESOLVE_CHUNK])
    errors = [outcome for outcome in outcomes if isinstance(outcome, HostConfigError)]
    if len(errors) == len(unique) and len({error.reason for error in errors}) == 1:
        raise InputError(f"{errors[0].where}: {errors[0].reason} (for every host); fix: {errors[0].fix}")
    hosts = {spec.label: outcome for spec, outcome in zip(unique, outcomes, strict=True)
             if isinstance(outcome, ResolvedHost)}
    problems = {spec.label: ConfigProblem(spec.label, str(outcome))
                for spec, outcome in zip(unique, outcomes, strict=True) if isinstance(outcome, HostConfigError)}
    return ResolvedFleet(hosts, problems)


def _apply_options(spec: HostSpec, options: SshOptions, raw: _RawConfig) -> ResolvedHost:
    explicit = tuple(expand_home(path) for path in options.identity_files)
    identities = explicit + tuple(path for path in raw.identity_files if path not in explicit)
    if options.known_hosts is not None:
        known_hosts: tuple[str, ...] = (expand_home(options.known_hosts),)
    else:
        known_hosts = raw.known_hosts_files
    timeout_s = options.connect_timeout_s
    if raw.connect_timeout is not None:
        timeout_s = _parse_seconds(raw.connect_timeout)
    # (the strings every host has alike, and its own name, are shared rather than one copy a host)
    return ResolvedHost(label=spec.label, hostname=spec.host if raw.hostname == spec.host else raw.hostname,
                        user=sys.intern(raw.user), port=raw.port, identity_files=shared_paths(identities),
                        proxy_jump=raw.proxy_jump, connect_timeout_s=timeout_s,
                        known_hosts_files=shared_paths(known_hosts),
                        strict_host_key_checking=sys.intern(raw.strict_host_key_checking),
                        proxy_command=raw.proxy_command, original_host=spec.host,
                        global_known_hosts_files=shared_paths(raw.global_known_hosts_files),
                        known_hosts_command=raw.known_hosts_command)


def _config_name(options: SshOptions) -> str:
    return options.config_file or USER_CONFIG_FILE


def _config_where(options: SshOptions, pattern: re.Pattern[str] | None) -> str:
    """``FILE:LINE`` of the first line of the config that ``pattern`` finds (``--ssh-config``, else the user's
    then the system's file), or the config's name when no line is found. Include is not followed."""
    paths = [options.config_file] if options.config_file else [expand_home(USER_CONFIG_FILE), SYSTEM_CONFIG_FILE]
    for path in paths if pattern is not None else ():
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                for number, line in enumerate(handle, start=1):
                    if not line.lstrip().startswith("#") and pattern.search(line):
                        return f"{path}:{number}"
        except OSError:
            continue  # a file that cannot be read holds no line to point at
    return _config_name(options)


def _setting_where(options: SshOptions, bad: _BadSetting) -> str:
    """``FILE:LINE`` of the line that set ``bad``'s value: as written (the fallback's values), else with each
    ``%`` written ``%%`` (ssh -G prints HostName expanded); the config's name when neither is found."""
    where = _config_where(options, _setting_line_pattern(bad.keyword, re.escape(bad.value)))
    if where == _config_name(options) and "%" in bad.value:
        where = _config_where(options, _setting_line_pattern(bad.keyword, re.escape(bad.value).replace("%", "%%")))
    return where


def _setting_line_pattern(keyword: str, value_pattern: str) -> re.Pattern[str]:
    """A config line that sets ``keyword`` to what ``value_pattern`` matches (``Port 99999``, ``Port=99999``,
    quoted or not), without regard to case: ssh -G prints a HostName lowercased."""
    return re.compile(rf"^\s*{re.escape(keyword)}(\s*=\s*|\s+)\"?{value_pattern}\"?\s*$", re.IGNORECASE)


def _ssh_message_pattern(message: str) -> re.Pattern[str] | None:
    """Where to look for the cause of an ssh -G failure that names no line: the unknown token it names."""
    if re.search(r"\bline \d+\b", message):
        return None  # ssh named the file and line itself
    token = re.search(r"unknown key (%\S)", message)
    # the token itself, not a "%%" followed by its letter: fe80::1%%eth0 is not the line of an unknown %e
    return re.compile(r"(?<!%)(?:%%)*" + re.escape(token.group(1))) if token else None


def _check_user_option(user: str | None) -> None:
    """Raises InputError when ``-l``/``--user`` is a name ssh would refuse (it would fail every host)."""
    problem = user_name_problem(user) if user is not None else None
    if problem is not None:
        raise InputError(f"-l/--user {user!r} {problem}; fix: {FIX_USER_NAME}")


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


def _lookup_ssh(binary: str, spec: HostSpec, options: SshOptions, via: str | None) -> _RawConfig:
    _check_readable(options.config_file)
    command = _ssh_g_command(binary, spec, options, via)
    try:
        completed = run_grouped(command, SSH_G_TIMEOUT_S)  # a Match exec command ends with it
    except subprocess.TimeoutExpired:
        raise HostConfigError(_config_name(options), spec.host, f"'ssh -G' took more than {SSH_G_TIMEOUT_S:g} s",
                              "check Match exec lines in the ssh config") from None
    if completed.returncode != 0:
        message = _ssh_message(completed.stderr)
        raise HostConfigError(_config_where(options, _ssh_message_pattern(message)), spec.host,
                              f"ssh rejects the configuration: {message}")
    values = parse_ssh_g(completed.stdout)
    return _raw_from_ssh_g(values, spec, options)


def _ssh_g_command(binary: str, spec: HostSpec, options: SshOptions, via: str | None) -> list[str]:
    command = [binary, "-G"]
    if options.config_file is not None:
        command += ["-F", options.config_file]
    if via is not None:
        command += ["-J", via]
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
    user = first("user") or local_user()
    port = _parse_port(first("port") or str(DEFAULT_PORT))
    tokens = _path_tokens(hostname, port, user, spec.host)
    # ssh -G prints IdentityFile as written but UserKnownHostsFile already expanded (with the
    # password database's home): expanding that again would misread a "%" that %% left in it.
    identities = tuple(_expand_tokens(path, tokens) for path in values.get("identityfile", ()))
    known_hosts = first("userknownhostsfile")
    timeout = first("connecttimeout")
    jump = _none_is_none(first("proxyjump"))
    return _RawConfig(hostname=hostname, user=user, port=port, identity_files=identities, proxy_jump=jump,
                      proxy_command=None if jump else _none_is_none(first("proxycommand")),
                      connect_timeout=None if timeout in (None, "none") else timeout,
                      known_hosts_files=known_hosts_files(known_hosts.split() if known_hosts else None),
                      strict_host_key_checking=_strict(first("stricthostkeychecking")),
                      global_known_hosts_files=global_known_hosts_files(first("globalknownhostsfile")),
                      known_hosts_command=_none_is_none(first("knownhostscommand")))


def _ssh_message(stderr: str) -> str:
    # ssh -G also warns about a missing -i file or a non-terminal stdin: noise, not the cause.
    noise = ("Pseudo-terminal will not be allocated", "Warning: Identity file")
    lines = [line.strip() for line in stderr.splitlines() if line.strip() and not line.startswith(noise)]
    return " / ".join(lines) or "no message"


def _path_tokens(hostname: str, port: int, user: str, original_host: str) -> dict[str, str]:
    """The tokens ssh expands in IdentityFile and UserKnownHostsFile that gpudiag can know."""
    return {"%%": "%", "%d": home_directory(), "%u": local_user(), "%h": hostname, "%p": str(port),
            "%r": user, "%n": original_host, "%i": str(os.getuid())}


def _expand_tokens(path: str, tokens: Mapping[str, str]) -> str:
    # "~" first, as ssh does: a "~" that a token brings in is left alone.
    return re.sub(r"%.", lambda match: tokens.get(match.group(0), match.group(0)), expand_home(path))


# --- ProxyCommand values ------------------------------------------------------------------------


def proxy_command_line(host: ResolvedHost) -> str:
    """``host.proxy_command`` with ``%%``, ``%h`` (HostName), ``%n`` (the name as given), ``%p`` and ``%r``
    expanded as ssh does. Raises ProxySettingError for another token or a lone ``%`` at the end
    (ssh refuses both); ValueError if the host has no ProxyCommand."""
    command = host.proxy_command
    if command is None:
        raise ValueError(f"{host.label} has no ProxyCommand")
    values = {"%": "%", "h": host.hostname, "n": host.original_host or host.hostname, "p": str(host.port),
              "r": host.user}
    pieces: list[str] = []
    position = 0
    for match in re.finditer(r"%(.?)", command, flags=re.DOTALL):
        token = match.group(1)
        if token not in values:
            what = f"%{token} is not a token ssh expands there (only %%, %h, %n, %p, %r)" if token else \
                "it ends with a lone %"
            raise ProxySettingError(f"ProxyCommand {command!r} of {host.label}: {what}; "
                                    "fix: write %% for a literal % in the ssh config")
        _check_expanded(host, token, values[token])
        pieces += [command[position:match.start()], values[token]]
        position = match.end()
    return "".join(pieces) + command[position:]


def _check_expanded(host: ResolvedHost, token: str, value: str) -> None:
    """Raises ProxySettingError when ``%token`` would bring a name ssh refuses into the shell command."""
    problem = user_name_problem(value) if token == "r" else host_name_problem(value) if token in ("h", "n") else None
    if problem is not None:
        what = "user name" if token == "r" else "host name"
        raise ProxySettingError(f"ProxyCommand {host.proxy_command!r} of {host.label}: %{token} would be the {what} "
                                f"{value!r}, which {problem}, and is never passed to a shell; "
                                f"fix: {FIX_USER_NAME if token == 'r' else FIX_HOST_NAME}")


# --- paramiko fallback ----------------------------------------------------------------------------


class _UnexpandedSSHConfig(SSHConfig):
    """paramiko's parser leaving HostName, IdentityFile, ProxyCommand and ProxyJump as written: paramiko would
    expand their tokens with the config's User and Port instead of the final ones, ``~`` with
    ``$HOME``, ``%`` in an IPv6 scope (``[fe80::1%eth0]``) as a token, and leave ``%%`` and unknown
    tokens in HostName. gpudiag expands them as ssh does."""

    TOKENS_BY_CONFIG_KEY = {key: tokens for key, tokens in SSHConfig.TOKENS_BY_CONFIG_KEY.items()
                            if key not in ("hostname", "identityfile", "proxycommand", "proxyjump")}


def _lookup_paramiko(spec: HostSpec, options: SshOptions) -> _RawConfig:
    config = _read_paramiko_config(options)
    found = config.lookup(spec.host)
    # paramiko puts the name given in place of a missing HostName: that one is no template
    written = found.get("hostname", spec.host)
    hostname = _ssh_lowercase(spec.host if written == spec.host else _expand_host_name(written, spec.host))
    user = spec.user or options.user or found.get("user") or local_user()
    port = spec.port or _parse_port(found.get("port", str(DEFAULT_PORT)))
    tokens = _path_tokens(hostname, port, user, spec.host)
    from_config = tuple(_expand_tokens(path, tokens) for path in found.get("identityfile", ()))
    # As ssh: the defaults only when neither the config nor an existing -i file names a key.
    has_explicit = any(os.path.isfile(expand_home(path)) for path in options.identity_files)
    defaults = () if from_config or has_explicit else tuple(expand_home(p) for p in DEFAULT_IDENTITY_FILES)
    # Which of the two came first in the file, as ssh decides, paramiko does not say: a jump host wins.
    jump = _none_is_none(found.get("proxyjump"))
    known_hosts = found.get("userknownhostsfile")
    return _RawConfig(hostname=hostname, user=user, port=port, identity_files=from_config + defaults,
                      proxy_jump=jump, proxy_command=None if jump else _none_is_none(found.get("proxycommand")),
                      connect_timeout=found.get("connecttimeout"),
                      known_hosts_files=known_hosts_files(
                          [_expand_tokens(path, tokens) for path in known_hosts.split()] if known_hosts else None),
                      strict_host_key_checking=_strict(found.get("stricthostkeychecking")),
                      global_known_hosts_files=global_known_hosts_files(found.get("globalknownhostsfile")),
                      known_hosts_command=_none_is_none(found.get("knownhostscommand")))


def _expand_host_name(value: str, given: str) -> str:
    """A HostName value as ssh expands it (ssh.c: ``percent_expand(hostname, "h", host)``): ``%h`` is the
    name given, ``%%`` a ``%``. Raises _BadSetting for another token, as ssh fails there (an IPv6 scope is
    written ``fe80::1%%eth0``)."""
    def replace(match: re.Match[str]) -> str:
        token = match.group(1)
        if token not in ("h", "%"):
            raise _BadSetting("HostName", value, f"has %{token}, a token ssh does not expand there (only %h and "
                              "%%)" if token else "ends with a lone %")
        return given if token == "h" else "%"

    return re.sub(r"%(.?)", replace, value, flags=re.DOTALL)


def _ssh_lowercase(hostname: str) -> str:
    """``hostname`` lowercased as ssh lowercases it: a name, but not an address (ssh.c leaves a name with
    ``%`` or ``:``, or of digits and dots only, as it is: an IPv6 scope such as ``%ETH0`` is case-sensitive)."""
    if "%" in hostname or ":" in hostname or not hostname.strip("0123456789."):
        return hostname
    return hostname.lower()


def _read_paramiko_config(options: SshOptions) -> paramiko.SSHConfig:
    path = options.config_file or expand_home(USER_CONFIG_FILE)
    if options.config_file is None and not os.path.isfile(path):
        return _UnexpandedSSHConfig()
    try:
        return _UnexpandedSSHConfig.from_path(path)
    except OSError as exc:
        raise InputError(f"--ssh-config {path}: cannot read it ({exc.strerror}); "
                         "fix: check the path and its permissions") from None
    except paramiko.ssh_exception.ConfigParseError as exc:
        raise InputError(f"{path}: {exc}; fix: correct the ssh config file") from None


# --- values shared by both sources ----------------------------------------------------------------


def _none_is_none(value: str | None) -> str | None:
    """A command-like setting (ProxyJump, ProxyCommand, KnownHostsCommand): None where unset or ``none``."""
    return None if value is None or value.lower() == "none" else value


def _strict(value: str | None) -> str:
    """StrictHostKeyChecking in the words of ssh_config(5). Raises _BadSetting."""
    word = _STRICT_WORDS.get((value or "ask").lower())
    if word is None:
        raise _BadSetting("StrictHostKeyChecking", value or "", "is not one of yes, no, accept-new, ask")
    return word


def _parse_port(text: str) -> int:
    """A Port value. Raises _BadSetting."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise _BadSetting("Port", text, "is not a number from 1 to 65535")
    return int(text)


def _parse_seconds(text: str) -> float:
    """An ssh_config time (``30``, ``1m30s``) in seconds. Raises _BadSetting."""
    parts = re.findall(r"(\d+)([smhdwSMHDW]?)", text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise _BadSetting("ConnectTimeout", text, "is not a time such as 30 or 1m30s")
    return float(sum(int(number) * _TIME_UNITS_S[unit.lower()] for number, unit in parts))
