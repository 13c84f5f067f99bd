"""A real Slurm cluster on this machine, owned by one test module: munged, slurmctld and one slurmd per node.

``SlurmCluster(4).start()`` writes a munge key and a ``slurm.conf`` into a private temporary directory, starts
``munged`` on its own socket, ``slurmctld -D`` on a free port and ``slurmd -D -N nX`` for each node ``n1``..``nN``
(every node's NodeHostname is this host, each slurmd on its own free port), and waits until ``sinfo`` shows every
node idle. Commands run against it with ``cluster.env()`` (``SLURM_CONF`` set to its file, any ``SLURM_*`` of an
outer job removed). ``stop()`` cancels its jobs, ends the daemons, kills what is left of them (slurmstepd and
tasks, found by the ``SLURM_CONF`` in their environment) and deletes the directory.

Debian 12's Slurm 22.05 runs several slurmd on one host this way (``slurmd -N`` with a node name per daemon,
``%n`` in the spool and pid paths): no loopback address per node is needed. No cgroups (a container has none to
give): ``proctrack/linuxproc``, ``task/none``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest
from sshd_hosts import descendant_pids, pid_is_running, running_after
from started import Started

from gpudiag.slurm.reason import mark_reason

DAEMONS = {"munged": Path("/usr/sbin/munged"), "slurmctld": Path("/usr/sbin/slurmctld"),
           "slurmd": Path("/usr/sbin/slurmd")}
CLIENTS = ("srun", "salloc", "scontrol", "sinfo", "scancel", "munge")


class SlurmStartError(RuntimeError):
    """A daemon of the cluster did not come up; the message carries the end of its log."""


def slurm_unavailable_reason() -> str | None:
    """Why this machine cannot run a test cluster (a sentence for ``pytest.skip`` naming slurm), or None."""
    missing = [str(path) for path in DAEMONS.values() if not path.exists()]
    missing += [name for name in CLIENTS if shutil.which(name) is None]
    if missing:
        return (f"the slurm test cluster needs Debian's slurm-wlm and munge (missing {', '.join(missing)}); "
                f"run scripts/install-test-deps as root")
    if os.geteuid() != 0:
        return "the slurm test cluster needs root: slurmd starts jobs as their users and munged owns its key"
    return None


# The explicit condition of every test that starts a cluster: Debian's slurm-wlm and munge
# (scripts/install-test-deps), and root for the daemons.
requires_slurm = pytest.mark.skipif(slurm_unavailable_reason() is not None,
                                    reason=f"slurm test cluster: {slurm_unavailable_reason()}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def _log_tail(path: Path, lines: int = 15) -> str:
    text = path.read_text(errors="replace") if path.exists() else "(no log written)"
    return "\n".join(text.splitlines()[-lines:])


def _environment_holds(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False


class SlurmCluster(Started):
    """``count`` nodes ``n1``..``nN`` on this host, one partition ``test`` holding them all (the default).

    ``prolog``: a script slurmd runs when a job is allocated (``Prolog=``, with ``PrologFlags=Alloc``), None
    for none. ``health_check``: a script each slurmd runs at its start and then every ``health_check_interval``
    seconds on the nodes ``health_check_node_state`` names (``HealthCheckProgram=``, ``HealthCheckInterval=``,
    ``HealthCheckNodeState=``), None for none; a cluster with one is started once every node has registered,
    idle or drained (its check may drain a node). ``gpus``: the GPUs a node is configured with, by node name
    (``Gres=gpu:N``, ``GresTypes=gpu``; a node not named has none), their gres.conf naming empty files of the
    cluster's folder as their devices (slurmd refuses a count-only ``gpu``). A context manager:
    ``with SlurmCluster(4) as cluster:`` starts and stops it.
    """

    def __init__(self, count: int = 4, *, prolog: str | None = None, health_check: str | None = None,
                 health_check_interval: int = 5, health_check_node_state: str = "IDLE",
                 gpus: Mapping[str, int] | None = None,
                 start_timeout_s: float = 60.0) -> None:
        if count < 1:
            raise ValueError("a cluster needs a node")
        self.count = count
        self.prolog = prolog
        self.health_check = health_check
        self.health_check_interval = health_check_interval
        self.health_check_node_state = health_check_node_state
        self.gpus = dict(gpus or {})
        self.start_timeout_s = start_timeout_s
        self.hostname = socket.gethostname()
        self.directory: Path | None = None
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def conf_path(self) -> Path:
        return self._dir / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self._dir / "munge.socket"

    @property
    def _dir(self) -> Path:
        if self.directory is None:
            raise RuntimeError("the cluster is not started")
        return self.directory

    def node_names(self) -> list[str]:
        return [f"n{index}" for index in range(1, self.count + 1)]

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """This process's environment for commands against the cluster: SLURM_CONF set, an outer job's
        ``SLURM_*`` variables removed; ``extra`` on top."""
        env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf_path)
        env.update(extra or {})
        return env

    def run(self, argv: list[str], timeout_s: float = 60.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command against the cluster; raises CalledProcessError with ``check`` on failure."""
        return subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=timeout_s, check=check,
                              stdin=subprocess.DEVNULL)

    def node_states(self) -> dict[str, tuple[str, str]]:
        """Each node's (state as scontrol spells it, e.g. ``IDLE+DRAIN``; reason or "")."""
        states: dict[str, tuple[str, str]] = {}
        for line in self.run(["sinfo", "-N", "-h", "-o", "%N|%T|%E"]).stdout.splitlines():
            name, state, reason = line.split("|", 2)
            states[name] = (state, "" if reason == "none" else reason)
        return states

    def wait_idle(self, names: Iterable[str] | None = None, timeout_s: float | None = None,
                  states_wanted: Iterable[str] = ("idle",)) -> None:
        """Wait until every node of ``names`` (default: all) is idle (or in any of ``states_wanted``, as sinfo
        spells them); raises SlurmStartError with the logs."""
        wanted = set(names or self.node_names())
        accepted = set(states_wanted)
        deadline = time.monotonic() + (timeout_s or self.start_timeout_s)
        states: dict[str, tuple[str, str]] = {}
        while time.monotonic() < deadline:
            self._check_alive()
            with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
                states = self.node_states()
                if all(states.get(name, ("",))[0] in accepted for name in wanted):
                    return
            time.sleep(0.2)
        raise SlurmStartError(f"nodes not {'/'.join(sorted(accepted))} after {timeout_s or self.start_timeout_s} s: "
                              f"{states}\n"
                              f"{_log_tail(self._dir / 'slurmctld.log')}")

    def set_state(self, nodes: str, state: str, reason: str | None = None) -> None:
        """``scontrol update NodeName=nodes State=state [Reason=reason]``."""
        self.run(["scontrol", "update", f"NodeName={nodes}", f"State={state}",
                  *([f"Reason={reason}"] if reason else [])])

    def drain_as_gpudiag(self, node: str, reason: str) -> str:
        """Drain ``node`` as gpudiag's own drain leaves it (as if an earlier check had drained it):
        ``reason`` with gpudiag's drain marker of now, set as the user gpudiag runs as here (root).
        Returns the reason Slurm keeps."""
        marked = mark_reason(reason)
        self.set_state(node, "DRAIN", marked)
        return marked

    def reset(self) -> None:
        """Cancel every job and return every node to service (between tests that drained or downed some)."""
        self.run(["scancel", "--quiet", "--full", "--user", "root"], check=False)
        for name, (state, _) in self.node_states().items():
            if state != "idle":
                self.run(["scontrol", "update", f"NodeName={name}", "State=RESUME"], check=False)
        self.wait_idle()

    def step_ids(self) -> set[str]:
        """The job steps (``JOB.STEP``) any slurmd of the cluster launched tasks for, from their logs."""
        ids: set[str] = set()
        for log in self._dir.glob("slurmd-*.log"):
            for line in log.read_text(errors="replace").splitlines():
                if "launch task StepId=" in line:
                    ids.add(line.split("launch task StepId=", 1)[1].split()[0])
        return ids

    def start(self) -> SlurmCluster:
        """Write the configuration, start munged, slurmctld and every slurmd, wait until every node is idle.
        Raises SlurmStartError (the cluster is stopped again)."""
        if self.directory is not None:
            raise RuntimeError("a cluster starts once; make a new SlurmCluster")
        with contextlib.ExitStack() as undo:
            undo.callback(self.stop)  # whatever came up goes down again if the rest does not
            self._start()
            undo.pop_all()
        return self

    def _start(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="gpudiag-slurm-"))
        self.directory.chmod(0o755)  # munged wants its socket's folder reachable by everyone
        for sub in ("state", "spool"):
            (self.directory / sub).mkdir()
        for name in self.node_names():  # each slurmd's spool folder made here: one slurmd once found none
            (self.directory / "spool" / name).mkdir()
        key = self.directory / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._spawn("munged", [str(DAEMONS["munged"]), "-F", f"--socket={self.munge_socket}", f"--key-file={key}",
                               f"--pid-file={self._dir / 'munged.pid'}", f"--log-file={self._dir / 'munged.log'}",
                               f"--seed-file={self._dir / 'munged.seed'}"])
        self._wait_munge()
        ports = [_free_port() for _ in range(self.count + 1)]
        if self.gpus:
            for index in range(max(self.gpus.values())):
                (self._dir / f"gpu{index}").write_text("")
            (self._dir / "gres.conf").write_text("".join(
                f"NodeName={name} Name=gpu File={self._dir}/gpu[0-{count - 1}]\n" for name, count in self.gpus.items()))
        self.conf_path.write_text(self.config_text(ports[0], ports[1:]))
        self._spawn("slurmctld", [str(DAEMONS["slurmctld"]), "-D", "-i"])
        for name in self.node_names():
            self._spawn(f"slurmd-{name}", [str(DAEMONS["slurmd"]), "-D", "-N", name])
        # a health check runs before a slurmd registers and may drain its node: registered is enough then
        self.wait_idle(states_wanted=("idle", "drained") if self.health_check else ("idle",))

    def config_text(self, controller_port: int, node_ports: list[int]) -> str:
        """The cluster's slurm.conf: its own ports, files under its directory, munge on its own socket."""
        directory = self._dir
        nodes = "".join(f"NodeName={name} NodeHostname={self.hostname} NodeAddr={self.hostname} Port={port} "
                        f"CPUs=1 {f'Gres=gpu:{self.gpus[name]} ' if name in self.gpus else ''}State=UNKNOWN\n"
                        for name, port in zip(self.node_names(), node_ports, strict=True))
        prolog = f"Prolog={self.prolog}\n" if self.prolog else ""
        if self.health_check:
            prolog += (f"HealthCheckProgram={self.health_check}\nHealthCheckInterval={self.health_check_interval}\n"
                       f"HealthCheckNodeState={self.health_check_node_state}\n")
        gres_types = "GresTypes=gpu\n" if self.gpus else ""
        return f"""\
{gres_types}ClusterName=gpudiagtest
SlurmctldHost={self.hostname}
SlurmctldPort={controller_port}
SlurmdPort={node_ports[0]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={directory / "state"}
SlurmdSpoolDir={directory / "spool" / "%n"}
SlurmctldPidFile={directory / "slurmctld.pid"}
SlurmdPidFile={directory / "slurmd-%n.pid"}
SlurmctldLogFile={directory / "slurmctld.log"}
SlurmdLogFile={directory / "slurmd-%n.log"}
SelectType=select/cons_tres
SchedulerType=sched/builtin
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=1
SlurmdTimeout=300
MessageTimeout=30
KillWait=2
InactiveLimit=0
PrologFlags=Alloc
{prolog}{nodes}PartitionName=test Nodes=n[1-{self.count}] Default=YES MaxTime=INFINITE State=UP
"""

    def _spawn(self, name: str, argv: list[str]) -> None:
        with (self._dir / f"{name}.out").open("ab") as out:
            self.processes[name] = subprocess.Popen(argv, env=self.env(), stdin=subprocess.DEVNULL, stdout=out,
                                                    stderr=subprocess.STDOUT, start_new_session=True)

    def _wait_munge(self) -> None:
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            self._check_alive()
            if self.munge_socket.exists():
                encoded = subprocess.run(["munge", "-n", "-S", str(self.munge_socket)], capture_output=True,
                                         check=False, stdin=subprocess.DEVNULL)
                if encoded.returncode == 0:
                    return
            time.sleep(0.05)
        raise SlurmStartError(f"munged did not answer on {self.munge_socket}:\n{_log_tail(self._dir / 'munged.out')}")

    def _check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                log = self._dir / (f"{name}.log" if name != "munged" else "munged.out")
                raise SlurmStartError(f"{name} exited with status {process.returncode}:\n{_log_tail(log)}\n"
                                      f"{_log_tail(self._dir / f'{name}.out')}")

    def process_ids(self) -> set[int]:
        """Every live process of the cluster: the daemons, their children (slurmscriptd), and whatever runs
        with this cluster's SLURM_CONF in its environment (slurmstepd, tasks, srun)."""
        daemons = {process.pid for process in self.processes.values() if process.poll() is None}
        pids = daemons | descendant_pids(daemons)
        if self.directory is not None:
            marker = f"SLURM_CONF={self.conf_path}".encode()
            pids |= {int(entry.name) for entry in os.scandir("/proc")
                     if entry.name.isdigit() and int(entry.name) != os.getpid()
                     and _environment_holds(int(entry.name), marker)}
        return {pid for pid in pids if pid_is_running(pid)}

    def stop(self, timeout_s: float = 15.0) -> None:
        """Cancel the cluster's jobs, end its daemons (TERM, then KILL), kill what is left of them, and delete
        its directory."""
        if self.directory is None:
            return
        if "slurmctld" in self.processes and self.processes["slurmctld"].poll() is None:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self.run(["scancel", "--quiet", "--full", "--user", "root"], timeout_s=10.0, check=False)
        left = self.process_ids()
        order = [name for name in self.processes if name.startswith("slurmd-")] + ["slurmctld", "munged"]
        for name in order:
            process = self.processes.get(name)
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for name in order:
            process = self.processes.get(name)
            if process is None:
                continue
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for pid in left | self.process_ids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        running_after(left, 5.0)
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory = None
