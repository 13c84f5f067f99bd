"""The host key policy of a sweep (knownhosts.py) on real files: the bare name off port 22, files read again
when they change, accept-new with no user file, the order of host key algorithms; entries in another case
(plain, hashed, in the user file, the global file or a KnownHostsCommand's output) as ssh matches them,
@revoked and @cert-authority lines, and two sweeps accepting two keys for one host at once."""

from __future__ import annotations

import dataclasses
import fcntl
import subprocess
import threading
import time
from pathlib import Path

import paramiko
import pytest

from gpudiag.transport import HostKeyChanged, HostKeyUnknown
from gpudiag.transport.knownhosts import KnownHosts
from gpudiag.transport.sshconfig import ResolvedHost

KEY = paramiko.ECDSAKey.generate()
OTHER = paramiko.ECDSAKey.generate()


def _host(tmp_path: Path, port: int = 2222, **changes: object) -> ResolvedHost:
    host = ResolvedHost(label="node07", hostname="10.0.0.7", user="alice", port=port, identity_files=(),
                        proxy_jump=None, connect_timeout_s=5.0, known_hosts_files=(str(tmp_path / "known_hosts"),),
                        strict_host_key_checking="yes", original_host="node07",
                        global_known_hosts_files=(str(tmp_path / "global"),))
    return dataclasses.replace(host, **changes)  # type: ignore[arg-type]


def _entry(name: str, key: paramiko.PKey) -> str:
    return f"{name} {key.get_name()} {key.get_base64()}\n"


def test_off_port_22_a_key_filed_under_the_bare_name_is_trusted_but_not_a_different_one(tmp_path: Path) -> None:
    (tmp_path / "global").write_text(_entry("10.0.0.7", KEY))
    known = KnownHosts()

    known.check(_host(tmp_path), KEY, accept_new=False)
    with pytest.raises(HostKeyUnknown):  # as ssh: the bare name's other key makes it new, not changed
        known.check(_host(tmp_path), OTHER, accept_new=False)
    with pytest.raises(HostKeyChanged):
        known.check(_host(tmp_path, port=22), OTHER, accept_new=False)


def test_a_file_is_read_again_once_it_changed(tmp_path: Path) -> None:
    user = tmp_path / "known_hosts"
    user.write_text("")
    known = KnownHosts()
    with pytest.raises(HostKeyUnknown):
        known.check(_host(tmp_path), KEY, accept_new=False)

    user.write_text(_entry("[10.0.0.7]:2222", KEY))

    known.check(_host(tmp_path), KEY, accept_new=False)


def test_accept_new_with_no_user_file_accepts_for_this_sweep_and_writes_nothing(tmp_path: Path) -> None:
    host = _host(tmp_path, known_hosts_files=())
    known = KnownHosts()

    known.check(host, KEY, accept_new=True)
    known.check(host, KEY, accept_new=False)

    assert list(tmp_path.iterdir()) == []
    with pytest.raises(HostKeyUnknown):
        KnownHosts().check(host, KEY, accept_new=False)


def test_accept_new_appends_one_line_to_the_first_user_file(tmp_path: Path) -> None:
    second = tmp_path / "second"
    host = _host(tmp_path, known_hosts_files=(str(tmp_path / "known_hosts"), str(second)))
    (tmp_path / "known_hosts").write_text(_entry("node01", OTHER).strip())  # no newline at its end

    KnownHosts().check(host, KEY, accept_new=True)
    KnownHosts().check(host, KEY, accept_new=True)  # another sweep: already on file, nothing added

    lines = (tmp_path / "known_hosts").read_text().splitlines()
    assert lines == [_entry("node01", OTHER).strip(), _entry("[10.0.0.7]:2222", KEY).strip()]
    assert not second.exists() and not (tmp_path / "global").exists()


def test_the_key_types_on_file_are_asked_for_first(tmp_path: Path) -> None:
    (tmp_path / "global").write_text(_entry("[10.0.0.7]:2222", KEY) + _entry("node99", paramiko.RSAKey.generate(1024)))
    offered = ("ssh-ed25519", "ecdsa-sha2-nistp256", "rsa-sha2-512", "rsa-sha2-256")

    assert KnownHosts().preferred_key_types(_host(tmp_path), offered) == [
        "ecdsa-sha2-nistp256", "ssh-ed25519", "rsa-sha2-512", "rsa-sha2-256"]
    rsa_host = _host(tmp_path, hostname="node99", port=22)
    assert KnownHosts().preferred_key_types(rsa_host, offered) == [
        "rsa-sha2-512", "rsa-sha2-256", "ssh-ed25519", "ecdsa-sha2-nistp256"]


# --- names in another case, in every source ssh reads; accept-new never joins a conflicting entry -------------


def _localhost(tmp_path: Path, **changes: object) -> ResolvedHost:
    """A host reached as ``localhost`` on port 2299 (ssh has lowercased the name it was given)."""
    return _host(tmp_path, hostname="localhost", port=2299, **changes)


