"""Host and user names checked as OpenSSH (9.6 and later) checks those of its command line, from every source:
the hosts file, ``--hosts``, ``$SLURM_JOB_NODELIST``, ``-l``, what ``ssh -G`` or the paramiko fallback resolves
(HostName, User), ProxyJump entries and what a ProxyCommand would expand. The rules are compared with the real
``ssh`` of this machine where it has them."""

from __future__ import annotations

import dataclasses
import io
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from gpudiag.errors import InputError
from gpudiag.exitcodes import ExitCode
from gpudiag.hosts import HostSpec, host_name_problem, load_hosts, user_name_problem
from gpudiag.slurm.nodelist import job_hosts
from gpudiag.transport import Unreachable
from gpudiag.transport.jump import HopResolver, parse_jump_host, route_to
from gpudiag.transport.sshconfig import (
    HostConfigError,
    ProxySettingError,
    ResolvedHost,
    SshOptions,
    proxy_command_line,
    resolve_all,
    resolve_host,
    resolve_jump_host,
)

SSH = shutil.which("ssh")
needs_ssh = pytest.mark.skipif(SSH is None, reason="needs the OpenSSH client (ssh)")
BOTH = pytest.mark.parametrize("ssh_binary", [pytest.param("ssh", marks=needs_ssh, id="ssh-G"),
                                              pytest.param(None, id="paramiko")])
NO_STDIN = io.StringIO("")

HOST_NAMES = ["node01", "gpu-7.rack_2.example", "fe80::1%eth0", "10.0.0.7", "a*b", "a!b", "a#b", "a~b", "a^b",
              "a[b]", "a=b", "a/b", "a,b", "a b", "a\tb", "a\nb", "a$b", "a\\b", "a'b", 'a"b', "a`b", "a;b", "a&b",
              "a<b", "a>b", "a|b", "a(b", "a)b", "a{b", "a}b", "-oProxyCommand=x", "fe80::1%$(touch x)"]
USER_NAMES = ["alice", "svc$", "a b", "a\\b", "a,b", "a.b-c_d", "a -b", "-a", "a\\", "a\tb", "a;b", "a'b", "a`b",
              "a&b", "a|b", "a(b", "a}b", "a<b"]


def _ssh_refuses(*arguments: str) -> str:
    """What the real ssh -G says about ``arguments`` ("" when it takes them)."""
    assert SSH is not None
    completed = subprocess.run([SSH, "-G", "-F", "/dev/null", *arguments], capture_output=True, text=True,
                               stdin=subprocess.DEVNULL, timeout=30)
    return "" if completed.returncode == 0 else completed.stderr


# Whether this machine's ssh refuses metacharacters in a command-line host name (9.6+, or a backport):
# an older one has no verdict to compare with.
SSH_CHECKS_NAMES = SSH is not None and "invalid characters" in _ssh_refuses("--", "a$b")


@pytest.mark.skipif(not SSH_CHECKS_NAMES, reason="this machine's ssh does not check host names (older than 9.6)")
@pytest.mark.parametrize("name", HOST_NAMES)
def test_host_names_are_refused_where_openssh_refuses_them(name: str) -> None:
    refused = "hostname contains invalid characters" in _ssh_refuses("--", name)

    assert (host_name_problem(name) is not None) is refused


@pytest.mark.skipif(not SSH_CHECKS_NAMES, reason="this machine's ssh does not check user names (older than 9.6)")
@pytest.mark.parametrize("name", USER_NAMES)
def test_user_names_are_refused_where_openssh_refuses_them(name: str) -> None:
    refused = "remote username contains invalid characters" in _ssh_refuses("-l", name, "--", "node01")

    assert (user_name_problem(name) is not None) is refused


@pytest.mark.parametrize("name", ["", "node\u2028x", "node\x85x", "node\u200bx"])
def test_empty_and_unprintable_host_names_are_refused_too(name: str) -> None:
    assert host_name_problem(name) is not None


# --- every source of names ---------------------------------------------------------------------------------


def test_a_hosts_file_line_with_a_scope_id_that_runs_a_command_is_an_input_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "hosts.txt"
    path.write_text("node01\n[fe80::1%eth0]:2222\n[fe80::1%$(>pwned)]:2222\n", encoding="utf-8")

    with pytest.raises(InputError) as caught:
        load_hosts(str(path), NO_STDIN)

    assert caught.value.exit_code is ExitCode.USAGE
    message = str(caught.value)
    assert message.startswith(f"{path}:3: host name 'fe80::1%$(>pwned)' contains '$'") and "\n" not in message
    assert "fix: " in message


