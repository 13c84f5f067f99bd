"""gpudiag against a real Slurm cluster on this machine (see slurm_cluster.py): node lists, drain and undrain
through the real ``scontrol``, and ``gpudiag sweep --launcher slurm`` through the real ``srun``."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from slurm_cluster import SlurmCluster, requires_slurm
from sshd_hosts import running_after, ssh_config_block
from test_sweep_ssh import NO_COMPARISON

from gpudiag.cli.main import main
from gpudiag.findings import Finding
from gpudiag.slurm.drain import check_start, drain, drain_commands, undrain
from gpudiag.slurm.nodelist import expand_nodelist, scontrol_hostnames
from gpudiag.slurm.reason import read_marker, unmarked
from gpudiag.slurm.resume import HostChecks

pytestmark = requires_slurm

PROBES = ("--probes", "facts,membw", "--duration", "0.2")


def _fail(host: str, kind: str = "slow_gpu", gpu: int | None = 3, metric: str | None = "gemm.tflops",
          deficit_pct: float | None = 17.7, evidence: str = "HW thermal slowdown active in 95 % of samples",
          action: str = "drain", basis: str = "retest") -> Finding:
    return Finding(kind=kind, severity="fail", host=host, evidence=evidence, action=action, gpu=gpu, metric=metric,
                   deficit_pct=deficit_pct, basis=basis)


def _sweep_args(tmp_path: Path, hosts: str | None, *extra: str) -> list[str]:
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text(NO_COMPARISON)
    return ["sweep", *(("--hosts", hosts) if hosts else ()), *PROBES, "--python", sys.executable, "--links", "none",
            "--no-store", "--thresholds", str(thresholds), "--json-detail", "full", "-q",
            "--slurm-bundle-dir", str(tmp_path / "bundles"), *extra]


def _sweep_in_job(cluster: SlurmCluster, tmp_path: Path, salloc: list[str], hosts: str | None,
                  *extra: str) -> tuple[int, dict[str, Any], str]:
    """``salloc SALLOC gpudiag sweep --launcher slurm ...`` as a user types it; (exit status, document, stderr)."""
    out = tmp_path / "slurm.json"
    argv = ["salloc", "--quiet", *salloc, sys.executable, "-m", "gpudiag",
            *_sweep_args(tmp_path, hosts, "--launcher", "slurm", "--json", str(out), *extra)]
    done = subprocess.run(argv, env=cluster.env(), capture_output=True, text=True, timeout=300, check=False,
                          stdin=subprocess.DEVNULL)
    return done.returncode, json.loads(out.read_text()) if out.exists() else {}, done.stderr


def _sweep_here(tmp_path: Path, hosts: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / f"sweep-{len(list(tmp_path.glob('sweep-*.json')))}.json"
    result = CliRunner().invoke(main, _sweep_args(tmp_path, hosts, "--json", str(out), *extra),
                                catch_exceptions=False)
    return result.exit_code, json.loads(out.read_text()) if out.exists() else {}, result.output


def _statuses(document: dict[str, Any]) -> dict[str, str]:
    return {host["host"]: host["status"] for host in document["hosts"]}


def _records(host: dict[str, Any]) -> set[tuple[Any, ...]]:
    return {(r["probe"], r["metric"], r["device"], r["unit"], r["status"]) for r in host["results"]}


# --- the harness and node lists ------------------------------------------------------------------------------


def test_the_cluster_runs_four_idle_nodes_on_this_host(slurm_cluster: SlurmCluster):
    assert slurm_cluster.node_states() == {name: ("idle", "") for name in ("n1", "n2", "n3", "n4")}
    ran = slurm_cluster.run(["srun", "-N4", "--label", "printenv", "SLURMD_NODENAME"])
    assert sorted(line.split(": ")[1] for line in ran.stdout.splitlines()) == ["n1", "n2", "n3", "n4"]


@pytest.mark.parametrize("nodelist", ["n[1-4]", "n[1-2,4]", "n4,n[1-2]", "gpu[001-003,010],cpu1", "a[1-2]b[7-8]"])
def test_node_lists_expand_as_slurm_expands_them(clean_slurm_cluster: SlurmCluster, nodelist: str):
    assert expand_nodelist(nodelist) == scontrol_hostnames(nodelist)


# --- drain and undrain through the real scontrol -------------------------------------------------------------


def _passed(*checks: str, failed: str | None = None) -> HostChecks:
    return HostChecks("", frozenset(checks), failed)


def _unmarked_states(cluster: SlurmCluster) -> dict[str, tuple[str, str]]:
    """Each node's (state, reason) with gpudiag's drain marker, where there is one, left out."""
    return {name: (state, unmarked(reason)) for name, (state, reason) in cluster.node_states().items()}


def test_a_fail_finding_drains_exactly_its_node_with_the_reason(clean_slurm_cluster: SlurmCluster):
    findings = [_fail("n2"), Finding(kind="slow_gpu", severity="warn", host="n3", evidence="a dip", action="watch")]
    commands = drain_commands(findings)
    outcomes = drain(commands)
    assert [outcome.error for outcome in outcomes] == [None]
    assert read_marker(clean_slurm_cluster.node_states()["n2"][1]) is not None  # gpudiag's own drain
    states = _unmarked_states(clean_slurm_cluster)
    assert states["n2"] == ("drained", "gpudiag: gemm: slow_gpu GPU 3 gemm.tflops -18 % below: HW thermal slowdown "
                                       "active in 95 % of samples")
    assert {name: state for name, (state, _) in states.items() if name != "n2"} == dict.fromkeys(
        ("n1", "n3", "n4"), "idle")


def test_nodes_with_the_same_reason_drain_in_one_command_and_node_text_reaches_slurm_safely(
        clean_slurm_cluster: SlurmCluster):
    """NVML/CUDA error text with quotes, $( ), backticks, backslashes and a newline: Slurm keeps a
    reason of safe characters, and whatever reads it back (sinfo, a hook, a shell) runs nothing."""
    folder = Path(tempfile.mkdtemp(prefix="gd", dir="/tmp"))  # a short path: the reason is kept whole
    marker = folder / "r"
    try:
        evidence = f'row remap "failed"; pending $(touch {marker}) `touch {marker}` \\ back\nslash'
        findings = [_fail(name, kind="ecc", action="reset_gpu", gpu=0, metric=None, deficit_pct=None,
                          evidence=evidence, basis="telemetry") for name in ("n1", "n3")]
        commands = drain_commands(findings)
        assert len(commands) == 1 and commands[0][2] == "NodeName=n[1,3]"
        assert all(outcome.ok for outcome in drain(commands))
        states = _unmarked_states(clean_slurm_cluster)
        expected = (f"gpudiag: telemetry: ecc GPU 0: row remap failed, pending touch {marker} touch {marker} back "
                    f"slash")
        assert states["n1"] == states["n3"] == ("drained", expected)
        shown = clean_slurm_cluster.run(["sh", "-c", 'eval "echo $(sinfo -h -N -n n1 -o %E)"']).stdout
        assert unmarked(shown.strip()) == expected and not marker.exists()  # even eval'd by a careless hook
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_without_run_nothing_is_drained_and_the_command_is_said(clean_slurm_cluster: SlurmCluster):
    outcomes = drain(drain_commands([_fail("n4")]), run=False)
    assert [outcome.ran for outcome in outcomes] == [False]
    assert outcomes[0].command.startswith("scontrol update NodeName=n4 State=DRAIN 'Reason=gpudiag: gemm: slow_gpu")
    assert clean_slurm_cluster.node_states()["n4"] == ("idle", "")


def test_undrain_resumes_what_gpudiag_drained_and_never_a_node_drained_by_hand(clean_slurm_cluster: SlurmCluster):
    clean_slurm_cluster.set_state("n1", "DRAIN", "hand")
    assert all(outcome.ok for outcome in drain(drain_commands([_fail("n2"), _fail("n3")])))
    start = check_start(["n1", "n2", "n3", "n4"])  # a check begins
    # n1 (by hand) and n2 (by gpudiag) pass their GEMM now; n3 still fails
    result = undrain({"n1": _passed("gemm"), "n2": _passed("facts", "gemm"), "n4": _passed("gemm"),
                      "n3": _passed(failed="fail slow_gpu GPU 3 gemm.tflops -18%")}, start)
    assert result.ok and result.resumed == ("n2",)
    assert [name for name, _ in result.kept] == ["n1", "n3"] and '"hand"' in result.kept[0][1]
    assert result.kept[1][1] == ("drained by gpudiag for gemm; it does not pass this run (fail slow_gpu GPU 3 "
                                 "gemm.tflops -18%): left drained")
    states = clean_slurm_cluster.node_states()
    assert states["n1"] == ("drained", "hand")
    assert states["n2"][0] in ("idle", "idle*")  # back in service (* until slurmctld's next ping answers)
    assert states["n3"][0] == "drained" and states["n3"][1].startswith("gpudiag:")
    assert states["n4"] == ("idle", "")


def test_undrain_resumes_only_on_the_check_that_drained_the_node(clean_slurm_cluster: SlurmCluster):
    """NHC's rule against Slurm's own record of the reason: a node drained for its NIC is resumed
    by a run that passed a link test with it, never by one that made none; a reason that reads as
    gpudiag's but that a person set (no drain marker) is never resumed."""
    drain(drain_commands([_fail("n1", kind="slow_nic", gpu=None, metric="link.tcp", deficit_pct=41.0,
                                evidence="slow with every partner"),
                          _fail("n2", kind="slow_nic", gpu=None, metric="link.tcp", deficit_pct=41.0,
                                evidence="slow with every partner")]))
    clean_slurm_cluster.set_state("n3", "DRAIN", "gpudiag: links: slow_nic link.tcp -41%")
    start = check_start(["n1", "n2", "n3"])
    every_node_probe = ("facts", "telemetry", "gemm", "membw")
    result = undrain({"n1": _passed(*every_node_probe), "n2": _passed(*every_node_probe, "links"),
                      "n3": _passed(*every_node_probe, "links")}, start)
    assert result.resumed == ("n2",)
    kept = dict(result.kept)
    assert kept["n1"] == ("drained by gpudiag for links; this run made and passed no links check on it, so it could "
                          "not see that fault: left drained")
    assert "carries no drain marker of gpudiag's" in kept["n3"]
    states = _unmarked_states(clean_slurm_cluster)
    assert states["n1"] == ("drained", "gpudiag: links: slow_nic link.tcp -41 % below: slow with every partner")
    assert states["n2"][0] in ("idle", "idle*") and states["n3"][0] == "drained"


