"""Host lists for ``gpudiag sweep --hosts``: a file, ``-`` (stdin) or an inline ClusterShell node set.

One entry is ``[user@]pattern[:port]``, where ``pattern`` is a host name or a ClusterShell node set
(``node[001-128,130]``, ``node1,node2``, ``gpu[01-64]!gpu07``). ``user@`` and ``:port`` apply to every
host the pattern expands to. An IPv6 literal is written in brackets with an optional port
(``[::1]:2222``) or bare without one (``::1``); it is one host, never a range. ClusterShell ``@group``
names are not supported, so no groups configuration is ever read.

Hosts keep the order they were given in; a host given twice (same label, see ``HostSpec.label``,
compared without regard to case as DNS does) is kept at its first place with its first spelling and user.

Host and user names are checked as OpenSSH 9.6 and later check those of its command line (ssh.c's
``valid_hostname`` and ``valid_ruser``), from every source: a name reaches a ProxyCommand's ``%h``/``%r``
through a shell, so a shell metacharacter, whitespace or a control character in it (an IPv6 scope id
``%$(cmd)`` included) is refused before it gets there (``host_name_problem``, ``user_name_problem``).
"""

from __future__ import annotations

import codecs
import ipaddress
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TextIO

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetParseError

from ..errors import InputError
from .fold import fold_labels

STDIN_NAME = "<stdin>"

# Guards against a typo such as node[1-10000000] eating the controller's memory: ClusterShell builds
# every range eagerly. Far above any real fleet.
MAX_HOSTS = 100_000
# The longest host set one entry may be: far above any real one, and short enough that checking it
# costs nothing.
MAX_PATTERN_CHARS = 65_536

# The longest host name and DNS label: DNS's (RFC 1035), below OpenSSH's 1,025 bytes; a longer one
# resolves nowhere (Python's IDNA codec refuses it) and could only make a process's argv too long.
MAX_HOST_NAME_CHARS = 253
MAX_LABEL_CHARS = 63

_HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_USER_NAME = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.@$-]*")
_FOLDABLE_LABEL = re.compile(r"[A-Za-z0-9._-]+(:[0-9]+)?")
_BRACKET_RANGE = re.compile(r"(\d+)\s*-\s*(\d+)(?:\s*/\s*(\d+))?")
_SET_OPERATORS = frozenset("!&^")
# A bare argument that ends like a file name is a missing file, not a host called "hosts.txt".
_FILE_SUFFIXES = (".txt", ".list", ".lst", ".hosts", ".conf", ".cfg", ".csv")
# Open MPI / DeepSpeed hostfile fields ("node1 slots=8 max_slots=16").
_MPI_FIELDS = frozenset({"slots", "max_slots", "max-slots"})
_BOM = "\ufeff"
ACCEPTED_FORMATS = ("one entry per line: [user@]host[:port] or a host set such as node[01-64], "
                    "optionally followed by net=ADDRESS")
# What OpenSSH >= 9.6 refuses in a host name (ssh.c valid_hostname; ',' since 10.0) and in a user name
# (valid_ruser): the characters a shell acts on where the name is expanded into a ProxyCommand.
_HOST_NAME_FORBIDDEN = frozenset("'`\"$\\;&<>|(){},")
_USER_NAME_FORBIDDEN = frozenset("'`\";&<>|(){}")
# The fix for a refused name, after "fix: ".
FIX_HOST_NAME = "use letters, digits, '.', '-', '_' and ':' only (an IPv6 scope as %eth0)"
FIX_USER_NAME = "use letters, digits, '.', '_' and '-' only"
FIX_LONG_HOST_NAME = "name each host as DNS or your SSH config does (at most 253 characters, 63 between dots)"
# How much of a bad name or entry an error message quotes: a 200,000-character one is cut.
SHOWN_CHARS = 80


