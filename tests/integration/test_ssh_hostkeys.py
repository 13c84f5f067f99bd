"""Host keys checked as ssh checks them, on real sshd hosts (sshd_hosts.py): GlobalKnownHostsFile (plain, hashed
by ``ssh-keygen -H``, or by pattern), KnownHostsCommand (as SSSD's ``sss_ssh_knownhosts %H``), a key that a
ProxyCommand writes into the global file while it connects (as ``sss_ssh_knownhostsproxy``), changed, revoked and
certificate-authority entries, and ``--accept-new-host-keys`` writing the user's file only.

Each sweep reads the harness's ssh_config, whose ``UserKnownHostsFile`` is the test's user file; its
``GlobalKnownHostsFile /dev/null`` is replaced by the test's global file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from sshd_hosts import SSH_KEYGEN, SshdFleet, TestHost, wait_listening

from gpudiag.cli.main import main

NO_COMPARISON = ('{"schema": "gpudiag.thresholds/1", "min_peers": {"value": 100000, "unit": "count"}, '
                 '"small_fleet_min_hosts": {"value": 100000, "unit": "count"}, '
                 '"host_load_per_cpu": {"value": 1000000, "unit": "ratio"}}')


def _write(fleet: SshdFleet, tmp_path: Path, *, user: list[TestHost], global_text: str,
           extra: dict[str, str] | None = None) -> dict[str, Path]:
    known_hosts = fleet.write_known_hosts(tmp_path / "known_hosts", user)
    global_file = tmp_path / "global_known_hosts"
    global_file.write_text(global_text)
    config = fleet.write_ssh_config(tmp_path / "ssh_config", extra_by_host=extra, known_hosts_path=known_hosts)
    config.write_text(config.read_text().replace("GlobalKnownHostsFile /dev/null",
                                                 f"GlobalKnownHostsFile {global_file}"))
    (tmp_path / "thresholds.json").write_text(NO_COMPARISON)
    return {"known_hosts": known_hosts, "global": global_file, "config": config,
            "hosts": fleet.write_hosts_file(tmp_path / "hosts.txt"), "json": tmp_path / "sweep.json"}


def _sweep(paths: dict[str, Path], *extra: str) -> tuple[int, dict[str, tuple[str, str | None]], str]:
    """A sweep in this process; returns (exit code, host → (status, error), output)."""
    folder = paths["hosts"].parent
    args = ["sweep", "--hosts", str(paths["hosts"]), "--ssh-config", str(paths["config"]),
            "--thresholds", str(folder / "thresholds.json"), "--store", str(folder / "gpudiag.db"),
            "--python", sys.executable, "--probes", "facts", "--links", "none", "--json", str(paths["json"]), "-q",
            *extra]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    document = json.loads(paths["json"].read_text())
    return result.exit_code, {h["host"]: (h["status"], h["error"]) for h in document["hosts"]}, result.output


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def _all_ok(fleet: SshdFleet) -> dict[str, tuple[str, None]]:
    return {name: ("ok", None) for name in fleet.host_names()}


def test_keys_only_in_the_global_file_are_trusted_plain_hashed_or_by_pattern(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(3)
    node01, node02, node03 = fleet.hosts
    hashed = tmp_path / "hashed"
    hashed.write_text(node02.known_hosts_line() + "\n")
    subprocess.run([str(SSH_KEYGEN), "-H", "-f", str(hashed)], check=True, capture_output=True)
    assert hashed.read_text().startswith("|1|")
    pattern_line = f"[{node03.address}]:*,!node99 {node03.host_public_key_line}\n"
    paths = _write(fleet, tmp_path, user=[],
                   global_text=node01.known_hosts_line() + "\n" + hashed.read_text() + pattern_line)

    code, hosts, output = _sweep(paths)

    assert (code, hosts) == (0, _all_ok(fleet)), output
    assert paths["known_hosts"].read_text() == ""  # nothing new: the global file vouched for every key


def test_a_known_hosts_command_is_asked_as_ssh_asks_it(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(3)
    node01, node02, node03 = fleet.hosts
    directory = tmp_path / "directory"  # what SSSD would answer from FreeIPA: node01 only
    directory.write_text(node01.known_hosts_line() + "\n")
    calls = tmp_path / "calls"
    lookup = _script(tmp_path / "sss_ssh_knownhosts", f'echo "$@" >> {calls}\ngrep -F "$1 " {directory} || true\n')
    broken = _script(tmp_path / "broken", 'echo "cannot reach SSSD" >&2\nexit 3\n')
    command = f"KnownHostsCommand {lookup} %H %I"
    paths = _write(fleet, tmp_path, user=[], global_text="",
                   extra={"node01": command, "node02": command, "node03": f"KnownHostsCommand {broken} %H"})

    code, hosts, output = _sweep(paths)

    assert code == 3, output
    assert hosts["node01"] == ("ok", None)
    assert hosts["node02"][0] == "host_key_unknown" and "KnownHostsCommand" in hosts["node02"][1]
    assert hosts["node03"][0] == "host_key_unknown"
    assert "exited with status 3: cannot reach SSSD" in hosts["node03"][1]
    # ORDER before the handshake, HOSTNAME after it, under the name the key is filed as
    assert sorted(calls.read_text().splitlines()) == sorted([
        f"{node01.address} ORDER", f"[{node01.address}]:{node01.port} HOSTNAME",
        f"{node02.address} ORDER", f"[{node02.address}]:{node02.port} HOSTNAME"])

    code, hosts, output = _sweep(paths, "--accept-new-host-keys")

    # a command that fails stops the connection, as it stops ssh: never accepted
    assert (hosts["node02"], hosts["node03"][0]) == (("ok", None), "host_key_unknown"), output
    assert paths["known_hosts"].read_text() == node02.known_hosts_line() + "\n"


def test_changed_revoked_and_certificate_authority_entries_are_refused(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(3)
    node01, node02, node03 = fleet.hosts
    authority = tmp_path / "ca"
    subprocess.run([str(SSH_KEYGEN), "-q", "-t", "ed25519", "-N", "", "-f", str(authority)], check=True)
    ca_key = " ".join(authority.with_suffix(".pub").read_text().split()[:2])
    global_text = (f"{node01.known_hosts_line()}\n@revoked * {node02.host_public_key_line}\n"
                   f"@cert-authority [{node03.address}]:* {ca_key}\n")
    paths = _write(fleet, tmp_path, user=[node02], global_text=global_text)
    before = paths["known_hosts"].read_text()
    node01.regenerate_host_key_and_restart()  # the global file now holds a stale key

    for extra in ((), ("--accept-new-host-keys",)):
        code, hosts, output = _sweep(paths, *extra)

        assert code == 3, output
        assert {name: status for name, (status, _) in hosts.items()} == {
            "node01": "host_key_changed", "node02": "host_key_changed", "node03": "host_key_unknown"}
        assert f"({paths['global']}:1)" in hosts["node01"][1] and "ssh-keygen -R" in hosts["node01"][1]
        assert f"@revoked ({paths['global']}:2)" in hosts["node02"][1]
        assert "does not check host certificates" in hosts["node03"][1]
        assert paths["known_hosts"].read_text() == before and paths["global"].read_text() == global_text


def test_accept_new_writes_the_user_file_and_never_the_global_one(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(2)
    node01, node02 = fleet.hosts
    paths = _write(fleet, tmp_path, user=[], global_text=node01.known_hosts_line() + "\n")

    code, hosts, output = _sweep(paths)
    assert hosts["node02"][0] == "host_key_unknown", output
    assert f"{paths['known_hosts']}, {paths['global']}" in hosts["node02"][1]

    code, hosts, output = _sweep(paths, "--accept-new-host-keys")
    assert (code, hosts) == (0, _all_ok(fleet)), output
    assert paths["known_hosts"].read_text() == node02.known_hosts_line() + "\n"
    assert paths["global"].read_text() == node01.known_hosts_line() + "\n"

    code, hosts, output = _sweep(paths)
    assert (code, hosts) == (0, _all_ok(fleet)), output


def test_a_key_the_proxy_command_writes_while_connecting_is_read(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(2)
    node01, node02 = fleet.hosts
    # as sss_ssh_knownhostsproxy: the key goes into the global file, then the connection is relayed
    proxy = _script(tmp_path / "knownhostsproxy", f'echo "[$1]:$2 {node02.host_public_key_line}" '
                                                  f'>> {tmp_path / "global_known_hosts"}\nexec nc "$1" "$2"\n')
    paths = _write(fleet, tmp_path, user=[], global_text=node01.known_hosts_line() + "\n",
                   extra={"node02": f"ProxyCommand {proxy} %h %p"})

    code, hosts, output = _sweep(paths, "--fanout", "1")  # node01 first: the global file is read before

    assert (code, hosts) == (0, _all_ok(fleet)), output
    assert paths["known_hosts"].read_text() == ""


def test_the_key_type_on_file_is_the_one_asked_for(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(1)
    (node01,) = fleet.hosts
    ecdsa = node01.host_key_path.parent / "ssh_host_ecdsa_key"
    subprocess.run([str(SSH_KEYGEN), "-q", "-t", "ecdsa", "-N", "", "-f", str(ecdsa)], check=True)
    node01.stop()
    with node01.config_path.open("a") as handle:
        handle.write(f"HostKey {ecdsa}\n")
    node01.start()
    wait_listening([node01], 10.0)
    ecdsa_line = " ".join(ecdsa.with_suffix(".pub").read_text().split()[:2])
    # only the ECDSA key is on file: ssh (and gpudiag) ask for it rather than the ed25519 key the node prefers
    paths = _write(fleet, tmp_path, user=[], global_text=f"[{node01.address}]:{node01.port} {ecdsa_line}\n")

    code, hosts, output = _sweep(paths)

    assert (code, hosts) == (0, _all_ok(fleet)), output