def test_undrain_without_run_only_says_its_command(clean_slurm_cluster: SlurmCluster):
    drain(drain_commands([_fail("n2")]))
    result = undrain({"n2": _passed("gemm")}, check_start(["n2"]), run=False)
    assert [outcome.command for outcome in result.commands] == ["scontrol update NodeName=n2 State=RESUME"]
    assert clean_slurm_cluster.node_states()["n2"][0] == "drained"


def test_a_drain_set_after_the_check_began_is_never_resumed_by_it(clean_slurm_cluster: SlurmCluster):
    """The check began with n1 in service and n2 drained by gpudiag; another check then drained n1
    and drained n2 again. This check's measurements predate both drains: it resumes neither, though
    both nodes passed it."""
    drain(drain_commands([_fail("n2")]))
    start = check_start(["n1", "n2"])
    drain(drain_commands([_fail("n1"), _fail("n2", evidence="slower still")]))  # the other check
    result = undrain({"n1": _passed("facts", "gemm"), "n2": _passed("facts", "gemm")}, start)
    assert result.ok and result.resumed == () and [name for name, _ in result.kept] == ["n1", "n2"]
    assert all(", after this check began (" in why for _, why in result.kept), result.kept
    states = _unmarked_states(clean_slurm_cluster)
    assert states["n1"][0] == states["n2"][0] == "drained" and states["n2"][1].endswith(": slower still")


