"""The path of jump hosts to a node, resolved hop by hop with the real ``ssh -G`` (and the paramiko
fallback) from a config file of the test's own; nothing is connected to."""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

import pytest

from gpudiag.hosts import HostSpec
from gpudiag.transport import Unreachable
from gpudiag.transport.jump import MAX_JUMP_HOPS, HopResolver, route_to
from gpudiag.transport.sshconfig import SshOptions, resolve_host, resolve_jump_host

needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client (ssh) for ssh -G")
BOTH = pytest.mark.parametrize("ssh_binary", [pytest.param("ssh", marks=needs_ssh, id="ssh-G"),
                                              pytest.param(None, id="paramiko")])

CONFIG = """\
Host target
    HostName 10.0.3.3
    ProxyJump j2

Host j2
    HostName 10.0.2.2
    User second
    ProxyJump j1

Host j1
    HostName 10.0.1.1
    User first
    ProxyCommand nc %h %p

Host pair
    HostName 10.0.4.4
    ProxyJump a,ops@b:2200

Host b
    ProxyJump c

Host loop1
    ProxyJump loop2

Host loop2
    ProxyJump loop1
"""


def _route(tmp_path: Path, name: str, ssh_binary: str | None, text: str = CONFIG
           ) -> list[tuple[str, str, int, str | None]]:
    config = tmp_path / "ssh_config"
    config.write_text(text)
    options = SshOptions(config_file=str(config), known_hosts=str(tmp_path / "known_hosts"), user="nodeuser")
    resolver = HopResolver(lambda hop, via: resolve_jump_host(hop, options, via, ssh_binary))
    path = route_to(resolve_host(HostSpec(name), options, ssh_binary), resolver)
    return [(hop.hostname, hop.user, hop.port, hop.proxy_command) for hop in path]


@BOTH
def test_a_jump_host_with_its_own_proxy_jump_is_reached_through_it(tmp_path: Path, ssh_binary: str | None) -> None:
    # target's block names only j2; j2's names j1; j1 is reached by its ProxyCommand
    assert _route(tmp_path, "target", ssh_binary) == [
        ("10.0.1.1", "first", 22, "nc %h %p"), ("10.0.2.2", "second", 22, None), ("10.0.3.3", "nodeuser", 22, None)]


@BOTH
def test_a_comma_chain_goes_through_each_in_order_and_overrides_the_last_ones_proxy_jump(
        tmp_path: Path, ssh_binary: str | None) -> None:
    # as ssh -J a -W ... b: b's own "ProxyJump c" is not followed, and -l applies to the node only
    local_user = pwd.getpwuid(os.getuid()).pw_name
    assert _route(tmp_path, "pair", ssh_binary) == [
        ("a", local_user, 22, None), ("b", "ops", 2200, None), ("10.0.4.4", "nodeuser", 22, None)]


@BOTH
def test_a_proxy_jump_loop_is_that_hosts_error(tmp_path: Path, ssh_binary: str | None) -> None:
    with pytest.raises(Unreachable, match=f"more than {MAX_JUMP_HOPS} jump hosts long .*loop1 → loop2 → loop1"):
        _route(tmp_path, "loop1", ssh_binary)


def test_an_unusable_jump_entry_is_that_hosts_error_naming_the_fix(tmp_path: Path) -> None:
    # ssh -G itself refuses this config for every host; the paramiko fallback reads it, so the host fails alone
    with pytest.raises(Unreachable, match=r"^broken: ProxyJump host 'fe80::1': an IPv6 address needs brackets"):
        _route(tmp_path, "broken", None, CONFIG + "\nHost broken\n    ProxyJump j1,fe80::1\n")


def test_each_jump_host_is_resolved_once(tmp_path: Path) -> None:
    calls: list[tuple[HostSpec, str | None]] = []
    config = tmp_path / "ssh_config"
    config.write_text(CONFIG)
    options = SshOptions(config_file=str(config), known_hosts=str(tmp_path / "known_hosts"))

    def resolve(hop: HostSpec, via: str | None):
        calls.append((hop, via))
        return resolve_jump_host(hop, options, via, None)

    resolver = HopResolver(resolve)
    for _ in range(3):
        route_to(resolve_host(HostSpec("target"), options, None), resolver)

    assert calls == [(HostSpec("j2"), None), (HostSpec("j1"), None)]
