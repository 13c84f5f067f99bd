"""Benchmark: what one hostile node costs the controller, on real sshd hosts of this machine.

Sweeps N hosts (OpenSSH servers on loopback addresses, started here; the facts probe) with
``gpudiag sweep`` in a child process under a 3 GiB address-space limit, and measures, in the same
run:
- the controller's peak resident memory (the kernel's ru_maxrss of the child) of a clean sweep, of
  one where one host prints one endless line, and of one where it prints endless valid-looking
  records; and the difference to the clean sweep (target: <= 200 MiB);
- the time from a hung SFTP server (the bundle copy: a node with a hung home file system) to that
  host's ``timeout`` under ``--host-timeout`` (target: the host timeout, give or take seconds).

Usage: python bench/hostile_output.py [--hosts 8] [--host-timeout 20]
       python bench/hostile_output.py --smoke      (3 hosts, a 10 s host timeout: under a minute)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from limited_run import DEFAULT_ADDRESS_SPACE, GIB, run_limited  # noqa: E402
from sshd_hosts import SshdFleet  # noqa: E402

RECORD = ('{"probe": "gemm", "device": "cuda:0", "metric": "tflops", "value": 700.0, "unit": "TFLOP/s", '
          '"status": "ok"}')
MISBEHAVIOURS = {"clean": None, "endless line": "exec tr '\\0' x </dev/zero", "endless records": f"exec yes '{RECORD}'"}
# The benchmark measures the controller, not the judging of figures: no key gets enough peers.
NO_COMPARISON = ('{"schema": "gpudiag.thresholds/1", "min_peers": {"value": 100000, "unit": "count"}, '
                 '"host_load_per_cpu": {"value": 1000000, "unit": "ratio"}}')
TARGET_MIB = 200.0


@dataclass(frozen=True)
class SweepRun:
    """One sweep in its child process: exit status, wall seconds, peak RSS (MiB) and the hosts' entries."""

    exit_code: int
    wall_s: float
    peak_rss_mib: float
    hosts: dict[str, dict]


class Bench:
    """The fleet's files, and sweeps of it with a node Python that misbehaves on one host."""

    def __init__(self, fleet: SshdFleet, folder: Path, host_timeout_s: float) -> None:
        self.fleet = fleet
        self.folder = folder
        self.host_timeout_s = host_timeout_s
        known = fleet.write_known_hosts(folder / "known_hosts")
        config = fleet.write_ssh_config(folder / "ssh_config", known_hosts_path=known)
        hosts = fleet.write_hosts_file(folder / "hosts.txt")
        thresholds = folder / "thresholds.json"
        thresholds.write_text(NO_COMPARISON)
        self.arguments = ["--hosts", str(hosts), "--ssh-config", str(config), "--known-hosts", str(known),
                          "--thresholds", str(thresholds), "--no-store", "--probes", "facts", "--links", "none", "-q"]

    def sweep(self, name: str, misbehaviour: str | None, target: str) -> SweepRun:
        """Sweep every host, the node Python running ``misbehaviour`` (shell) on ``target``."""
        document = self.folder / f"sweep-{name.replace(' ', '-')}.json"
        python = self._wrapper(name, misbehaviour, target)
        run = run_limited([sys.executable, "-m", "gpudiag", "sweep", *self.arguments, "--python", python,
                           "--host-timeout", f"{self.host_timeout_s:g}", "--json", str(document)],
                          timeout_s=600, cwd=ROOT)
        if not document.exists():
            raise SystemExit(f"the {name} sweep wrote no document (exit {run.returncode}): {run.stderr[-2000:]}")
        hosts = {host["host"]: host for host in json.loads(document.read_text())["hosts"]}
        return SweepRun(run.returncode, run.wall_s, run.peak_rss_kib / 1024, hosts)

    def _wrapper(self, name: str, misbehaviour: str | None, target: str) -> str:
        wrapper = self.folder / f"python-{name.replace(' ', '-')}"
        branch = (f'  *" {self.fleet.host(target).address} "*) {misbehaviour} ;;\n' if misbehaviour else "")
        wrapper.write_text(f'#!/bin/sh\ncase "$SSH_CONNECTION" in\n{branch}  *) exec {sys.executable} "$@" ;;\n'
                           f"esac\n")
        wrapper.chmod(0o755)
        return str(wrapper)


def _hang_sftp(fleet: SshdFleet, name: str, folder: Path) -> None:
    """The host's SFTP server reads its requests and never answers (it ends when the channel closes)."""
    script = folder / "hung-sftp"
    script.write_text("#!/bin/sh\ncat >/dev/null\n")
    script.chmod(0o755)
    fleet.host(name).restart_with_sftp_subsystem(str(script))


def _check(run: SweepRun, target: str, status: str, words: str) -> None:
    host = run.hosts[target]
    if host["status"] != status or words not in (host["error"] or ""):
        raise SystemExit(f"{target}: expected {status} ({words}), got {host['status']}: {host['error']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=8, help="sshd hosts (default 8)")
    parser.add_argument("--host-timeout", type=float, default=None,
                        help="--host-timeout of every sweep (s; default 20, 10 with --smoke)")
    parser.add_argument("--smoke", action="store_true", help="3 hosts, a 10 s host timeout")
    arguments = parser.parse_args()
    count = 3 if arguments.smoke else arguments.hosts
    if arguments.host_timeout is None:
        arguments.host_timeout = 10.0 if arguments.smoke else 20.0
    print(f"hostile-output benchmark: {count} sshd hosts, {os.cpu_count()} CPUs, the facts probe, the controller "
          f"under a {DEFAULT_ADDRESS_SPACE / GIB:g} GiB address-space limit")
    with SshdFleet(count, log_level="ERROR") as fleet, tempfile.TemporaryDirectory() as folder:
        target = fleet.host_names()[1]
        bench = Bench(fleet, Path(folder), arguments.host_timeout)
        runs = {name: bench.sweep(name, shell, target) for name, shell in MISBEHAVIOURS.items()}
        _check(runs["endless line"], target, "probe_error", "a line longer than")
        _check(runs["endless records"], target, "probe_error", "of output")
        print(f"{'sweep':<18} {'exit':>4} {'wall s':>7} {'peak RSS MiB':>13} {'above clean MiB':>16} "
              f"{'ok hosts':>8} {'hostile host s':>14}")
        clean = runs["clean"].peak_rss_mib
        for name, run in runs.items():
            ok = sum(host["status"] == "ok" for host in run.hosts.values())
            hostile_s = run.hosts[target]["duration_s"]
            print(f"{name:<18} {run.exit_code:>4} {run.wall_s:7.1f} {run.peak_rss_mib:13.1f} "
                  f"{run.peak_rss_mib - clean:16.1f} {ok:>3}/{len(run.hosts):<4} {hostile_s:14.1f}")
        worst = max(run.peak_rss_mib for run in runs.values()) - clean
        print(f"peak RSS with one hostile host: {worst:+.1f} MiB above the clean sweep (target <= {TARGET_MIB:g} MiB)")
        _hang_sftp(fleet, target, Path(folder))
        hung = bench.sweep("hung sftp", None, target)
        _check(hung, target, "timeout", "copying the probe bundle")
        duration = hung.hosts[target]["duration_s"]
        late = duration - arguments.host_timeout
        print(f"hung SFTP on {target}: timeout after {duration:.1f} s at --host-timeout {arguments.host_timeout:g} "
              f"({late:+.1f} s); the sweep took {hung.wall_s:.1f} s, exit {hung.exit_code}")


if __name__ == "__main__":
    main()