def test_scontrol_failures_are_reported_not_raised(clean_slurm_cluster: SlurmCluster, tmp_path: Path):
    outcomes = drain([["scontrol", "update", "NodeName=n9", "State=DRAIN", "Reason=gpudiag: x"],
                      *drain_commands([_fail("n1")])])
    assert outcomes[0].error is not None and "Invalid node name" in outcomes[0].error
    assert outcomes[1].ok and clean_slurm_cluster.node_states()["n1"][0] == "drained"
    # a controller that does not answer (scontrol's own words), and no scontrol at all
    down = tmp_path / "scontrol"
    down.write_text("#!/bin/sh\n"
                    "echo 'slurm_load_node error: Unable to contact slurm controller (connect failure)' >&2\nexit 1\n")
    down.chmod(0o755)
    start = check_start(["n1"])
    result = undrain({"n1": _passed("gemm")}, start, scontrol=str(down))
    assert not result.ok and result.resumed == () and "Unable to contact slurm controller" in (result.error or "")
    assert "Unable to contact slurm controller" in (check_start(["n1"], scontrol=str(down)).error or "")
    result = undrain({"n1": _passed("gemm")}, start, scontrol=str(tmp_path / "missing" / "scontrol"))
    assert not result.ok and "not found" in (result.error or "")
    assert clean_slurm_cluster.node_states()["n1"][0] == "drained"


