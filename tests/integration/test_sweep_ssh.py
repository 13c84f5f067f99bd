"""``gpudiag sweep`` against real OpenSSH servers on loopback addresses (see sshd_hosts.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from sshd_hosts import SshdFleet, interrupt_in_second_link_round

from gpudiag.bundle import locate_bundle
from gpudiag.cli.main import main
from gpudiag.store.store import Store


def _setup(fleet: SshdFleet, tmp_path: Path, known=None, extra=None, names=None) -> dict[str, Path]:
    known_hosts = fleet.write_known_hosts(tmp_path / "known_hosts", known)
    config = fleet.write_ssh_config(tmp_path / "ssh_config", extra_by_host=extra, known_hosts_path=known_hosts)
    hosts = fleet.write_hosts_file(tmp_path / "hosts.txt", names)
    return {"known_hosts": known_hosts, "config": config, "hosts": hosts, "json": tmp_path / "sweep.json"}


# These tests are about reaching hosts, not judging them: CPU figures of hosts that share this
# machine's two cores are not a fleet, so no key gets enough peers to be compared, and the load
# of the test run itself (every "host" is this machine) must not make each one a starved node.
NO_COMPARISON = ('{"schema": "gpudiag.thresholds/1", "min_peers": {"value": 100000, "unit": "count"}, '
                 '"small_fleet_min_hosts": {"value": 100000, "unit": "count"}, '
                 '"host_load_per_cpu": {"value": 1000000, "unit": "ratio"}}')


def _sweep(paths: dict[str, Path], *extra: str, python: str = sys.executable) -> tuple[int, dict, str]:
    thresholds = paths["hosts"].parent / "thresholds.json"
    thresholds.write_text(NO_COMPARISON)
    args = ["sweep", "--hosts", str(paths["hosts"]), "--ssh-config", str(paths["config"]),
            "--thresholds", str(thresholds), "--store", str(paths["hosts"].parent / "gpudiag.db"),
            "--known-hosts", str(paths["known_hosts"]), "--python", python, "--probes", "facts",
            "--json", str(paths["json"]), "-q", *(() if "--links" in extra else ("--links", "none")), *extra]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    document = json.loads(paths["json"].read_text()) if paths["json"].exists() else {}
    return result.exit_code, document, result.output


def test_one_connection_per_host_serves_the_node_probes_and_every_link_round(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(4)
    paths = _setup(fleet, tmp_path)
    logins_before = {name: _logins(fleet, name) for name in fleet.host_names()}
    code, document, output = _sweep(paths, "--links", "full", "--net-backend", "tcp", "--net-duration", "0.3",
                                    "--net-streams", "2", "--net-address", "iface:lo")
    assert _statuses(document) == {name: "ok" for name in fleet.host_names()}, output
    measured = {(link["a"], link["b"]) for link in document["links"] if link["value"] is not None}
    assert len(measured) == 6 and all(link["value"] > 0 and link["backend"] == "tcp" for link in document["links"])
    assert {link["phase"] for link in document["links"]} <= {"full", "confirm"}
    # node probes, the address lookup and three rounds of pair tests: one login per host
    assert {name: _logins(fleet, name) - logins_before[name] for name in fleet.host_names()} == dict.fromkeys(
        fleet.host_names(), 1)
    assert not fleet.processes_matching(r"probes net-(server|client)")


def _logins(fleet: SshdFleet, name: str) -> int:
    return fleet.host(name).log_path.read_text(errors="replace").count("Accepted publickey")


def _statuses(document: dict) -> dict[str, str]:
    return {host["host"]: host["status"] for host in document["hosts"]}


def _script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_every_host_is_probed_over_ssh_and_the_bundle_is_shipped_once(sshd_fleet: SshdFleet, tmp_path: Path):
    paths = _setup(sshd_fleet, tmp_path)
    code, document, output = _sweep(paths, "--probes", "facts,membw", "--duration", "0.2")
    assert _statuses(document) == {name: "ok" for name in sshd_fleet.host_names()}
    for host in document["hosts"]:
        assert host["facts"]["gpu_count"] == 0 and host["facts"]["hostname"]
        (membw,) = host["results"]
        assert membw["probe"] == "membw" and membw["status"] == "ok" and membw["value"] > 0
    # Every host was reached and measured, but nothing compared the figures: that is not a pass.
    assert code == 3, output
    (uncompared,) = [f for f in document["findings"] if f["kind"] == "unchecked"]
    assert uncompared["host"] == "node[01-08]" and uncompared["basis"] == "comparison"
    assert {f["kind"] for f in document["findings"]} <= {"unchecked", "slow_node"}  # slow_node: a loaded test box
    summary = document["summary"]
    assert (summary["hosts_total"], summary["hosts_ok"], summary["results_not_compared"]) == (8, 8, 8)
    assert "8 hosts · 8 ok" in output
    # the bundle lies in the remote user's cache under its content hash; a second sweep copies nothing
    shipped = Path.home() / ".cache" / "gpudiag" / f"bundle-{locate_bundle().content_hash[:16]}"
    assert (shipped / "probes" / "gemm.py").read_bytes() == (locate_bundle().root / "probes" / "gemm.py").read_bytes()
    stamp = (shipped / ".complete").stat().st_mtime_ns
    code, document, output = _sweep(paths)
    assert code == 0, output  # facts alone: nothing to compare, nothing left unchecked
    assert (shipped / ".complete").stat().st_mtime_ns == stamp


def test_unreachable_unknown_and_changed_keys_and_rejected_login_each_get_their_status(
        make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(6)
    node = {name: fleet.host(name) for name in fleet.host_names()}
    known = [node["node01"], node["node02"], node["node04"], node["node05"], node["node06"]]  # node03 unknown
    paths = _setup(fleet, tmp_path, known=known)
    node["node04"].regenerate_host_key_and_restart()  # known_hosts now holds a stale key
    node["node05"].reject_client_key()
    node["node06"].stop()
    code, document, output = _sweep(paths)
    assert code == 3, output
    assert _statuses(document) == {"node01": "ok", "node02": "ok", "node03": "host_key_unknown",
                                   "node04": "host_key_changed", "node05": "auth_failed", "node06": "unreachable"}
    errors = {host["host"]: host["error"] for host in document["hosts"]}
    assert "--accept-new-host-keys" in errors["node03"]
    assert "ssh-keygen -R" in errors["node04"]
    unchecked = sorted(f["host"] for f in document["findings"] if f["kind"] == "unchecked")
    assert unchecked == ["node03", "node04", "node05", "node06"]
    assert "node03 host_key_unknown" in output

    before = paths["known_hosts"].read_text()
    code, document, _ = _sweep(paths, "--accept-new-host-keys")
    statuses = _statuses(document)
    assert statuses["node03"] == "ok"  # accepted and recorded
    assert statuses["node04"] == "host_key_changed"  # never accepted, even when asked
    after = paths["known_hosts"].read_text()
    assert after.startswith(before)  # nothing lost
    assert after[len(before):] == " ".join(node["node03"].known_hosts_line().split()[:3]) + "\n"


def test_a_hung_probe_times_out_and_leaves_no_process_on_the_host(sshd_fleet: SshdFleet, tmp_path: Path):
    paths = _setup(sshd_fleet, tmp_path, names=["node01", "node02"])
    marker = f"gpudiag-hang-{time.monotonic_ns()}"
    hang = _script(tmp_path, marker, "sleep 300\n")
    started = time.monotonic()
    code, document, output = _sweep(paths, "--host-timeout", "3", python=hang)
    assert time.monotonic() - started < 20
    assert code == 3, output
    assert _statuses(document) == {"node01": "timeout", "node02": "timeout"}
    time.sleep(1.0)
    assert not sshd_fleet.processes_matching(marker)


def test_a_stray_line_keeps_the_host_ok_but_only_garbage_is_a_probe_error(sshd_fleet: SshdFleet, tmp_path: Path):
    paths = _setup(sshd_fleet, tmp_path, names=["node01"])
    # A site hook that prints on stdout before the bundle's first record: the records still count.
    chatty = _script(tmp_path, "chatty", f"echo 'sitecustomize: proxy settings loaded'\nexec {sys.executable} \"$@\"\n")
    code, document, output = _sweep(paths, python=chatty)
    (host,) = document["hosts"]
    assert host["status"] == "ok" and host["error"] is None, output
    assert host["facts"]["cpu_count"] >= 1
    # ... and the stray line is said, in the document and in the text report
    assert host["stray_output"] == {"count": 1, "lines": ["sitecustomize: proxy settings loaded"]}
    assert "stray output" in output and "sitecustomize: proxy settings loaded" in output
    paths["json"].unlink()
    garbage = _script(tmp_path, "python", "echo 'Segmentation fault (core dumped)'\n")
    code, document, _ = _sweep(paths, python=garbage)
    assert code == 3
    (host,) = document["hosts"]
    assert host["status"] == "probe_error" and "not a JSON record" in host["error"]


def test_a_host_behind_a_bastion_is_reached_through_it(make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(3, log_level="DEBUG1")
    bastion = fleet.host("node01")
    paths = _setup(fleet, tmp_path, extra={"node02": "ProxyJump node01", "node03": "ProxyJump node01"},
                   names=["node02", "node03"])
    code, document, output = _sweep(paths)
    assert code == 0, output
    assert _statuses(document) == {"node02": "ok", "node03": "ok"}
    log = bastion.log_path.read_text()
    for target in ("node02", "node03"):
        assert f"{fleet.host(target).address} port {fleet.host(target).port}" in log  # forwarded by the bastion


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupt_writes_what_finished_and_ends_the_remote_probes(sshd_fleet: SshdFleet, tmp_path: Path,
                                                                      signum: int):
    paths = _setup(sshd_fleet, tmp_path, names=["node01", "node02", "node03"])
    nap = f"{300 + time.monotonic_ns() % 9000}"  # a sleep no other test runs, to find and count
    done = tmp_path / "done"
    done.mkdir()
    # node03's probes hang; node01 and node02 finish at once and leave a mark
    slow = _script(tmp_path, "python", f'case "$SSH_CONNECTION" in\n'
                   f'  *" {sshd_fleet.host("node03").address} "*) exec sleep {nap} ;;\n'
                   f'  *) {sys.executable} "$@"; status=$?; touch {done}/$$; exit $status ;;\nesac\n')
    process = subprocess.Popen(
        [sys.executable, "-m", "gpudiag", "sweep", "--hosts", str(paths["hosts"]), "--ssh-config",
         str(paths["config"]), "--known-hosts", str(paths["known_hosts"]), "--python", slow,
         "--probes", "facts", "--json", str(paths["json"]), "-q", "--store", str(tmp_path / "gpudiag.db")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while (not sshd_fleet.processes_matching(f"^sleep {nap}$") or len(list(done.iterdir())) < 2) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)  # the quick hosts' results travel back
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    document = json.loads(paths["json"].read_text())
    assert _statuses(document) == {"node01": "ok", "node02": "ok", "node03": "interrupted"}
    assert document["summary"]["exit_code"] == 130
    with Store.open(tmp_path / "gpudiag.db", readonly=True) as store:  # what finished was kept
        stored = store.load_document(document["sweep_id"])
    assert _statuses(stored) == _statuses(document)
    time.sleep(1.0)
    assert not sshd_fleet.processes_matching(f"^sleep {nap}$")  # the hung probe was ended on its host


def test_ctrl_c_ends_the_probe_of_a_node_whose_login_shell_prints_before_every_command(make_sshd_fleet,
                                                                                       tmp_path: Path):
    # What a .bashrc with a warning does (pyenv's "cannot rehash", a module system's notice): lines on
    # stderr before gpudiag's own first line, one of them looking like it; and a last one unfinished.
    noise = tmp_path / "noisy_shell_start"
    noise.write_text("echo 'warning: the module system is not loaded' >&2\n"
                     "echo 'gpudiag-pid-0123456789abcdef=1' >&2\n"
                     "printf '%0300d' 0 >&2\n")
    fleet = make_sshd_fleet(2, session_env={"BASH_ENV": str(noise)})
    paths = _setup(fleet, tmp_path)
    nap = f"{300 + time.monotonic_ns() % 9000}"  # a sleep no other test runs
    hang = _script(tmp_path, "python", f"exec sleep {nap}\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "gpudiag", "sweep", "--hosts", str(paths["hosts"]), "--ssh-config",
         str(paths["config"]), "--known-hosts", str(paths["known_hosts"]), "--python", hang,
         "--probes", "facts", "--json", str(paths["json"]), "-q", "--store", str(tmp_path / "gpudiag.db")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(fleet.processes_matching(f"^sleep {nap}$")) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)  # at once: the PID lines may still be on their way
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert _statuses(json.loads(paths["json"].read_text())) == {"node01": "interrupted", "node02": "interrupted"}
    deadline = time.monotonic() + 5  # `timeout` passes the TERM on to its child a moment after `kill`
    while fleet.processes_matching(f"^sleep {nap}$") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not fleet.processes_matching(f"^sleep {nap}$")  # ended on both nodes, not at their deadline


def test_ctrl_c_during_a_link_round_keeps_the_pairs_that_finished_and_ends_every_pair_process(
        make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(4)
    paths = _setup(fleet, tmp_path)
    process = subprocess.Popen(
        [sys.executable, "-m", "gpudiag", "sweep", "--hosts", str(paths["hosts"]), "--ssh-config",
         str(paths["config"]), "--known-hosts", str(paths["known_hosts"]), "--python", sys.executable,
         "--probes", "facts", "--links", "full", "--net-backend", "tcp", "--net-duration", "1.5",
         "--json", str(paths["json"]), "-q", "--store", str(tmp_path / "gpudiag.db")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    code, stderr, seconds = interrupt_in_second_link_round(process, fleet, first_round_pairs=2)  # 4-host round robin
    assert code == 130, stderr
    assert seconds < 20
    document = json.loads(paths["json"].read_text())
    assert document["summary"]["exit_code"] == 130 and _statuses(document) == dict.fromkeys(fleet.host_names(), "ok")
    # round 1 finished (two pairs, measured); nothing the interrupt cut short is reported as a failure
    assert len(document["links"]) >= 2 and all(link["value"] > 0 for link in document["links"])
    assert not [f for f in document["findings"] if f["kind"] in ("link_error", "slow_nic", "slow_link")]
    time.sleep(1.0)
    assert not fleet.processes_matching(r"probes net-(server|client)")


def test_hosts_without_a_data_address_are_left_out_of_the_rounds_and_said_to_be_unchecked(
        make_sshd_fleet, tmp_path: Path):
    fleet = make_sshd_fleet(4)
    paths = _setup(fleet, tmp_path)
    # each host's data-plane address from the hosts file; node04 has none
    paths["hosts"].write_text("".join(f"{name} net={fleet.host(name).address}\n" for name in fleet.host_names()[:3])
                              + "node04\n")
    code, document, output = _sweep(paths, "--links", "full", "--net-backend", "tcp", "--net-duration", "0.3",
                                    "--net-streams", "1", "--net-address", "field")
    assert code == 3, output
    assert {(link["a"], link["b"]) for link in document["links"]} == {
        ("node01", "node02"), ("node01", "node03"), ("node02", "node03")}
    (left_out,) = [f for f in document["findings"] if f["host"] == "node04"]
    assert left_out["kind"] == "unchecked" and "no net= address" in left_out["evidence"]


def test_an_interface_lookup_that_hangs_ends_within_the_budget(make_sshd_fleet, tmp_path: Path):
    """--net-address iface:NAME asks each node for the address: a node that never answers costs the
    lookup only until the run's --budget, and leaves its host out of the pair tests, unchecked."""
    fleet = make_sshd_fleet(2)
    paths = _setup(fleet, tmp_path)
    python = _script(tmp_path, "python",
                     f'if [ "$3" = net-info ]; then exec sleep 301; fi\nexec {sys.executable} "$@"\n')
    started = time.monotonic()
    # 30 s: the node probes (SSH, the bundle, a Python start) must leave the link phase its 2 s on
    # a loaded machine; at 20 s they once did not, and the hosts were unchecked for the budget.
    code, document, output = _sweep(paths, "--links", "screen", "--net-backend", "tcp", "--net-address", "iface:lo",
                                    "--budget", "30", python=python)
    elapsed = time.monotonic() - started
    assert _statuses(document) == {name: "ok" for name in fleet.host_names()}, output
    assert elapsed < 35, elapsed
    left_out = {f["host"] for f in document["findings"] if f["kind"] == "unchecked"
                and "left out of the link rounds" in f["evidence"]}
    assert left_out == set(fleet.host_names()), document["findings"]
    assert not document["links"] and code == 3
    deadline = time.monotonic() + 15  # the node's own timeout ends it (TERM, KILL 5 s later)
    while fleet.processes_matching(r"^sleep 301$") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not fleet.processes_matching(r"^sleep 301$")
