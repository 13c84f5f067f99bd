"""known_hosts lines as OpenSSH reads them (hostkeyfile.py): host patterns, hashed names written by the real
``ssh-keygen -H``, ``@revoked`` and ``@cert-authority`` markers, and the verdict on a host key. Names match
without regard to case, as ssh matches them; the real ``ssh-keygen -F`` is asked where it can say."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpudiag.transport.hostkeyfile import (
    CERT_AUTHORITY,
    REVOKED,
    Verdict,
    host_field_matches,
    judge,
    known_key_types,
    parse_known_hosts,
)

# Real public keys (ssh-keygen -t ed25519 / -t ecdsa), as a known_hosts file holds them.
ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIvOTO6NkrieZ4kwuCy8kZ1SIKbj3rH5kiJskyXLNVfW"
ED25519_OTHER = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBoCy8Dmfev/CLXf8It+ZSW3QXLtQm2jmWufAiLdyjej"
ECDSA = ("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBP0FdC2lV9h2sqt2xce27R/iyaxl"
         "iDSgk3hPhnZyAWIu8BFUmNPCycyueJxuFr3uBxghhVPGUBExdwI0OJNkQyU=")
SSH_KEYGEN = shutil.which("ssh-keygen")


def blob(key_line: str) -> bytes:
    return base64.b64decode(key_line.split()[1])


@pytest.mark.parametrize(("field", "name", "expected"), [
    ("node01", "node01", True),
    # as ssh: the host name is lowercased and patterns are compared in lower case (match.c match_hostname)
    ("node01", "NODE01", True),
    ("NODE01", "node01", True),
    ("[LOCALHOST]:2299", "[localhost]:2299", True),
    ("[LocalHost]:2299", "[LOCALHOST]:2299", True),
    ("[LOCALHOST]:2299", "[localhost]:2298", False),
    ("Node*.EXAMPLE", "node17.example", True),
    ("node*,!NODE13", "node13", False),
    ("FE80::1%ETH0", "fe80::1%eth0", True),
    ("NÖDE1", "nÖde1", True),  # ssh lowercases ASCII letters only (C locale)
    ("NÖDE1", "nöde1", False),
    ("node01,10.0.0.1", "10.0.0.1", True),
    ("[node01]:2222", "[node01]:2222", True),
    ("[node01]:2222", "node01", False),
    ("node*.example", "node17.example", True),
    ("node?.example", "node17.example", False),
    ("node*,!node13", "node13", False),
    ("!node13,node*", "node13", False),
    ("node*,!node13", "node14", True),
    ("[10.1.*]:22*", "[10.1.2.3]:2201", True),
    ("node.example", "nodeXexample", False),  # a dot is a dot
])
def test_host_patterns(field: str, name: str, expected: bool) -> None:
    assert host_field_matches(field, name) is expected


@pytest.mark.skipif(SSH_KEYGEN is None, reason="needs ssh-keygen to hash names")
def test_names_hashed_by_ssh_keygen_match_only_their_host(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(f"node01 {ED25519}\n[node02]:2222 {ECDSA}\n", encoding="utf-8")
    subprocess.run([SSH_KEYGEN, "-H", "-f", str(path)], check=True, capture_output=True)

    lines = parse_known_hosts(path.read_text(encoding="utf-8"), str(path))

    assert [line.hosts.startswith("|1|") for line in lines] == [True, True]
    assert [line.matches("node01") for line in lines] == [True, False]
    assert [line.matches("[node02]:2222") for line in lines] == [False, True]
    assert not any(line.matches("node02") for line in lines)


@pytest.mark.skipif(SSH_KEYGEN is None, reason="needs ssh-keygen to hash names")
def test_a_name_hashed_by_ssh_keygen_is_its_lowercase_and_matches_in_any_case(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(f"[LOCALHOST]:2299 {ED25519}\n", encoding="utf-8")
    subprocess.run([SSH_KEYGEN, "-H", "-f", str(path)], check=True, capture_output=True)

    (line,) = parse_known_hosts(path.read_text(encoding="utf-8"), str(path))

    assert line.is_hashed
    assert line.matches("[localhost]:2299") and line.matches("[LocalHost]:2299")
    assert not line.matches("localhost") and not line.matches("[localhost]:22")


def test_a_name_hashed_in_upper_case_by_another_tool_is_not_the_host_as_for_ssh() -> None:
    # ssh hashes the lowercased name; an entry hashed from "NODE01" is never found by ssh, nor here
    salt = os.urandom(20)
    digest = hmac.new(salt, b"NODE01", hashlib.sha1).digest()
    field = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"

    assert not host_field_matches(field, "node01") and not host_field_matches(field, "NODE01")


@pytest.mark.skipif(SSH_KEYGEN is None, reason="needs ssh-keygen -F")
@pytest.mark.parametrize("field", ["[LOCALHOST]:2299", "[localhost]:2299", "Node*.EXAMPLE,!NODE13.example",
                                   "NODE01,10.0.0.1", "[NODE0?]:22*"])
def test_matching_agrees_with_ssh_keygen_F(tmp_path: Path, field: str) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(f"{field} {ED25519}\n", encoding="utf-8")
    # ssh-keygen -F, unlike ssh, does not lowercase the name it is given: ask it in lower case, as ssh would
    names = ["[localhost]:2299", "[localhost]:2298", "node13.example", "node14.example", "node01", "10.0.0.1",
             "[node07]:2201", "[node17]:2201", "localhost"]

    for name in names:
        found = subprocess.run([SSH_KEYGEN, "-F", name, "-f", str(path)], capture_output=True).returncode == 0

        assert host_field_matches(field, name) is found, (field, name)
        assert host_field_matches(field, name.upper()) is found, (field, name.upper())


def test_markers_comments_and_lines_ssh_skips() -> None:
    text = (f"# a comment\n\n@revoked * {ED25519_OTHER}\n@cert-authority *.example {ECDSA} ca\n"
            f"@unknown node01 {ED25519}\nnode01 ssh-ed25519 not-base64!\nnode01 {ECDSA.split()[0]} "
            f"{ED25519.split()[1]}\nnode01\nnode01 {ED25519} a comment\n")

    lines = parse_known_hosts(text, "/etc/ssh/ssh_known_hosts")

    assert [(line.line_number, line.marker) for line in lines] == [(3, REVOKED), (4, CERT_AUTHORITY), (9, "")]
    assert lines[2].where() == "/etc/ssh/ssh_known_hosts:9"
    assert lines[2].key_type == "ssh-ed25519" and lines[2].key_blob == blob(ED25519)


def _judge(text: str, key: str) -> tuple[Verdict, int | None]:
    lines = [line for line in parse_known_hosts(text, "kh") if line.matches("node01")]
    judgement = judge(lines, blob(key), key.split()[0])
    return judgement.verdict, judgement.line.line_number if judgement.line else None


def test_a_revoked_key_is_refused_even_where_another_line_trusts_it() -> None:
    text = f"node01 {ED25519}\n@revoked node0* {ED25519}\n"

    assert _judge(text, ED25519) == (Verdict.REVOKED, 2)
    assert _judge(text, ED25519_OTHER) == (Verdict.CHANGED, 1)


def test_trusted_changed_and_unknown() -> None:
    text = f"node01 {ECDSA}\nnode01 {ED25519_OTHER}\nnode02 {ED25519}\n"

    assert _judge(text, ED25519_OTHER) == (Verdict.TRUSTED, 2)
    assert _judge(text, ED25519) == (Verdict.CHANGED, 2)  # the stale key of the same type is the one named
    assert _judge(f"node01 {ECDSA}\n", ED25519) == (Verdict.CHANGED, 1)  # another type on file: changed too
    assert _judge(f"node02 {ED25519}\n", ED25519) == (Verdict.UNKNOWN, None)


def test_a_certificate_authority_alone_leaves_the_key_unknown_and_says_where() -> None:
    assert _judge(f"@cert-authority node* {ECDSA}\n", ED25519) == (Verdict.UNKNOWN, 1)


def test_a_certificate_authority_line_holding_the_host_key_itself_is_no_trust() -> None:
    # a CA key is not a host key: the same key under @cert-authority never makes it trusted
    assert _judge(f"@cert-authority NODE01 {ED25519}\n", ED25519) == (Verdict.UNKNOWN, 1)


def test_entries_in_another_case_judge_the_key_as_ssh_does() -> None:
    assert _judge(f"NODE01 {ED25519}\n", ED25519) == (Verdict.TRUSTED, 1)
    assert _judge(f"NODE01 {ED25519_OTHER}\n", ED25519) == (Verdict.CHANGED, 1)
    assert _judge(f"Node0* {ED25519}\n@revoked NODE01 {ED25519}\n", ED25519) == (Verdict.REVOKED, 2)


def test_known_key_types_are_those_of_plain_lines_in_order() -> None:
    lines = parse_known_hosts(f"@revoked node01 {ED25519}\nnode01 {ECDSA}\nnode01 {ED25519_OTHER}\n"
                              f"node01 {ECDSA}\n", "kh")

    assert known_key_types(lines) == ["ecdsa-sha2-nistp256", "ssh-ed25519"]