@dataclass(frozen=True, slots=True)
class HostSpec:
    """One host as the user gave it.

    ``host`` is the name without user or port (an IPv6 literal without its brackets); ``user`` and
    ``port`` are None where the entry did not give them, so the ssh config decides.
    ``net_address`` is the host's data-plane address for pair tests (the hosts file's ``net=``
    field), None where the file gives none.
    """

    host: str
    user: str | None = None
    port: int | None = None
    net_address: str | None = field(default=None, compare=False)
    # The host's identity in results: ``host``, or ``host:port`` when a port was given (made once:
    # every table keyed by host shares the one string).
    label: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.port is None:
            label = self.host
        elif ":" in self.host:
            label = f"[{self.host}]:{self.port}"
        else:
            label = f"{self.host}:{self.port}"
        object.__setattr__(self, "label", label)

    @property
    def is_local(self) -> bool:
        """True for a plain ``localhost``: this machine, probed without SSH.

        ``localhost`` with a user or port means an sshd on this machine, and 127.0.0.1/::1 are always
        reached over SSH (test hosts listen there).
        """
        return self.host.lower() == "localhost" and self.user is None and self.port is None


def shown(text: str) -> str:
    """``text`` quoted for an error message, cut to its first SHOWN_CHARS characters (saying how
    long it was) where it is longer."""
    if len(text) <= SHOWN_CHARS:
        return repr(text)
    return f"{text[:SHOWN_CHARS]!r}… ({len(text)} characters)"


def host_name_problem(name: str) -> str | None:
    """Why OpenSSH (9.6 and later) would refuse ``name`` as a host name, as words that follow the name
    (``"contains '$', ..."``); None when it would take it.

    Refused as ssh refuses them: an empty name, a leading ``-`` (read as an option), a shell metacharacter
    (any of ``'"`$\\;&<>|(){},``), whitespace and control characters; also any other character that is not
    printable (a Unicode line separator), and a name longer than DNS allows (253 characters, 63 between
    dots; an IPv6 literal is not split at dots).
    """
    if not name:
        return "is empty"
    if len(name) > MAX_HOST_NAME_CHARS:
        return f"is {len(name)} characters long, more than a host name's {MAX_HOST_NAME_CHARS}"
    if name.startswith("-"):
        return "starts with '-', which ssh would read as an option"
    if ":" not in name and any(len(label) > MAX_LABEL_CHARS for label in name.split(".")):
        return f"has a part between dots longer than {MAX_LABEL_CHARS} characters, which no DNS name has"
    return _bad_character(name, "a host name", _HOST_NAME_FORBIDDEN, forbid_space=True)


def user_name_problem(name: str) -> str | None:
    """Why OpenSSH (9.6 and later) would refuse ``name`` as a remote user name, as words that follow the
    name; None when it would take it. Refused: empty, a ``-`` at the start or after whitespace, a ``\\`` at
    the end, a shell metacharacter (as in a host name, but ``$``, ``\\`` and ``,`` are allowed), a control or
    other unprintable character."""
    if not name:
        return "is empty"
    if name.startswith("-") or re.search(r"\s-", name):
        return "has a '-' at its start or after a space, which ssh would read as an option"
    if name.endswith("\\"):
        return "ends with '\\'"
    return _bad_character(name, "a user name", _USER_NAME_FORBIDDEN, forbid_space=False)


def _bad_character(name: str, where: str, forbidden: frozenset[str], forbid_space: bool) -> str | None:
    for character in name:
        if character in forbidden:
            return f"contains {character!r}, a shell metacharacter that ssh refuses in {where}"
        if character.isspace() and forbid_space:
            return f"contains whitespace ({character!r})"
        if not character.isprintable():  # a space is printable: a user name may hold one, as for ssh
            return f"contains the unprintable character {character!r}"
    return None


