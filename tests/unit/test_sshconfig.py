"""ssh config resolution: the real ``ssh -G`` and the paramiko fallback agree, with ssh's precedence.

Every test passes its own config file (``ssh -G -F FILE`` reads neither ~/.ssh/config nor
/etc/ssh/ssh_config) and, unless it checks UserKnownHostsFile itself, ``--known-hosts``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gpudiag.errors import InputError
from gpudiag.hosts import HostSpec
from gpudiag.sshconfig import ResolvedHost, SshOptions, parse_ssh_g, resolve_all, resolve_host

SSH = shutil.which("ssh")
needs_ssh = pytest.mark.skipif(SSH is None, reason="needs the OpenSSH client (ssh) for ssh -G")
# Each test runs against both sources of truth: the real ssh -G, and paramiko when ssh is absent.
BOTH = pytest.mark.parametrize("ssh_binary", [pytest.param("ssh", marks=needs_ssh, id="ssh-G"),
                                              pytest.param(None, id="paramiko")])

CONFIG = """\
Host bastion
    HostName bastion.example
    User jump

Host node*
    HostName %h.example
    Port 2222
    User alice
    IdentityFile ~/.ssh/cluster_key
    IdentityFile {tmp}/second_key
    ProxyJump jump@bastion:2200
    ConnectTimeout 5
    UserKnownHostsFile {tmp}/kh1 ~/.ssh/kh2
    StrictHostKeyChecking accept-new

Host strict
    HostName 10.0.0.9
    User carol
    StrictHostKeyChecking yes
    ProxyJump none
    ConnectTimeout 1m30s
    IdentityFile ~/.ssh/id_%h

Host lax
    User dave
    StrictHostKeyChecking no
    IdentityFile {tmp}/lax_key
