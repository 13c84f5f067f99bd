"""Benchmark of the sweep's SSH fan-out against pdsh, on real sshd hosts of this machine.

For 32 and 64 hosts (OpenSSH servers on loopback addresses, started here), in the same run:
- gpudiag's transport: resolve each host with ``ssh -G``, connect with paramiko, run ``true``;
- ``pdsh -R ssh -f FANOUT -w HOSTS true`` with the same ssh config;
and prints the wall-clock ratio (target <= 1.2x pdsh) and the controller's CPU time per host
(target <= 10 ms; its own process, and separately the ``ssh -G`` children it starts).
Then the end-to-end wall time of ``gpudiag sweep`` with real CPU probes on the same hosts.

Usage: python bench/fanout.py [--sizes 32 64] [--repeat 3]
       python bench/fanout.py --smoke      (4 hosts, one run: seconds)
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from sshd_hosts import SshdFleet  # noqa: E402

from gpudiag.cli.connect import connect  # noqa: E402
from gpudiag.hosts import HostSpec  # noqa: E402
from gpudiag.run.fanout import SweepOptions  # noqa: E402
from gpudiag.run.hostprobe import ProbeOptions  # noqa: E402
from gpudiag.run.request import LinkOptions, Reach, SweepRequest  # noqa: E402
from gpudiag.run.runtime import Runtime  # noqa: E402
from gpudiag.run.sweep import run_sweep  # noqa: E402
from gpudiag.transport.fleet import FleetConnector  # noqa: E402
from gpudiag.transport.ssh import SshSettings  # noqa: E402
from gpudiag.transport.sshconfig import SshOptions, resolve_all  # noqa: E402


def cpu_seconds() -> tuple[float, float]:
    """(this process's CPU seconds, its finished children's CPU seconds)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def gpudiag_fanout(names: list[str], options: SshOptions, fanout: int) -> tuple[float, float, float]:
    """Wall seconds, own CPU seconds and children's CPU seconds to run ``true`` on every host."""
    specs = [HostSpec(name) for name in names]
    cpu_before, children_before = cpu_seconds()
    started = time.perf_counter()
    resolved = resolve_all(specs, options)
    connector = FleetConnector(resolved, options, SshSettings())

    def one(spec: HostSpec) -> int | None:
        session = connector.connect(spec)
        try:
            return session.run(["true"], 30.0).exit_status
        finally:
            session.close()

    with ThreadPoolExecutor(max_workers=fanout) as pool:
        statuses = list(pool.map(one, specs))
    connector.close()
    wall = time.perf_counter() - started
    cpu_after, children_after = cpu_seconds()
    if any(status != 0 for status in statuses):
        raise SystemExit(f"gpudiag transport: a host did not run `true`: {statuses}")
    return wall, cpu_after - cpu_before, children_after - children_before


def pdsh_fanout(names: list[str], config: Path, fanout: int) -> float:
    """Wall seconds of pdsh running ``true`` on every host through ssh with the same config."""
    environment = {**os.environ, "PDSH_RCMD_TYPE": "ssh", "PDSH_SSH_ARGS_APPEND": f"-F {config}"}
    started = time.perf_counter()
    done = subprocess.run(["pdsh", "-R", "ssh", "-f", str(fanout), "-w", ",".join(names), "true"],
                          env=environment, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"pdsh failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return wall


def end_to_end(names: list[str], hosts_file: Path, options: SshOptions, fanout: int) -> tuple[float, int]:
    request = SweepRequest(
        hosts_argument=str(hosts_file),
        sweep=SweepOptions(probe=ProbeOptions(names=("facts", "gemm", "membw"), duration_s=0.5,
                                              python=sys.executable), fanout=fanout),
        reach=Reach(ssh=options, settings=SshSettings()), links=LinkOptions(mode="none"))
    started = time.perf_counter()
    result = run_sweep(request, Runtime(connect=connect))  # SSH sessions, as the command line builds them
    return time.perf_counter() - started, sum(host.ok for host in result.hosts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fanout", type=int, default=64)
    parser.add_argument("--no-end-to-end", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="4 hosts, one run, the end-to-end sweep included")
    arguments = parser.parse_args()
    if arguments.smoke:
        arguments.sizes, arguments.repeat = [4], 1
    if shutil.which("pdsh") is None:
        raise SystemExit("pdsh is not installed: run scripts/install-test-deps")
    print(f"fan-out benchmark: {os.cpu_count()} CPUs, fanout {arguments.fanout}, median of {arguments.repeat} runs")
    print(f"{'hosts':>5} {'gpudiag s':>10} {'pdsh s':>8} {'ratio':>6} {'CPU ms/host':>12} {'+ssh -G ms/host':>16}")
    for size in arguments.sizes:
        with SshdFleet(size, log_level="ERROR") as fleet, tempfile.TemporaryDirectory() as folder:
            known = fleet.write_known_hosts(Path(folder) / "known_hosts")
            config = fleet.write_ssh_config(Path(folder) / "ssh_config", known_hosts_path=known)
            options = SshOptions(config_file=str(config), known_hosts=str(known))
            names = fleet.host_names()
            ours, pdsh, own_cpu, child_cpu = [], [], [], []
            for _ in range(arguments.repeat):
                wall, own, children = gpudiag_fanout(names, options, arguments.fanout)
                ours.append(wall)
                own_cpu.append(own)
                child_cpu.append(children)
                pdsh.append(pdsh_fanout(names, config, arguments.fanout))
            ratio = statistics.median(ours) / statistics.median(pdsh)
            own_ms, child_ms = (1000 * statistics.median(cpu) / size for cpu in (own_cpu, child_cpu))
            print(f"{size:>5} {statistics.median(ours):10.2f} {statistics.median(pdsh):8.2f} {ratio:6.2f} "
                  f"{own_ms:12.1f} {child_ms:16.1f}")
            if not arguments.no_end_to_end:
                hosts_file = fleet.write_hosts_file(Path(folder) / "hosts.txt")
                wall, ok = end_to_end(names, hosts_file, options, arguments.fanout)
                print(f"      end-to-end sweep (facts, gemm, membw on the CPU, 0.5 s): {wall:.1f} s, {ok}/{size} ok")
    print("targets: ratio <= 1.2; controller CPU <= 10 ms per host")


if __name__ == "__main__":
    main()