class _BadEntry(ValueError):
    """An entry that cannot be used; carries the problem and its fix for InputError."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix


def load_hosts(argument: str, stdin: TextIO) -> list[HostSpec]:
    """The hosts named by ``--hosts ARGUMENT``, in the order given, duplicates folded.

    ``argument`` is ``-`` (read ``stdin``), the path of an existing file, or an inline entry such as
    ``gpu[01-64]``, ``node[1-64/2]``, ``alice@node[1-4]:2222`` or ``alice@node1,bob@node2`` (each
    comma-separated part with its own user and port). An argument that names no existing
    path is a file only where it looks like one (a ``/`` outside brackets, or a suffix such as
    ``.txt``); anything else is read as a host set. Files and stdin hold one entry per line (UTF-8,
    with or without a byte-order mark), with blank lines and ``#`` comments (whole-line or trailing).

    Raises:
        InputError: a bad line (``path:line: problem; fix: ...``), a missing or unreadable file, an
            argument that is neither a file nor a valid host set, or no hosts at all.
    """
    if argument == "-":
        return _nonempty(_load_lines(stdin, STDIN_NAME), STDIN_NAME)
    if os.path.isfile(argument):
        return _nonempty(_load_file(argument), argument)
    if os.path.exists(argument):
        raise InputError(f"--hosts {argument}: not a regular file; fix: pass a hosts file, '-' or a host set")
    if _looks_like_path(argument):
        raise InputError(f"--hosts {argument}: no such hosts file; fix: check the path "
                         "(a host set has no '/' outside its brackets, e.g. node[1-64/2])")
    try:
        specs = _dedupe(_parse_entry(argument.strip()))
    except _BadEntry as exc:
        raise InputError(f"--hosts {shown(argument)} is neither a hosts file nor a valid host set: "
                         f"{exc.problem}; {exc.fix}") from None
    return _nonempty(specs, repr(argument))


def fold_hosts(labels: Iterable[str]) -> str:
    """Labels folded into node-set form, e.g. ``node[001-062,064]`` (gpudiag.hostfold).

    Deterministic: the same set of labels always folds to the same text, whatever their order. Labels
    that a node set cannot hold (IPv6 literals) follow the folded part, sorted, comma-separated.
    Returns an empty string for no labels.
    """
    foldable: list[str] = []
    others: set[str] = set()
    for label in labels:
        if _FOLDABLE_LABEL.fullmatch(label):
            foldable.append(label)
        else:
            others.add(label)
    parts = [fold_labels(foldable)] if foldable else []
    return ",".join(parts + sorted(others))


def hosts_named(text: str | None, names: set[str]) -> set[str]:
    """Which of ``names`` a finding's host (or peer) names: the host itself, or each host of a
    folded set (``n[1-4]``, ``a,b``)."""
    if not text:
        return set()
    if text in names:
        return {text}
    try:
        members = {str(node) for node in NodeSet(text, resolver=RESOLVER_NOGROUP)}
    except NodeSetParseError:
        members = set(text.split(","))
    return members & names


def _looks_like_path(argument: str) -> bool:
    """True where ``argument`` reads as a path: a ``/`` outside brackets (``node[1-64/2]`` is a step
    range), or a file-name suffix such as ``.txt``."""
    depth = 0
    for character in argument:
        depth += {"[": 1, "]": -1}.get(character, 0)
        if character in ("/", os.sep) and depth <= 0:
            return True
    return argument.lower().endswith(_FILE_SUFFIXES)


def _load_file(path: str) -> list[HostSpec]:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the hosts file ({exc.strerror}); fix: check its permissions") from None
    return _load_lines(_decode(data, path).splitlines(), path)


def _decode(data: bytes, path: str) -> str:
    """The text of a hosts file's bytes; raises InputError naming the line that is not UTF-8."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise InputError(f"{path}: UTF-16 text, not UTF-8; fix: save it as UTF-8 (iconv -f UTF-16 -t UTF-8)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_number = data.count(b"\n", 0, exc.start) + 1
        raise InputError.at_line(path, line_number, f"not UTF-8 text (byte {data[exc.start]:#04x})",
                                 "fix: save the file as UTF-8, one host per line") from None


def _load_lines(lines: Iterable[str], source: str) -> list[HostSpec]:
    specs: list[HostSpec] = []
    for line_number, line in enumerate(lines, start=1):
        # Windows editors start a UTF-8 file with a byte-order mark; it is not part of the first host.
        words = line.removeprefix(_BOM).split("#", 1)[0].split()
        if not words:
            continue
        entry, *fields = words
        try:
            _check_fields(entry, fields)
            specs.extend(_with_fields(_parse_entry(entry), fields))
        except _BadEntry as exc:
            raise InputError.at_line(source, line_number, exc.problem, exc.fix) from None
        if len(specs) > MAX_HOSTS:
            raise InputError.at_line(source, line_number, f"more than {MAX_HOSTS} hosts in all",
                                     "fix: split the fleet into several sweeps")
    return _dedupe(specs)


