"""ssh config resolution: the real ``ssh -G`` and the paramiko fallback agree, with ssh's precedence.

Every test passes its own config file (``ssh -G -F FILE`` reads neither ~/.ssh/config nor
/etc/ssh/ssh_config) and, unless it checks UserKnownHostsFile itself, ``--known-hosts``.
"""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

import pytest

from gpudiag.errors import InputError
from gpudiag.hosts import HostSpec
from gpudiag.transport.jump import parse_jump_host, split_proxy_jump
from gpudiag.transport.sshconfig import (
    ProxySettingError,
    ResolvedFleet,
    ResolvedHost,
    SshOptions,
    parse_ssh_g,
    proxy_command_line,
    resolve_all,
    resolve_host,
    resolve_jump_host,
)

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

Host behind
    HostName 10.9.9.9
    User erin
    ProxyCommand nc -X connect -x proxy:3128 %h %p %r %n %%
    IdentityFile %d/.ssh/behind_%r
    UserKnownHostsFile %d/kh_%h ~/kh2

Host chained
    ProxyJump ssh://jump@bastion:2200,[::1]:2201
    ProxyCommand nc %h %p

Host ipa*
    GlobalKnownHostsFile /var/lib/sss/pubconf/known_hosts ~/global_%h
    KnownHostsCommand /usr/bin/sss_ssh_knownhosts %H
    UserKnownHostsFile none
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
        strict_host_key_checking="accept-new", proxy_command=None, original_host="node07")


@BOTH
def test_global_known_hosts_files_and_known_hosts_command(config: str, ssh_binary: str | None) -> None:
    ipa = resolve_host(HostSpec("ipa1"), options(config, known_hosts=None), ssh_binary)
    node = resolve_host(HostSpec("node1"), options(config), ssh_binary)

    # ~ expanded and no token, as ssh reads GlobalKnownHostsFile; the command's tokens wait for the host key
    assert ipa.global_known_hosts_files == ("/var/lib/sss/pubconf/known_hosts", os.path.expanduser("~/global_%h"))
    assert ipa.known_hosts_command == "/usr/bin/sss_ssh_knownhosts %H"
    assert ipa.known_hosts_files == ()
    assert node.global_known_hosts_files == ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
    assert node.known_hosts_command is None


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
                                  HostSpec("lax", port=2200), HostSpec("bastion"), HostSpec("NODE8"),
                                  HostSpec("behind", "root", 2201), HostSpec("chained"), HostSpec("ipa1")])
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
def test_resolve_all_keeps_order_and_folds_duplicates(config: str, ssh_binary: str | None) -> None:
    specs = [HostSpec(f"node{number:03d}") for number in range(40, 0, -1)]
    specs += [HostSpec("node005"), HostSpec("node005", port=2201), HostSpec("lax")]

    resolved = resolve_all(specs, options(config), ssh_binary)

    assert list(resolved.hosts) == list(dict.fromkeys(spec.label for spec in specs))
    assert [host.hostname for host in list(resolved.hosts.values())[:3]] == [
        "node040.example", "node039.example", "node038.example"]
    assert resolved.hosts["node005"].port == 2222 and resolved.hosts["node005:2201"].port == 2201
    assert resolved.problems == {}


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
    assert list(resolved.hosts) == ["node1", "node2", "node1:2201"]


def test_resolve_all_of_nothing() -> None:
    assert resolve_all([], SshOptions()) == ResolvedFleet({}, {})


def test_a_bad_value_in_one_hosts_block_is_that_hosts_problem_for_the_fallback(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host node01\n    User alice\n\nHost node03\n    Port 99999\n\nHost node04\n"
                      "    ConnectTimeout 5x\n", encoding="utf-8")
    specs = [HostSpec(f"node0{number}") for number in range(1, 5)]

    resolved = resolve_all(specs, options(str(config)), None)

    assert list(resolved.hosts) == ["node01", "node02"]
    assert resolved.hosts["node01"].user == "alice"
    assert resolved.problems["node03"].message == (
        f"{config}:5: Port '99999' is not a number from 1 to 65535 (for host node03); fix: correct the ssh config file")
    assert resolved.problems["node04"].message.startswith(f"{config}:8: ConnectTimeout '5x' is not a time")


