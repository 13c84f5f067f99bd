"""KnownHostsCommand run as ssh runs it (hostkeycommand.py): words split without a shell, tokens and ${VAR}
expanded in every word but the first, what stops the connection and what only gives no key."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import paramiko
import pytest

from gpudiag.transport.hostkeycommand import (
    HOSTNAME,
    ORDER,
    CommandKeys,
    KnownHostsCommandFailed,
    run_known_hosts_command,
)
from gpudiag.transport.sshconfig import ResolvedHost

HOST = ResolvedHost(label="node07", hostname="10.0.0.7", user="alice", port=2222, identity_files=(),
                    proxy_jump=None, connect_timeout_s=5.0, known_hosts_files=(), strict_host_key_checking="yes",
                    original_host="node07")


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "khcmd"
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(0o755)
    return path


def _with_command(command: str) -> ResolvedHost:
    return dataclasses.replace(HOST, known_hosts_command=command)


def test_tokens_are_expanded_in_every_word_but_the_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "args"
    script = _script(tmp_path, f'for a in "$@"; do printf "%s\\n" "$a"; done > {record}\n')
    monkeypatch.setenv("GPUDIAG_TEST_VAR", "from env")
    key = paramiko.ECDSAKey.generate()
    host = _with_command(f"{script} %H %h %p %n %r %t %I %K %f %% '%h and %p' ${{GPUDIAG_TEST_VAR}} %L")

    keys = run_known_hosts_command(host, HOSTNAME, "[10.0.0.7]:2222", key)

    assert keys.lines == () and keys.note is None
    assert record.read_text(encoding="utf-8").splitlines() == [
        "[10.0.0.7]:2222", "10.0.0.7", "2222", "node07", "alice", "ecdsa-sha2-nistp256", "HOSTNAME",
        key.get_base64(), key.fingerprint, "%", "10.0.0.7 and 2222", "from env", socket.gethostname().split(".")[0]]


def test_before_the_handshake_the_key_tokens_are_none(tmp_path: Path) -> None:
    record = tmp_path / "args"
    script = _script(tmp_path, f'echo "$@" > {record}\n')

    run_known_hosts_command(_with_command(f"{script} %I %t %K %f"), ORDER, "10.0.0.7", None)

    assert record.read_text(encoding="utf-8") == "ORDER NONE NONE NONE\n"


def test_its_output_is_read_as_known_hosts_lines(tmp_path: Path) -> None:
    key = paramiko.ECDSAKey.generate()
    script = _script(tmp_path, f'echo "# from the directory"\necho "$1 {key.get_name()} {key.get_base64()}"\n')

    keys = run_known_hosts_command(_with_command(f"{script} %H"), HOSTNAME, "[10.0.0.7]:2222", key)

    (line,) = keys.lines
    assert line.matches("[10.0.0.7]:2222") and line.key_blob == key.asbytes()
    assert line.where() == f"line 2 of KnownHostsCommand {script}"


@pytest.mark.parametrize(("command", "problem"), [
    ("%s %%Q", "%Q is not a token ssh expands there"),
    ("%s ${GPUDIAG_SURELY_UNSET}", "${GPUDIAG_SURELY_UNSET} is not set"),
])
def test_a_word_ssh_cannot_expand_stops_the_connection(tmp_path: Path, command: str, problem: str) -> None:
    script = _script(tmp_path, "exit 0\n")

    with pytest.raises(KnownHostsCommandFailed, match=problem.replace("$", r"\$")) as caught:
        run_known_hosts_command(_with_command(command % script), HOSTNAME, "x", None)

    assert caught.value.status == "host_key_unknown" and "fix: " in str(caught.value)


def test_a_command_that_fails_stops_the_connection_with_its_words(tmp_path: Path) -> None:
    script = _script(tmp_path, 'echo "sss_ssh_knownhosts: cannot reach SSSD" >&2\nexit 4\n')

    with pytest.raises(KnownHostsCommandFailed, match="exited with status 4: sss_ssh_knownhosts: cannot reach SSSD"):
        run_known_hosts_command(_with_command(f"{script} %H"), HOSTNAME, "x", None)


@pytest.mark.parametrize(("command", "note"), [
    ("khcmd %H", "is not an absolute path"),
    ("/nonexistent/khcmd %H", "could not run"),
    ("/bin/echo 'unbalanced", "contains invalid quotes"),
])
def test_a_command_that_cannot_run_gives_no_key_and_says_why(command: str, note: str) -> None:
    keys = run_known_hosts_command(_with_command(command), HOSTNAME, "x", None)

    assert keys.lines == () and keys.note is not None and note in keys.note


def test_no_command_gives_no_key() -> None:
    assert run_known_hosts_command(HOST, HOSTNAME, "x", None) == CommandKeys(())