def _nonempty(specs: list[HostSpec], source: str) -> list[HostSpec]:
    if not specs:
        raise InputError(f"no hosts in {source}; fix: give at least one host, e.g. node[001-004]")
    return specs


def _dedupe(specs: Iterable[HostSpec]) -> list[HostSpec]:
    # Results are keyed by label, so a second entry with the same label would overwrite the first;
    # NODE1 and node1 are one machine (DNS ignores case), probed once under its first spelling.
    first_by_label: dict[str, HostSpec] = {}
    for spec in specs:
        first_by_label.setdefault(spec.label.lower(), spec)
    return list(first_by_label.values())


def _parse_entry(entry: str) -> list[HostSpec]:
    """The hosts of one entry: ``[user@]pattern[:port]`` entries joined by commas outside
    brackets, each with its own user and port (``alice@node1,bob@node2:2222``); a pattern with
    set operators (``node[1-8]!node3``) is one entry. Raises _BadEntry."""
    if not entry:
        raise _BadEntry("no host name", "fix: write a host name or host set, e.g. node[001-004]")
    if any(character.isspace() for character in entry):
        raise _BadEntry(f"whitespace inside {shown(entry)}",
                        "fix: one entry per line; join several hosts with ',' (node1,node2)")
    if len(entry) > MAX_PATTERN_CHARS:
        raise _BadEntry(f"a host set of {len(entry)} characters, more than {MAX_PATTERN_CHARS}",
                        "fix: give the hosts in a hosts file, one entry per line")
    parts = [entry] if _SET_OPERATORS & set(entry) else _split_top_level(entry)
    bound = sum(_size_bound(part) for part in parts)
    if bound > MAX_HOSTS:  # refused before anything is expanded
        raise _BadEntry(f"{shown(entry)} names {bound} hosts, more than {MAX_HOSTS}",
                        "fix: check the range bounds, or split the fleet into several sweeps")
    specs = [spec for part in parts for spec in _parse_one(part)]
    if len(specs) > MAX_HOSTS:
        raise _BadEntry(f"{shown(entry)} names {len(specs)} hosts, more than {MAX_HOSTS}",
                        "fix: check the range bounds, or split the fleet into several sweeps")
    return specs


def _parse_one(entry: str) -> list[HostSpec]:
    """The hosts of one ``[user@]pattern[:port]`` entry; raises _BadEntry."""
    if not entry:
        raise _BadEntry("empty host name between commas", "fix: remove the extra ','")
    user, rest = _split_user(entry)
    ipv6 = _split_ipv6(rest)
    if ipv6 is not None:
        address, port = ipv6
        return [_checked(HostSpec(host=address, user=user, port=port))]
    pattern, port = _split_port(rest)
    return [_checked(HostSpec(host=name, user=user, port=port)) for name in _expand(pattern)]


def _checked(spec: HostSpec) -> HostSpec:
    """``spec`` when ssh would take its host and user names; raises _BadEntry naming the problem."""
    problem = host_name_problem(spec.host)
    if problem is not None:
        fix = FIX_LONG_HOST_NAME if len(spec.host) > MAX_HOST_NAME_CHARS or "between dots" in problem else FIX_HOST_NAME
        raise _BadEntry(f"host name {shown(spec.host)} {problem}", f"fix: {fix}")
    problem = user_name_problem(spec.user) if spec.user is not None else None
    if problem is not None:
        raise _BadEntry(f"user name {shown(spec.user)} {problem}", f"fix: {FIX_USER_NAME}")
    return spec


