"""Host keys judged as OpenSSH judges them, shown against OpenSSH itself: for each known_hosts content, a sweep
and the real ``ssh -o StrictHostKeyChecking=accept-new`` connect to the same sshd (sshd_hosts.py) with the
same files, and must agree, each leaving the known_hosts file byte-identical.

The host is reached as ``LocalHost`` (its ``HostName``, on 127.0.0.1), so ssh and gpudiag file it as
``[localhost]:PORT``; the entries on file spell it ``[LOCALHOST]:PORT``, plain, hashed by ``ssh-keygen -H``,
as a pattern, in the user file, the global file or a KnownHostsCommand's output. Both with the ``ssh``
binary (``ssh -G``) and without it (the paramiko fallback reads the config).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from sshd_hosts import SSH_KEYGEN, SshdFleet, TestHost, generate_ed25519_key

from gpudiag.cli.main import main

SSH = shutil.which("ssh")
NO_COMPARISON = ('{"schema": "gpudiag.thresholds/1", "min_peers": {"value": 100000, "unit": "count"}, '
                 '"small_fleet_min_hosts": {"value": 100000, "unit": "count"}, '
                 '"host_load_per_cpu": {"value": 1000000, "unit": "ratio"}}')
# What the real ssh says when it refuses (stderr), by gpudiag's status for the host.
SSH_SAYS = {"host_key_changed": "REMOTE HOST IDENTIFICATION HAS CHANGED", "revoked": "REVOKED HOST KEY"}

pytestmark = pytest.mark.skipif(SSH is None, reason="needs the OpenSSH client (ssh) to compare with")


def _other_key(tmp_path: Path) -> str:
    """Another ed25519 public key, as ``ssh-ed25519 AAAA...``: a stale or forged entry."""
    return generate_ed25519_key(tmp_path / "other_host_key", "other")


def _entries(case: str, node: TestHost, tmp_path: Path) -> tuple[str, str, str]:
    """(user file, global file, KnownHostsCommand output) for ``case``, with the host filed in capitals."""
    name = f"[LOCALHOST]:{node.port}"
    other = _other_key(tmp_path)
    if case == "right key":
        return f"{name} {node.host_public_key_line}\n", "", ""
    if case == "right key, pattern":
        return f"[Local*]:* {node.host_public_key_line}\n", "", ""
    if case in ("another key", "another key, hashed"):
        return f"{name} {other}\n", "", ""
    if case == "another key, global file":
        return "", f"{name} {other}\n", ""
    if case == "another key, KnownHostsCommand":
        return "", "", f"{name} {other}\n"
    if case == "revoked":  # the user file trusts the key, the global file revokes it
        key = node.host_public_key_line
        return f"[localhost]:{node.port} {key}\n", f"@revoked [LOCALHOST]:* {key}\n", ""
    raise ValueError(case)


def _write(fleet: SshdFleet, tmp_path: Path, case: str) -> dict[str, Path]:
    (node,) = fleet.hosts
    user_text, global_text, command_text = _entries(case, node, tmp_path)
    paths = {"known_hosts": tmp_path / "known_hosts", "global": tmp_path / "global_known_hosts",
             "config": tmp_path / "ssh_config", "hosts": fleet.write_hosts_file(tmp_path / "hosts.txt"),
             "json": tmp_path / "sweep.json", "thresholds": tmp_path / "thresholds.json"}
    paths["known_hosts"].write_text(user_text)
    paths["global"].write_text(global_text)
    if case.endswith("hashed"):
        subprocess.run([str(SSH_KEYGEN), "-H", "-f", str(paths["known_hosts"])], check=True, capture_output=True)
        assert paths["known_hosts"].read_text().startswith("|1|")
    extra = {}
    if command_text:  # as SSSD's sss_ssh_knownhosts: the keys a directory holds for the name
        (tmp_path / "directory").write_text(command_text)
        command = tmp_path / "knownhostscommand"
        command.write_text(f"#!/bin/sh\n{shutil.which('cat')} {tmp_path / 'directory'}\n")  # PATH may be bare
        command.chmod(0o755)
        extra["node01"] = f"KnownHostsCommand {command} %H"
    fleet.write_ssh_config(paths["config"], extra_by_host=extra, known_hosts_path=paths["known_hosts"])
    text = paths["config"].read_text().replace(f"HostName {node.address}", "HostName LocalHost")
    text = text.replace("GlobalKnownHostsFile /dev/null", f"GlobalKnownHostsFile {paths['global']}")
    paths["config"].write_text(text)
    paths["thresholds"].write_text(NO_COMPARISON)
    return paths


def _sweep(paths: dict[str, Path]) -> tuple[int, str, str | None, str]:
    """A sweep with --accept-new-host-keys; returns (exit code, node01's status, its error, output)."""
    folder = paths["hosts"].parent
    args = ["sweep", "--hosts", str(paths["hosts"]), "--ssh-config", str(paths["config"]), "--accept-new-host-keys",
            "--thresholds", str(paths["thresholds"]), "--store", str(folder / "gpudiag.db"),
            "--python", sys.executable, "--probes", "facts", "--links", "none", "--json", str(paths["json"]), "-q"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    (host,) = json.loads(paths["json"].read_text())["hosts"]
    return result.exit_code, host["status"], host["error"], result.output


def _openssh(paths: dict[str, Path]) -> subprocess.CompletedProcess[str]:
    """The real ssh, accept-new, with the same config and files."""
    assert SSH is not None
    return subprocess.run([SSH, "-F", str(paths["config"]), "-o", "StrictHostKeyChecking=accept-new", "node01", "true"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("resolver", ["ssh-G", "paramiko"])
@pytest.mark.parametrize(("case", "status"), [
    ("right key", "ok"),
    ("right key, pattern", "ok"),
    ("another key", "host_key_changed"),
    ("another key, hashed", "host_key_changed"),
    ("another key, global file", "host_key_changed"),
    ("another key, KnownHostsCommand", "host_key_changed"),
    ("revoked", "revoked"),
])
def test_gpudiag_and_openssh_agree_on_a_host_filed_in_capitals(
        make_sshd_fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, status: str, resolver: str):
    fleet = make_sshd_fleet(1, first_address="127.0.0.1")
    paths = _write(fleet, tmp_path, case)
    before = {name: paths[name].read_bytes() for name in ("known_hosts", "global")}

    openssh = _openssh(paths)
    if resolver == "paramiko":
        no_ssh = tmp_path / "bin"
        no_ssh.mkdir()
        monkeypatch.setenv("PATH", str(no_ssh))  # no ssh to ask: paramiko's parser reads the file
        assert shutil.which("ssh") is None
    code, got, error, output = _sweep(paths)

    if status == "ok":
        assert (openssh.returncode, got, error) == (0, "ok", None), (openssh.stderr, output)
        assert code == 0, output
    else:
        assert openssh.returncode == 255 and SSH_SAYS[status] in openssh.stderr, openssh.stderr
        assert got == "host_key_changed" and code == 3, output
        assert f"[localhost]:{fleet.hosts[0].port}" in error
        assert ("marked @revoked" in error) if status == "revoked" else ("differs from the ssh-ed25519 key" in error)
    # neither wrote a second key beside the one on file, nor touched a file at all
    assert {name: paths[name].read_bytes() for name in ("known_hosts", "global")} == before