def _command(tmp_path: Path, output: str) -> str:
    """A KnownHostsCommand that prints ``output``."""
    (tmp_path / "keys").write_text(output)
    script = tmp_path / "knownhostscommand"
    script.write_text(f"#!/bin/sh\ncat {tmp_path / 'keys'}\n")
    script.chmod(0o755)
    return f"{script} %H"


@pytest.mark.parametrize("source", ["user", "global", "command"])
def test_an_entry_in_another_case_is_the_hosts_own_in_every_source(tmp_path: Path, source: str) -> None:
    user = tmp_path / "known_hosts"
    user.write_text("")
    right, wrong = _entry("[LOCALHOST]:2299", KEY), _entry("[LocalHost]:2299", OTHER)
    for text, expected in ((right, None), (wrong, HostKeyChanged)):
        changes: dict[str, object] = {}
        if source == "user":
            user.write_text(text)
        elif source == "global":
            (tmp_path / "global").write_text(text)
        else:
            changes["known_hosts_command"] = _command(tmp_path, text)
        before = user.read_bytes()

        if expected is None:
            KnownHosts().check(_localhost(tmp_path, **changes), KEY, accept_new=True)
        else:
            with pytest.raises(expected, match=r"differs from the ssh-ed25519|differs from the ecdsa"):
                KnownHosts().check(_localhost(tmp_path, **changes), KEY, accept_new=True)

        assert user.read_bytes() == before  # nothing appended: trusted, or refused


def test_a_hashed_entry_in_another_case_with_another_key_is_changed_and_nothing_is_appended(tmp_path: Path) -> None:
    user = tmp_path / "known_hosts"
    user.write_text(_entry("[LOCALHOST]:2299", OTHER))
    subprocess.run(["ssh-keygen", "-H", "-f", str(user)], check=True, capture_output=True)
    before = user.read_bytes()
    assert before.startswith(b"|1|")

    with pytest.raises(HostKeyChanged, match=r"\[localhost\]:2299: the host key .* differs from"):
        KnownHosts().check(_localhost(tmp_path), KEY, accept_new=True)

    assert user.read_bytes() == before


def test_a_revoked_key_is_refused_whatever_else_trusts_it_in_any_case(tmp_path: Path) -> None:
    (tmp_path / "known_hosts").write_text(_entry("[localhost]:2299", KEY))
    (tmp_path / "global").write_text("@revoked " + _entry("[LOCALHOST]:*", KEY))
    before = (tmp_path / "known_hosts").read_bytes()

    with pytest.raises(HostKeyChanged, match=r"marked @revoked \(.*global:1\)"):
        KnownHosts().check(_localhost(tmp_path), KEY, accept_new=True)

    assert (tmp_path / "known_hosts").read_bytes() == before


def test_a_certificate_authority_line_is_never_taken_for_the_hosts_key(tmp_path: Path) -> None:
    (tmp_path / "global").write_text("@cert-authority " + _entry("[LOCALHOST]:2299", KEY))

    with pytest.raises(HostKeyUnknown, match="does not check host certificates"):
        KnownHosts().check(_localhost(tmp_path), KEY, accept_new=True)

    assert not (tmp_path / "known_hosts").exists()


def _blocked_flock_waiters(path: Path) -> int:
    """How many flock waits are blocked on ``path`` (/proc/locks marks a waiter with '->')."""
    inode = f":{path.stat().st_ino} "
    return sum(1 for line in Path("/proc/locks").read_text().splitlines()
               if "->" in line and " FLOCK " in line and inode in line)


def test_two_sweeps_accepting_two_keys_at_once_file_one_and_refuse_the_other(tmp_path: Path) -> None:
    user = tmp_path / "known_hosts"
    user.write_text("")
    outcomes: dict[str, object] = {}

    def accept(name: str, key: paramiko.PKey) -> None:
        try:
            KnownHosts().check(_localhost(tmp_path), key, accept_new=True)  # a sweep of its own
            outcomes[name] = "accepted"
        except HostKeyChanged as error:
            outcomes[name] = error

    with user.open("a") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)  # both sweeps find the key unknown, then wait to append
        threads = [threading.Thread(target=accept, args=(name, key)) for name, key in (("a", KEY), ("b", OTHER))]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30.0
        while _blocked_flock_waiters(user) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _blocked_flock_waiters(user) == 2
        fcntl.flock(holder, fcntl.LOCK_UN)
    for thread in threads:
        thread.join(30.0)

    assert sorted(str(type(outcome).__name__) for outcome in outcomes.values()) == ["HostKeyChanged", "str"]
    (line,) = user.read_text().splitlines()  # one key filed, never a second one beside it
    winner = KEY if outcomes["a"] == "accepted" else OTHER
    assert line == _entry("[localhost]:2299", winner).strip()


def test_accept_new_never_files_a_key_under_a_name_that_is_a_pattern(tmp_path: Path) -> None:
    # a HostName such as "node*" would file a wildcard entry that vouches for every node
    with pytest.raises(HostKeyUnknown, match=r"accept-new does not file it: the name holds a pattern character"):
        KnownHosts().check(_host(tmp_path, hostname="node*", port=22), KEY, accept_new=True)

    assert not (tmp_path / "known_hosts").exists()