def _check_fields(entry: str, fields: list[str]) -> None:
    """Raises _BadEntry, naming the accepted formats, for a line of another format (an MPI hostfile,
    /etc/hosts) or several hosts on one line."""
    line = " ".join([entry, *fields])
    keys = {text.partition("=")[0] for text in fields if "=" in text}
    if keys & _MPI_FIELDS:
        raise _BadEntry(f"{shown(line)} is an MPI hostfile line",
                        f"fix: write {ACCEPTED_FORMATS}; drop the slots (e.g. awk '{{print $1}}' hostfile)")
    bare = [text for text in fields if "=" not in text]
    if bare and _is_ip_address(entry):
        raise _BadEntry(f"{shown(line)} is an /etc/hosts line (an address, then its names)",
                        f"fix: write {ACCEPTED_FORMATS}; keep one of {entry} or {bare[0]}")
    if bare:
        raise _BadEntry(f"whitespace inside {shown(' '.join([entry, bare[0]]))}",
                        f"fix: write {ACCEPTED_FORMATS}; join several hosts with ',' (node1,node2)")


def _with_fields(specs: list[HostSpec], fields: list[str]) -> list[HostSpec]:
    """The hosts of one line with its ``key=value`` fields applied; raises _BadEntry."""
    for text in fields:
        key, _, value = text.partition("=")
        if key != "net":
            raise _BadEntry(f"unknown field {shown(text)}",
                            "fix: the one per-host field is net=ADDRESS (the data-plane address for pair tests)")
        if not _is_address(value):
            raise _BadEntry(f"net={shown(value)} is not a host name or IP address",
                            "fix: write net=10.2.0.7, net=[fd00::7] or net=node007-ib")
        if len(specs) != 1:
            raise _BadEntry(f"net={value} given for {len(specs)} hosts at once",
                            "fix: give each host its own line with its own net= address")
        specs = [replace(specs[0], net_address=value.strip("[]"))]
    return specs


def _is_ip_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True


def _is_address(value: str) -> bool:
    bare = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    if host_name_problem(bare) is not None:  # an IPv6 scope such as %$(cmd) parses as an address
        return False
    try:
        ipaddress.ip_address(bare)
    except ValueError:
        return bare == value and bool(_HOST_NAME.fullmatch(value))
    return True


def _split_user(entry: str) -> tuple[str | None, str]:
    if "@" not in entry:
        return None, entry
    # The last '@' separates the host, as ssh does: a user name may itself hold one.
    user, _, rest = entry.rpartition("@")
    if not user:
        raise _BadEntry(f"empty user name in {shown(entry)}",
                        "fix: write user@host, or just host (ClusterShell @groups are not supported)")
    if not _USER_NAME.fullmatch(user):
        raise _BadEntry(f"{shown(user)} is not a valid user name",
                        "fix: use letters, digits, '.', '_' and '-' only")
    return user, rest


def _split_ipv6(rest: str) -> tuple[str, int | None] | None:
    """(address, port) for an IPv6 literal, None for anything else; raises _BadEntry."""
    bracketed = re.fullmatch(r"\[([^\[\]]*:[^\[\]]*)\](?::(.*))?", rest)
    if bracketed:
        address, port_text = bracketed.group(1), bracketed.group(2)
    elif rest.count(":") >= 2 and "[" not in rest:
        address, port_text = rest, None
    else:
        return None
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        raise _BadEntry(f"{shown(address)} is not an IPv6 address",
                        "fix: write an IPv6 literal as [addr] or [addr]:port, a host as host:port") from None
    return address, None if port_text is None else _parse_port(port_text)


def _split_port(rest: str) -> tuple[str, int | None]:
    if ":" not in rest:
        return rest, None
    pattern, _, port_text = rest.rpartition(":")
    return pattern, _parse_port(port_text)