@pytest.mark.parametrize(("argument", "said"), [
    ("fe80::1%$(reboot)", "contains '$'"),
    ("[fe80::1%`reboot`]:22", "contains '`'"),
    ("[fe80::1%a;b]", "contains ';'"),
    ("[fe80::1%a|b]:22", "contains '|'"),
])
def test_an_inline_host_set_with_a_bad_name_is_an_input_error(argument: str, said: str) -> None:
    expected = r"^--hosts .* is neither a hosts file nor a valid host set: .*" + re.escape(said)
    with pytest.raises(InputError, match=expected):
        load_hosts(argument, NO_STDIN)


def test_a_net_address_with_a_bad_scope_is_refused() -> None:
    with pytest.raises(InputError, match=r"^<stdin>:1: net='\[fe80::1%\$\(x\)\]' is not a host name or IP address"):
        load_hosts("-", io.StringIO("node01 net=[fe80::1%$(x)]\n"))
    (spec,) = load_hosts("-", io.StringIO("node01 net=[fe80::1%ib0]\n"))
    assert spec.net_address == "fe80::1%ib0"


@pytest.mark.parametrize("nodelist", ["gpu[01-02],n$(reboot)", "gpu01,fe80::1%`x`"])
def test_a_slurm_node_list_with_a_bad_name_is_an_input_error_naming_it(nodelist: str) -> None:
    with pytest.raises(InputError, match=r"^\$SLURM_JOB_NODELIST .* is not a valid Slurm node list"):
        job_hosts({"SLURM_JOB_NODELIST": nodelist})


def _config(tmp_path: Path, text: str) -> SshOptions:
    path = tmp_path / "ssh_config"
    path.write_text(text, encoding="utf-8")
    return SshOptions(config_file=str(path), known_hosts=str(tmp_path / "known_hosts"))


BAD_CONFIG = """\
Host scoped
    HostName fe80::1%%$(>pwned)
Host evil-user
    User a;(>pwned)
Host good
    HostName fe80::1%%eth0
Host *
    ProxyCommand nc %h %p %r
"""