"""


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "ssh_config"
    path.write_text(CONFIG.format(tmp=tmp_path), encoding="utf-8")
    return str(path)


def options(config: str, **overrides: object) -> SshOptions:
    settings: dict[str, object] = {"config_file": config, "known_hosts": str(Path(config).parent / "known_hosts")}
    settings.update(overrides)
    return SshOptions(**settings)  # type: ignore[arg-type]


@BOTH
def test_host_block_is_applied(config: str, tmp_path: Path, ssh_binary: str | None) -> None:
    resolved = resolve_host(HostSpec("node07"), options(config, known_hosts=None), ssh_binary)

    assert resolved == ResolvedHost(
        label="node07", hostname="node07.example", user="alice", port=2222,
        identity_files=(os.path.expanduser("~/.ssh/cluster_key"), f"{tmp_path}/second_key"),
        proxy_jump="jump@bastion:2200", connect_timeout_s=5.0,
        known_hosts_files=(f"{tmp_path}/kh1", os.path.expanduser("~/.ssh/kh2")),
        strict_host_key_checking="accept-new")


@BOTH
def test_yes_no_none_and_time_units(config: str, ssh_binary: str | None) -> None:
    strict = resolve_host(HostSpec("strict"), options(config), ssh_binary)
    lax = resolve_host(HostSpec("lax"), options(config), ssh_binary)

    assert (strict.hostname, strict.user, strict.port) == ("10.0.0.9", "carol", 22)
    assert strict.strict_host_key_checking == "yes"
    assert lax.strict_host_key_checking == "no"
    assert strict.proxy_jump is None
    assert strict.connect_timeout_s == 90.0
    assert strict.identity_files == (os.path.expanduser("~/.ssh/id_10.0.0.9"),)


@needs_ssh
@pytest.mark.parametrize("spec", [HostSpec("node07"), HostSpec("node07", "root", 22), HostSpec("strict"),
                                  HostSpec("lax", port=2200), HostSpec("bastion"), HostSpec("NODE8")])
@pytest.mark.parametrize("user", [None, "ops"])
def test_ssh_and_paramiko_agree(config: str, tmp_path: Path, spec: HostSpec, user: str | None) -> None:
    key = tmp_path / "given_key"
    key.write_text("not really a key\n", encoding="utf-8")
    given = options(config, user=user, identity_files=(str(key),), connect_timeout_s=3.0)

    assert resolve_host(spec, given, "ssh") == resolve_host(spec, given, None)


@BOTH
def test_hosts_file_user_beats_dash_l_which_beats_config(config: str, ssh_binary: str | None) -> None:
    assert resolve_host(HostSpec("node1"), options(config), ssh_binary).user == "alice"
    assert resolve_host(HostSpec("node1"), options(config, user="ops"), ssh_binary).user == "ops"
    assert resolve_host(HostSpec("node1", user="root"), options(config, user="ops"), ssh_binary).user == "root"


@BOTH
def test_hosts_file_port_beats_config(config: str, ssh_binary: str | None) -> None:
    resolved = resolve_host(HostSpec("node1", port=2201), options(config), ssh_binary)

    assert resolved.port == 2201
    assert resolved.label == "node1:2201"
    assert resolved.hostname == "node1.example"


@BOTH
def test_dash_i_comes_first_and_known_hosts_replaces_config(config: str, tmp_path: Path,
                                                            ssh_binary: str | None) -> None:
    key = tmp_path / "given_key"
    key.write_text("not really a key\n", encoding="utf-8")
    given = options(config, identity_files=(str(key), "~/missing_key"), known_hosts="~/fleet_known_hosts")

    resolved = resolve_host(HostSpec("node1"), given, ssh_binary)

    assert resolved.identity_files[:4] == (str(key), os.path.expanduser("~/missing_key"),
                                           os.path.expanduser("~/.ssh/cluster_key"), f"{tmp_path}/second_key")
    assert resolved.known_hosts_files == (os.path.expanduser("~/fleet_known_hosts"),)


@BOTH
def test_defaults_without_a_matching_block(config: str, ssh_binary: str | None) -> None:
    resolved = resolve_host(HostSpec("elsewhere"), options(config, user="ops", connect_timeout_s=7.5), ssh_binary)

    assert (resolved.hostname, resolved.user, resolved.port) == ("elsewhere", "ops", 22)
    assert resolved.connect_timeout_s == 7.5
    assert resolved.proxy_jump is None
    assert resolved.strict_host_key_checking == "ask"
    # What ssh would try by default: all in ~/.ssh, the common key types among them.
    assert os.path.expanduser("~/.ssh/id_ed25519") in resolved.identity_files
    assert os.path.expanduser("~/.ssh/id_rsa") in resolved.identity_files


@needs_ssh
def test_ssh_syntax_error_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad_config"
    bad.write_text("Host node*\n    Portt 22\n", encoding="utf-8")

    with pytest.raises(InputError) as caught:
        resolve_host(HostSpec("node1"), options(str(bad)), "ssh")

    message = str(caught.value)
    assert message.startswith(f"{bad}:")
    assert "Bad configuration option: portt" in message
    assert "\n" not in message
    assert caught.value.exit_code == 2


def test_paramiko_unparsable_line_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad_config"
    bad.write_text("Host node*\n    Port\n", encoding="utf-8")

    with pytest.raises(InputError, match=f"^{bad}: .*Port"):
        resolve_host(HostSpec("node1"), options(str(bad)), None)


@BOTH
def test_bad_port_in_config_is_an_input_error(tmp_path: Path, ssh_binary: str | None) -> None:
    bad = tmp_path / "bad_port"
    bad.write_text("Host node*\n    Port 99999\n", encoding="utf-8")

    with pytest.raises(InputError, match=str(bad)):
        resolve_host(HostSpec("node1"), options(str(bad)), ssh_binary)


@BOTH
def test_missing_config_file_is_an_input_error(tmp_path: Path, ssh_binary: str | None) -> None:
    missing = str(tmp_path / "no_such_config")

    with pytest.raises(InputError, match=f"--ssh-config {missing}: cannot read it"):
        resolve_all([HostSpec("node1")], options(missing), ssh_binary)


@BOTH
def test_resolve_all_keeps_order_and_duplicates(config: str, ssh_binary: str | None) -> None:
    specs = [HostSpec(f"node{number:03d}") for number in range(40, 0, -1)]
    specs += [HostSpec("node005"), HostSpec("node005", port=2201), HostSpec("lax")]

    resolved = resolve_all(specs, options(config), ssh_binary)

    assert [host.label for host in resolved] == [spec.label for spec in specs]
    assert [host.hostname for host in resolved[:3]] == ["node040.example", "node039.example", "node038.example"]
    assert resolved[-3] == resolved[35]
    assert resolved[-2].port == 2201


@needs_ssh
def test_resolve_all_runs_ssh_once_per_distinct_host(config: str, tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    counting_ssh = tmp_path / "ssh"
    counting_ssh.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {SSH} "$@"\n', encoding="utf-8")
    counting_ssh.chmod(0o755)
    specs = [HostSpec("node1"), HostSpec("node2"), HostSpec("node1"), HostSpec("node1", port=2201),
             HostSpec("node2"), HostSpec("node1")]

    resolved = resolve_all(specs, options(config), str(counting_ssh))

    assert len(log.read_text(encoding="utf-8").splitlines()) == 3
    assert [host.label for host in resolved] == ["node1", "node2", "node1", "node1:2201", "node2", "node1"]


def test_resolve_all_of_nothing() -> None:
    assert resolve_all([], SshOptions()) == []


def test_missing_ssh_binary_falls_back_to_paramiko(config: str) -> None:
    resolved = resolve_host(HostSpec("node1"), options(config), "/nonexistent/bin/ssh")

    assert (resolved.hostname, resolved.user, resolved.port) == ("node1.example", "alice", 2222)


def test_parse_ssh_g_keeps_repeated_keys() -> None:
    captured = ("host node01\nuser alice\nhostname node01.example\nport 2222\nidentityfile ~/.ssh/a\n"
                "identityfile ~/.ssh/b\nuserknownhostsfile /root/.ssh/kh1 /tmp/kh2\nconnecttimeout none\n")

    values = parse_ssh_g(captured)

    assert values["identityfile"] == ["~/.ssh/a", "~/.ssh/b"]
    assert values["userknownhostsfile"] == ["/root/.ssh/kh1 /tmp/kh2"]
    assert values["port"] == ["2222"]


@pytest.mark.parametrize("binary", [None, "ssh"])
def test_a_proxy_command_is_refused_not_bypassed(tmp_path: Path, binary):
    if binary is not None and shutil.which(binary) is None:
        pytest.fail("the OpenSSH client is part of this project's machines")
    config = tmp_path / "ssh_config"
    config.write_text("Host behind\n    HostName 10.9.9.9\n    ProxyCommand nc -X connect -x proxy:3128 %h %p\n")
    with pytest.raises(InputError, match="ProxyCommand"):
        resolve_host(HostSpec("behind"), SshOptions(config_file=str(config), known_hosts=str(tmp_path / "kh")),
                     ssh_binary=binary)
