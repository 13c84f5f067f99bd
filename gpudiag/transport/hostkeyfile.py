"""known_hosts text as OpenSSH reads it, and the verdict on one host key (sshd(8) "SSH_KNOWN_HOSTS FILE FORMAT").

A line is ``[@marker] hostpatterns keytype base64key [comment]``. Host patterns are a comma list with ``*`` and
``?`` wildcards and ``!`` negation (a negated match excludes the line whatever else matches), or one hashed
entry ``|1|salt|hash`` (HMAC-SHA1 of the name), and name hosts off port 22 as ``[host]:port``. Names are
matched without regard to case, as ssh matches them: ssh lowercases the host name before it looks it up (so
a hashed entry is the hash of the lowercased name, as ``ssh-keygen -H`` writes it) and compares patterns in
lower case (match.c ``match_hostname``); ``[LOCALHOST]:2299`` is about ``[localhost]:2299``. Markers are
``@revoked`` (this key must never be accepted for these hosts) and ``@cert-authority`` (host certificates signed
by this key are trusted). Lines that cannot be read (an unknown marker, a key that is not base64) are skipped,
as ssh skips them.

Pure functions: reading files, running a KnownHostsCommand and the policy live in ``knownhosts.py``.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

REVOKED = "@revoked"
CERT_AUTHORITY = "@cert-authority"
_MARKERS = (REVOKED, CERT_AUTHORITY)
_HASH_MAGIC = "|1|"
# ssh lowercases byte by byte in the C locale: ASCII letters only.
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
# How the lines a KnownHostsCommand printed name their source: "KnownHostsCommand /usr/bin/sss_ssh_knownhosts".
COMMAND_SOURCE = "KnownHostsCommand "


@dataclass(frozen=True)
class KnownHostLine:
    """One usable known_hosts line. ``source`` is the file (or ``KnownHostsCommand '...'``) and ``line_number``
    its 1-based line there; ``marker`` is ``""``, ``@revoked`` or ``@cert-authority``; ``key_blob`` the decoded
    public key, which names its own type."""

    source: str
    line_number: int
    marker: str
    hosts: str
    key_type: str
    key_blob: bytes

    @property
    def is_plain(self) -> bool:
        """True for a line without marker: a host key that is trusted as it is."""
        return not self.marker

    @property
    def is_hashed(self) -> bool:
        return self.hosts.startswith(_HASH_MAGIC)

    @property
    def from_command(self) -> bool:
        """True for a line a KnownHostsCommand printed (no file to edit)."""
        return self.source.startswith(COMMAND_SOURCE)

    def where(self) -> str:
        """``FILE:LINE``, or ``line N of KnownHostsCommand ...``, for messages."""
        return f"line {self.line_number} of {self.source}" if self.from_command else f"{self.source}:{self.line_number}"

    def matches(self, name: str) -> bool:
        """Whether this line is about ``name`` (``host`` or ``[host]:port``, compared in lower case as ssh does)."""
        return host_field_matches(self.hosts, name)


def parse_known_hosts(text: str, source: str) -> list[KnownHostLine]:
    """The usable lines of known_hosts ``text``; ``source`` names where it came from, for messages."""
    lines = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _parse_line(raw, source, number)
        if line is not None:
            lines.append(line)
    return lines


def _parse_line(raw: str, source: str, number: int) -> KnownHostLine | None:
    fields = raw.split()
    if not fields or fields[0].startswith("#"):
        return None
    marker = ""
    if fields[0].startswith("@"):
        if fields[0] not in _MARKERS:
            return None  # ssh skips a marker it does not know
        marker, fields = fields[0], fields[1:]
    if len(fields) < 3:
        return None
    hosts, key_type, key_text = fields[:3]
    try:
        blob = base64.b64decode(key_text, validate=True)
    except binascii.Error:
        return None
    if _blob_type(blob) != key_type:
        return None  # a key whose text disagrees with its type is no key ssh would use
    return KnownHostLine(source, number, marker, hosts, key_type, blob)


def _blob_type(blob: bytes) -> str | None:
    """The key type a public key blob names first (an SSH string), None when it is not one."""
    if len(blob) < 4:
        return None
    length = int.from_bytes(blob[:4], "big")
    if length > len(blob) - 4:
        return None
    return blob[4:4 + length].decode("ascii", errors="replace")


def host_field_matches(field: str, name: str) -> bool:
    """Whether a known_hosts host field (hashed, or patterns with ``*``, ``?`` and ``!``) names ``name``, as
    ssh decides it: ``name`` lowercased (and hashed so), patterns compared in lower case."""
    name = lower_host_name(name)
    if field.startswith(_HASH_MAGIC):
        return _hashed_matches(field, name)
    found = False
    for pattern in lower_host_name(field).split(","):
        negated = pattern.startswith("!")
        if _pattern_regex(pattern[1:] if negated else pattern).fullmatch(name):
            if negated:
                return False  # as ssh: a negated match rules the line out
            found = True
    return found


def lower_host_name(name: str) -> str:
    """``name`` lowercased as ssh lowercases host names (ASCII letters only)."""
    return name.translate(_ASCII_LOWER)


def _hashed_matches(field: str, name: str) -> bool:
    parts = field[len(_HASH_MAGIC):].split("|")
    if len(parts) != 2:
        return False
    try:
        salt, digest = base64.b64decode(parts[0], validate=True), base64.b64decode(parts[1], validate=True)
    except binascii.Error:
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest)


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    pieces = {"*": ".*", "?": "."}
    return re.compile("".join(pieces.get(char) or re.escape(char) for char in pattern), re.DOTALL)


class Verdict(enum.Enum):
    """What known_hosts say about a host key."""

    TRUSTED = "trusted"
    REVOKED = "revoked"
    CHANGED = "changed"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Judgement:
    """A verdict and the line behind it: the ``@revoked`` line, the matching key, the key on file that differs
    (``CHANGED``), or for ``UNKNOWN`` a ``@cert-authority`` line for the host (None when there is none)."""

    verdict: Verdict
    line: KnownHostLine | None = None


def judge(lines: Iterable[KnownHostLine], key_blob: bytes, key_type: str) -> Judgement:
    """The verdict of ``lines`` (already those about the host) on the key ``key_blob`` of type ``key_type``.

    A revoked key is refused whatever else is on file. Another key on file, of any type, makes it changed: ssh
    prefers the types it knows when it negotiates, so a node that offers another one has changed.
    """
    about = list(lines)
    for line in about:
        if line.marker == REVOKED and line.key_blob == key_blob:
            return Judgement(Verdict.REVOKED, line)
    plain = [line for line in about if line.is_plain]
    for line in plain:
        if line.key_blob == key_blob:
            return Judgement(Verdict.TRUSTED, line)
    if plain:
        same_type = [line for line in plain if line.key_type == key_type]
        return Judgement(Verdict.CHANGED, (same_type or plain)[0])
    authority = next((line for line in about if line.marker == CERT_AUTHORITY), None)
    return Judgement(Verdict.UNKNOWN, authority)


def known_key_types(lines: Sequence[KnownHostLine]) -> list[str]:
    """The key types of the plain lines, in order of first appearance (for ordering host key algorithms)."""
    return list(dict.fromkeys(line.key_type for line in lines if line.is_plain))