def test_a_hung_scontrol_is_ended_at_the_deadline_with_what_it_started(clean_slurm_cluster: SlurmCluster,
                                                                       tmp_path: Path):
    """A scontrol that never answers (a wrapper stuck in a sleep of its own) costs the deadline
    given, not its minute; it and its child are ended; the real one then still works."""
    pids = tmp_path / "pids"
    hung = tmp_path / "scontrol"
    hung.write_text(f"#!/bin/sh\necho $$ >> {pids}\nsleep 300 &\necho $! >> {pids}\nwait\n")
    hung.chmod(0o755)
    started = time.monotonic()
    outcomes = drain(drain_commands([_fail("n4")], scontrol=str(hung)), deadline=time.monotonic() + 2.0)
    result = undrain({"n4": _passed("gemm")}, check_start(["n4"]), scontrol=str(hung), deadline=time.monotonic() + 1.0)
    assert time.monotonic() - started < 20  # neither waited its 60 s
    assert outcomes[0].ran and "did not answer within" in (outcomes[0].error or "") and "was ended" in outcomes[0].error
    assert "did not answer within" in (result.error or "") and result.resumed == ()
    started_pids = [int(pid) for pid in pids.read_text().split()]
    assert len(started_pids) == 4 and running_after(started_pids) == []
    assert clean_slurm_cluster.node_states()["n4"] == ("idle", "")


# --- gpudiag sweep --launcher slurm through the real srun ----------------------------------------------------


def test_a_sweep_through_srun_in_an_allocation_reads_what_a_local_sweep_reads(
        clean_slurm_cluster: SlurmCluster, tmp_path: Path):
    steps_before = clean_slurm_cluster.step_ids()
    code, document, stderr = _sweep_in_job(clean_slurm_cluster, tmp_path, ["-N4"], "n[1-4]")
    local_code, local, output = _sweep_here(tmp_path, "localhost")
    assert _statuses(document) == dict.fromkeys(("n1", "n2", "n3", "n4"), "ok"), stderr
    assert _statuses(local) == {"localhost": "ok"}, output
    expected = _records(local["hosts"][0])
    assert expected and all(_records(host) == expected for host in document["hosts"])
    assert all(host["results"][0]["details"]["hostname"] == local["hosts"][0]["results"][0]["details"]["hostname"]
               for host in document["hosts"] if host["results"][0]["probe"] == "facts")
    assert code == local_code == document["summary"]["exit_code"] == 3  # nothing compared: unchecked, as here
    # one srun step ran the probes on all four nodes
    assert len(clean_slurm_cluster.step_ids() - steps_before) == 1


def test_inside_a_job_the_hosts_default_to_its_nodes(clean_slurm_cluster: SlurmCluster, tmp_path: Path):
    code, document, stderr = _sweep_in_job(clean_slurm_cluster, tmp_path, ["-N2", "-w", "n[2-3]"], None)
    assert _statuses(document) == {"n2": "ok", "n3": "ok"}, stderr


def test_a_node_outside_the_allocation_is_unreachable_with_the_reason(clean_slurm_cluster: SlurmCluster,
                                                                     tmp_path: Path):
    code, document, stderr = _sweep_in_job(clean_slurm_cluster, tmp_path, ["-N2", "-w", "n[1,4]"], "n[1,3-4]")
    assert _statuses(document) == {"n1": "ok", "n3": "unreachable", "n4": "ok"}, stderr
    error = next(host["error"] for host in document["hosts"] if host["host"] == "n3")
    assert "not in this job's allocation (n[1,4])" in error
    assert code == 3


def test_a_node_down_in_slurm_is_unreachable_and_the_others_are_swept_in_a_job_of_their_own(
        clean_slurm_cluster: SlurmCluster, tmp_path: Path):
    clean_slurm_cluster.set_state("n3", "DOWN", "cable pulled")
    code, document, output = _sweep_here(tmp_path, "n[2-4]", "--launcher", "slurm")
    assert _statuses(document) == {"n2": "ok", "n3": "unreachable", "n4": "ok"}, output
    error = next(host["error"] for host in document["hosts"] if host["host"] == "n3")
    assert "n3 is DOWN" in error and '"cable pulled"' in error
    assert any(f["kind"] == "unchecked" and f["host"] == "n3" for f in document["findings"])
    assert code == 3


def test_a_host_slurm_does_not_know_is_unreachable(clean_slurm_cluster: SlurmCluster, tmp_path: Path):
    code, document, output = _sweep_here(tmp_path, "n9,n1", "--launcher", "slurm")
    assert _statuses(document) == {"n9": "unreachable", "n1": "ok"}, output
    assert "Slurm knows no node called n9" in document["hosts"][0]["error"]