@needs_ssh
def test_a_token_ssh_cannot_expand_for_one_host_is_that_hosts_problem(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n    User alice\n\nHost node02\n    HostName %z.example\n", encoding="utf-8")

    resolved = resolve_all([HostSpec("node01"), HostSpec("node02"), HostSpec("node03")], options(str(config)), "ssh")

    assert list(resolved.hosts) == ["node01", "node03"]
    message = resolved.problems["node02"].message
    assert message.startswith(f"{config}:5: ssh rejects the configuration: ") and "unknown key %z" in message
    assert message.endswith("(for host node02); fix: correct the ssh config file")


@BOTH
def test_a_config_that_fails_every_host_the_same_way_ends_the_sweep(tmp_path: Path, ssh_binary: str | None) -> None:
    config = tmp_path / "ssh_config"
    # ssh checks a Port in every block whatever the host; the fallback only where the block applies (all here)
    config.write_text("Host node*\n    User alice\n    Port 99999\n", encoding="utf-8")

    with pytest.raises(InputError) as caught:
        resolve_all([HostSpec("node01"), HostSpec("node02")], options(str(config)), ssh_binary)

    message = str(caught.value)
    assert "(for every host); fix: correct the ssh config file" in message and "\n" not in message
    assert message.startswith(f"{config}:3: ") or f"{config} line 3: Bad port '99999'" in message


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


# --- ProxyCommand, ProxyJump and the home directory ------------------------------------------------


@BOTH
def test_a_proxy_command_is_kept_and_expanded_with_the_final_host_user_and_port(config: str,
                                                                               ssh_binary: str | None) -> None:
    resolved = resolve_host(HostSpec("behind", user="root", port=2201), options(config), ssh_binary)

    assert resolved.proxy_command == "nc -X connect -x proxy:3128 %h %p %r %n %%"
    assert proxy_command_line(resolved) == "nc -X connect -x proxy:3128 10.9.9.9 2201 root behind %"
    assert resolve_host(HostSpec("behind"), options(config), ssh_binary).proxy_command is not None


@BOTH
def test_a_proxy_jump_takes_the_place_of_a_later_proxy_command(config: str, ssh_binary: str | None) -> None:
    resolved = resolve_host(HostSpec("chained"), options(config), ssh_binary)

    assert resolved.proxy_jump == "ssh://jump@bastion:2200,[::1]:2201"
    assert resolved.proxy_command is None


@pytest.mark.parametrize("command, problem", [("nc %h %d", "%d is not a token"), ("nc %h 100%", "lone %")])
def test_a_proxy_command_token_ssh_does_not_expand_is_refused(command: str, problem: str) -> None:
    host = ResolvedHost(label="n1", hostname="10.0.0.1", user="u", port=22, identity_files=(), proxy_jump=None,
                        connect_timeout_s=10.0, known_hosts_files=(), strict_host_key_checking="yes",
                        proxy_command=command, original_host="n1")

    with pytest.raises(ProxySettingError, match=problem) as caught:
        proxy_command_line(host)
    assert "fix:" in str(caught.value) and command in str(caught.value)


@pytest.mark.parametrize("text, expected", [
    ("bastion", HostSpec("bastion")),
    ("jump@bastion", HostSpec("bastion", "jump")),
    ("jump@bastion:2222", HostSpec("bastion", "jump", 2222)),
    ("[::1]:2222", HostSpec("::1", None, 2222)),
    ("[::1]", HostSpec("::1")),
    ("user@[fe80::1%eth0]:22", HostSpec("fe80::1%eth0", "user", 22)),
    ("ssh://user@host:2200", HostSpec("host", "user", 2200)),
    ("ssh://host", HostSpec("host")),
    ("ssh://[::1]:2201", HostSpec("::1", None, 2201)),
    ("ssh://ops%40corp@[2001:db8::5]:22", HostSpec("2001:db8::5", "ops@corp", 22)),
    ("a@b@host:23", HostSpec("host", "a@b", 23)),
])
def test_jump_host_forms(text: str, expected: HostSpec) -> None:
    parsed = parse_jump_host(text)

    assert (parsed.host, parsed.user, parsed.port) == (expected.host, expected.user, expected.port)


@pytest.mark.parametrize("text, problem", [
    ("fe80::1", "needs brackets"), ("[::1", "close the bracket"), ("[::1]2222", "close the bracket"),
    ("host:0", "port '0'"), ("host:ssh", "port 'ssh'"), ("@host", "empty user"), ("user@", "no host name"),
    ("ssh://host/path", "has a path"), ("ssh://u;fingerprint=SHA256:x@host", "connection parameters"),
    ("ssh://user@:22", "no host name"),
])
def test_bad_jump_hosts_name_the_entry_and_the_fix(text: str, problem: str) -> None:
    with pytest.raises(ProxySettingError, match=problem) as caught:
        parse_jump_host(text)
    assert text in str(caught.value) and "fix:" in str(caught.value)


def test_a_proxy_jump_splits_into_entries_and_refuses_an_empty_one() -> None:
    assert split_proxy_jump("a, ssh://b:2222 ,[::1]:22") == ["a", "ssh://b:2222", "[::1]:22"]
    with pytest.raises(ProxySettingError, match="empty jump host"):
        split_proxy_jump("a,,b")


@BOTH
def test_a_jump_host_keeps_its_own_user_and_drops_dash_l(config: str, ssh_binary: str | None) -> None:
    given = options(config, user="ops")

    bastion = resolve_jump_host(HostSpec("bastion"), given, None, ssh_binary)
    named = resolve_jump_host(HostSpec("bastion", "root", 2200), given, None, ssh_binary)

    assert (bastion.hostname, bastion.user, bastion.port) == ("bastion.example", "jump", 22)
    assert (named.user, named.port, named.label) == ("root", 2200, "bastion:2200")


@BOTH
def test_the_chain_before_a_jump_host_replaces_its_own_proxy_settings(config: str, ssh_binary: str | None) -> None:
    own = resolve_jump_host(HostSpec("node3"), options(config), None, ssh_binary)
    via = resolve_jump_host(HostSpec("node3"), options(config), "first,second", ssh_binary)
    behind = resolve_jump_host(HostSpec("behind"), options(config), "first", ssh_binary)

    assert own.proxy_jump == "jump@bastion:2200"
    assert via.proxy_jump == "first,second"
    assert (behind.proxy_jump, behind.proxy_command) == ("first", None)


@BOTH
def test_tilde_and_percent_d_are_the_password_database_home_not_dollar_home(
        config: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ssh_binary: str | None) -> None:
    home = pwd.getpwuid(os.getuid()).pw_dir
    monkeypatch.setenv("HOME", str(tmp_path / "elsewhere"))

    behind = resolve_host(HostSpec("behind"), options(config, known_hosts=None), ssh_binary)
    node = resolve_host(HostSpec("node1"), options(config, identity_files=("~/given",), known_hosts=None),
                        ssh_binary)
    replaced = resolve_host(HostSpec("node1"), options(config, known_hosts="~/fleet_kh"), ssh_binary)

    assert behind.identity_files == (f"{home}/.ssh/behind_erin",)
    assert behind.known_hosts_files == (f"{home}/kh_10.9.9.9", f"{home}/kh2")
    assert node.identity_files[:2] == (f"{home}/given", f"{home}/.ssh/cluster_key")
    assert node.known_hosts_files[1] == f"{home}/.ssh/kh2"
    assert replaced.known_hosts_files == (f"{home}/fleet_kh",)


@needs_ssh
def test_hosts_that_resolve_alike_share_one_list_of_paths(config: str) -> None:
    # a fleet's hosts nearly all resolve the same identity and known-hosts files: kept once, not once a host
    first, second = (resolve_host(HostSpec(name), options(config, known_hosts=None), "ssh")
                     for name in ("node1", "node2"))
    assert first.identity_files == second.identity_files and first.identity_files is second.identity_files
    assert first.known_hosts_files is second.known_hosts_files
    strict = resolve_host(HostSpec("strict"), options(config), "ssh")
    assert strict.identity_files != first.identity_files  # each list its own where they differ
