"""The host key policy of a sweep (knownhosts.py) on real files: the bare name off port 22, files read again
when they change, accept-new with no user file, and the order of host key algorithms."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import paramiko
import pytest

from gpudiag.sshconfig import ResolvedHost
from gpudiag.transport import HostKeyChanged, HostKeyUnknown
from gpudiag.transport.knownhosts import KnownHosts

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