def test_a_node_srun_cannot_use_falls_back_to_ssh_when_asked(clean_slurm_cluster: SlurmCluster, make_sshd_fleet,
                                                            tmp_path: Path):
    fleet = make_sshd_fleet(1)
    host = fleet.hosts[0]
    known_hosts = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = tmp_path / "ssh_config"  # n3's SSH side is the sshd node01
    config.write_text(ssh_config_block(host, fleet.user, fleet.client_key_path, known_hosts).replace(
        f"Host {host.name}\n", "Host n3\n", 1))
    clean_slurm_cluster.set_state("n3", "DRAIN", "hand")
    ssh = ("--ssh-config", str(config), "--known-hosts", str(known_hosts))
    code, document, output = _sweep_here(tmp_path, "n3", "--launcher", "slurm", *ssh)
    assert _statuses(document) == {"n3": "unreachable"} and "n3 is IDLE+DRAIN" in document["hosts"][0]["error"]
    code, document, output = _sweep_here(tmp_path, "n[2-3]", "--launcher", "slurm", "--launcher-fallback", "ssh",
                                         *ssh)
    assert _statuses(document) == {"n2": "ok", "n3": "ok"}, output
    assert host.log_path.read_text(errors="replace").count("Accepted publickey") == 1
    assert code == 3


def test_one_failing_and_one_hung_node_cost_only_themselves_in_the_one_step(clean_slurm_cluster: SlurmCluster,
                                                                            tmp_path: Path):
    python = tmp_path / "python"  # the nodes' Python: the probes fail at once on n2 and hang on n3
    python.write_text(f"""#!/bin/sh
if [ "$1" = -m ] && [ "$SLURMD_NODENAME" = n2 ]; then echo "torch: CUDA driver broken on n2" >&2; exit 3; fi
if [ "$1" = -m ] && [ "$SLURMD_NODENAME" = n3 ]; then exec sleep 600; fi
exec {sys.executable} "$@"
""")
    python.chmod(0o755)
    steps_before = clean_slurm_cluster.step_ids()
    code, document, output = _sweep_here(tmp_path, "n[1-3]", "--launcher", "slurm", "--python", str(python),
                                         "--host-timeout", "20")
    assert _statuses(document) == {"n1": "ok", "n2": "probe_error", "n3": "timeout"}, output
    errors = {host["host"]: host["error"] for host in document["hosts"]}
    assert "torch: CUDA driver broken on n2" in errors["n2"]
    assert "within 20 s" in errors["n3"]
    assert len(clean_slurm_cluster.step_ids() - steps_before) == 1
    assert code == 3
    assert not _sleeping(clean_slurm_cluster)


def test_pair_tests_run_as_one_node_steps_inside_the_job(clean_slurm_cluster: SlurmCluster, tmp_path: Path):
    code, document, stderr = _sweep_in_job(clean_slurm_cluster, tmp_path, ["-N3"], None, "--links", "full",
                                           "--net-backend", "tcp", "--net-duration", "0.3", "--net-streams", "1")
    assert _statuses(document) == dict.fromkeys(("n1", "n2", "n3"), "ok"), stderr
    measured = {frozenset((link["a"], link["b"])) for link in document["links"] if link["value"]}
    assert measured == {frozenset(pair) for pair in (("n1", "n2"), ("n1", "n3"), ("n2", "n3"))}, document["links"]
    assert code == 3  # nothing compared (NO_COMPARISON): unchecked, as in every sweep here


def test_ctrl_c_ends_the_step_on_every_node(clean_slurm_cluster: SlurmCluster, tmp_path: Path):
    python = tmp_path / "python"  # the probes hang on every node
    python.write_text(f'#!/bin/sh\nif [ "$1" = -m ]; then exec sleep 600; fi\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    out = tmp_path / "interrupted.json"
    sweep = subprocess.Popen([sys.executable, "-m", "gpudiag",
                              *_sweep_args(tmp_path, "n[1-4]", "--launcher", "slurm", "--python", str(python),
                                           "--json", str(out))],
                             env=clean_slurm_cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(_sleeping(clean_slurm_cluster)) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(_sleeping(clean_slurm_cluster)) == 4
    sweep.send_signal(signal.SIGINT)
    _, stderr = sweep.communicate(timeout=60)
    assert sweep.returncode == 130, stderr
    assert _statuses(json.loads(out.read_text())) == dict.fromkeys(("n1", "n2", "n3", "n4"), "interrupted")
    deadline = time.monotonic() + 15
    while _sleeping(clean_slurm_cluster) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _sleeping(clean_slurm_cluster)


def _sleeping(cluster: SlurmCluster) -> list[int]:
    return [pid for pid in cluster.process_ids() if _command_line(pid).startswith("sleep 600")]


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""  # it ended meanwhile