def _parse_port(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 65535:
        raise _BadEntry(f"port {shown(text)} is not a number from 1 to 65535", "fix: write host:port, e.g. node1:2222")
    return int(text)


def _expand(pattern: str) -> list[str]:
    """Every host name of a node-set pattern, in the order given; raises _BadEntry."""
    if not pattern:
        raise _BadEntry("no host name", "fix: write a host name or host set, e.g. node[001-004]")
    _check_range_sizes(pattern)
    # Comma-separated parts were split into entries of their own (_parse_entry), so their order
    # holds (a NodeSet sorts); with set operators the whole pattern goes to NodeSet at once.
    names = list(_expand_part(pattern))
    if len(names) > MAX_HOSTS:
        raise _BadEntry(f"{shown(pattern)} expands to {len(names)} hosts, more than {MAX_HOSTS}",
                        "fix: check the range bounds")
    return names


def _expand_part(part: str) -> Iterator[str]:
    try:
        nodes = NodeSet(part, resolver=RESOLVER_NOGROUP)
    except NodeSetParseError as exc:
        raise _BadEntry(f"bad host set {shown(part)} ({str(exc)[:SHOWN_CHARS * 2]})",
                        "fix: write ranges as name[1-4,7] or name[1-64/2] with closed brackets and low-high bounds"
                        ) from None
    for name in nodes:
        if not _HOST_NAME.fullmatch(name):
            raise _BadEntry(f"{shown(name)} is not a valid host name",
                            "fix: use letters, digits, '.', '-' and '_' only, not starting with '-' or '.'")
        yield name


def _check_range_sizes(pattern: str) -> None:
    """Raises _BadEntry, before anything is expanded, where ``pattern`` would name more than
    MAX_HOSTS hosts (``_size_bound``) or is longer than any host set (MAX_PATTERN_CHARS)."""
    bound = _size_bound(pattern)
    if bound > MAX_HOSTS:
        raise _BadEntry(f"{shown(pattern)} would expand to more than {MAX_HOSTS} hosts",
                        "fix: check the range bounds, or split the fleet into several sweeps")


def _size_bound(pattern: str) -> int:
    """How many names expanding ``pattern`` makes at most, from its text alone: for each operand
    (its parts between set operators), the product of its brackets' sizes (``a[0-99]b[0-99]c[0-99]``
    is a million); the operands' sum. Counting stops just past MAX_HOSTS: a pattern longer than
    MAX_PATTERN_CHARS counts as past it too."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return MAX_HOSTS + 1
    total = 0
    for operand in re.split(r"[!&^]", pattern):
        count = 1
        for bracket in re.findall(r"\[([^\]]*)\]", operand):
            count = min(count * _bracket_size(bracket), MAX_HOSTS + 1)
        total = min(total + count, MAX_HOSTS + 1)
    return total


def _bracket_size(bracket: str) -> int:
    """How many names one bracket's list gives: each range ``low-high/step`` its count, each
    single value one."""
    size = 0
    for item in bracket.split(","):
        match = _BRACKET_RANGE.fullmatch(item.strip())
        if match is None:
            size += 1
            continue
        low, high, step = int(match.group(1)), int(match.group(2)), max(int(match.group(3) or 1), 1)
        size += max(0, (high - low) // step + 1)
    return size


def _split_top_level(pattern: str) -> list[str]:
    """``pattern`` split at the commas outside brackets: ``a[1,2],b`` → ``a[1,2]``, ``b``."""
    parts: list[str] = []
    depth = 0
    start = 0
    for index, character in enumerate(pattern):
        if character == "[":
            depth += 1
        elif character == "]":
            depth -= 1
        elif character == "," and depth == 0:
            parts.append(pattern[start:index])
            start = index + 1
    parts.append(pattern[start:])
    return parts


def another_host_named(hostname: str, own: str, labels: Iterable[str]) -> tuple[str, str] | None:
    """(``hostname``, the other host) where the hostname a node reports names another host of
    ``labels`` than its own label ``own``: that host's label, or its short name (a DNS name's
    first label; an address is compared whole); else None. A node's own name, short or long, and
    any name no other host has are its own business."""
    if not hostname:
        return None
    said = hostname.lower()
    if said in {own.lower(), _short_name(own)}:
        return None
    for label in sorted(set(labels) - {own}):
        if said == label.lower() or (_short_name(said) == _short_name(label) != _short_name(own)):
            return hostname, label
    return None


def _short_name(name: str) -> str:
    """A DNS name's first label, lower case; an address whole."""
    return name.lower() if _is_ip_address(name.strip("[]")) else name.split(".", 1)[0].lower()