@BOTH
def test_a_hostname_or_user_from_the_config_is_that_hosts_problem_naming_the_line(
        tmp_path: Path, ssh_binary: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    options = _config(tmp_path, BAD_CONFIG)

    resolved = resolve_all([HostSpec("scoped"), HostSpec("evil-user"), HostSpec("good")], options, ssh_binary)

    assert list(resolved.hosts) == ["good"] and resolved.hosts["good"].hostname == "fe80::1%eth0"
    assert resolved.problems["scoped"].message.startswith(
        f"{options.config_file}:2: HostName 'fe80::1%$(>pwned)' contains '$', a shell metacharacter")
    assert resolved.problems["evil-user"].message.startswith(
        f"{options.config_file}:4: User 'a;(>pwned)' contains ';', a shell metacharacter")
    assert all("(for host " in problem.message and "; fix: correct the ssh config (" in problem.message
               for problem in resolved.problems.values())
    assert not (tmp_path / "pwned").exists()


@BOTH
def test_hostname_tokens_and_case_as_ssh_expands_them(tmp_path: Path, ssh_binary: str | None) -> None:
    options = _config(tmp_path, "Host n1\n    HostName %h.EXAMPLE\nHost n2\n    HostName FE80::1%%ETH0\n"
                                "Host n3\n    HostName fe80::1%eth0\n")

    assert resolve_host(HostSpec("n1"), options, ssh_binary).hostname == "n1.example"
    assert resolve_host(HostSpec("n2"), options, ssh_binary).hostname == "FE80::1%ETH0"  # an address keeps its case
    with pytest.raises(HostConfigError, match=rf"^{options.config_file}:6: .*%e"):
        resolve_host(HostSpec("n3"), options, ssh_binary)  # ssh expands %e there, and fails: so does the fallback


@needs_ssh
def test_a_bad_name_never_reaches_ssh_G_whose_match_exec_runs_a_shell(tmp_path: Path) -> None:
    ran = tmp_path / "match-exec-ran"
    options = _config(tmp_path, f'Match exec "touch {ran}"\n    User alice\n')

    with pytest.raises(HostConfigError, match=r"host name 'n\$\(x\)' contains '\$'"):
        resolve_host(HostSpec("n$(x)"), options, "ssh")
    assert not ran.exists()

    assert resolve_host(HostSpec("node01"), options, "ssh").user == "alice"
    assert ran.exists()  # the same config with a good name: ssh -G did run Match exec


def test_a_bad_user_option_is_an_input_error_before_anything_runs(tmp_path: Path) -> None:
    options = dataclasses.replace(_config(tmp_path, "Host *\n    ProxyCommand nc %h %p %r\n"), user="x;(>pwned)")

    with pytest.raises(InputError, match=r"^-l/--user 'x;\(>pwned\)' contains ';'.*; fix: ") as caught:
        resolve_all([HostSpec("node01")], options)
    assert not isinstance(caught.value, HostConfigError)


@pytest.mark.parametrize(("entry", "said"), [
    ("j$(>pwned)", "host name 'j$(>pwned)' contains '$'"),
    ("a;b@jump", "user name 'a;b' contains ';'"),
    ("ssh://a%3B(b)@jump", "user name 'a;(b)' contains ';'"),
    ("[fe80::1%`x`]:22", "host name 'fe80::1%`x`' contains '`'"),
    ("-oProxyCommand=x", "host name '-oProxyCommand=x' starts with '-'"),
])
def test_a_proxy_jump_entry_with_a_bad_name_is_refused(entry: str, said: str) -> None:
    with pytest.raises(ProxySettingError, match=r"^ProxyJump host .*: " + re.escape(said)):
        parse_jump_host(entry)


@BOTH
def test_a_bad_hop_anywhere_in_a_proxy_jump_chain_is_that_hosts_unreachable(
        tmp_path: Path, ssh_binary: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    options = _config(tmp_path, "Host target\n    ProxyJump b$(>pwned),good\nHost *\n    ProxyCommand nc %h %p\n")
    resolver = HopResolver(lambda hop, via: resolve_jump_host(hop, options, via, ssh_binary))

    with pytest.raises(Unreachable, match=r"^target: ProxyJump host 'b\$\(>pwned\)': host name .* contains '\$'"):
        route_to(resolve_host(HostSpec("target"), options, ssh_binary), resolver)
    assert not (tmp_path / "pwned").exists()


HOST = ResolvedHost(label="node07", hostname="10.0.0.7", user="alice", port=2222, identity_files=(),
                    proxy_jump=None, connect_timeout_s=5.0, known_hosts_files=(), strict_host_key_checking="yes",
                    original_host="node07", proxy_command="nc %h %p")


@pytest.mark.parametrize(("changes", "said"), [
    ({"hostname": "fe80::1%$(>pwned)"}, "%h would be the host name 'fe80::1%$(>pwned)'"),
    ({"proxy_command": "nc %n %p", "original_host": "n`x`"}, "%n would be the host name 'n`x`'"),
    ({"proxy_command": "nc %h %p %r", "user": "a|b"}, "%r would be the user name 'a|b'"),
])
def test_a_proxy_command_never_expands_a_bad_name(changes: dict[str, str], said: str) -> None:
    host = dataclasses.replace(HOST, **changes)  # type: ignore[arg-type]

    with pytest.raises(ProxySettingError, match=re.escape(said)):
        proxy_command_line(host)


def test_a_proxy_command_without_the_bad_token_is_expanded() -> None:
    host = dataclasses.replace(HOST, proxy_command="nc 10.0.0.7 %p", original_host="n`x`")

    assert proxy_command_line(host) == "nc 10.0.0.7 2222"


@needs_ssh
def test_a_match_exec_command_that_outlives_the_ssh_g_limit_is_ended_with_ssh(tmp_path: Path, monkeypatch) -> None:
    pid_file = tmp_path / "match-exec.pid"
    options = _config(tmp_path, f'Match exec "echo $$ > {pid_file}; exec sleep 600"\n    User alice\n')
    monkeypatch.setattr("gpudiag.transport.sshconfig.SSH_G_TIMEOUT_S", 1.0)
    with pytest.raises(HostConfigError, match=r"'ssh -G' took more than 1 s"):
        resolve_host(HostSpec("node01"), options, "ssh")
    pid = int(pid_file.read_text())  # the shell ssh -G started for Match exec, now `sleep`
    state = Path(f"/proc/{pid}/stat")
    try:  # gone (or a zombie its parent, ended with it, left to init) the moment resolve_host returns
        assert not state.exists() or state.read_text().split(") ", 1)[1].startswith("Z"), state.read_text()
    finally:
        if state.exists():
            os.kill(pid, signal.SIGKILL)
