"""A simulated InfiniBand subnet that infiniband-diags' own ``ibnetdiscover`` discovers, for tests of gpudiag's
ibnetdiscover reader on captures the real tool makes.

``IbFabric`` describes switches, HCAs and cables; ``IbSim(fabric).start()`` writes it as ibsim's "net" file and
starts ``ibsim -s -n`` (ibsim-utils) in a private temporary directory; ``discover(attach)`` runs ``ibnetdiscover``
with ``libumad2sim.so`` (libumad2sim0) preloaded, which hands its MADs to the simulator instead of the kernel's
``/dev/infiniband/umad*``, and returns its output. No kernel module, device or root is needed.

How ibsim 0.10 is reached: it listens on abstract unix sockets named after ``IBSIM_SOCKNAME`` (default "sim"),
which ibsim and the preloaded library both read, so each simulator here has a name of its own and parallel runs
never meet. ``SIM_HOST`` names the node the client attaches at (default: the first in the file), as
``ibnetdiscover`` is run from one node's HCA. A client that finds no simulator retries for ever, so every run
has a timeout.

The net file is the format of ibnetdiscover's own output: ``Switch 40 "S-leaf01" # "leaf01" enhanced port 0
lid 1 lmc 0`` with a port line per cable, ``[33] "S-spine01"[1] # "spine01" lid 11 4xHDR``, and ``Hca 1
"H-node01-mlx5_0" # "node01 mlx5_0"`` with ``[1] "S-leaf01"[1] # lid 41 lmc 0 "leaf01" lid 1 4xHDR``. The quoted
text after ``#`` is the node description; the LIDs are set as written (no subnet manager runs); each port's
width and speed (``4xHDR``) are its enabled ones, and a cable trains at the best both ends enable. ibsim 0.10
knows SDR to HDR: it ignores "NDR" (with a warning) and leaves such a port at SDR.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from started import Started

IBSIM = "ibsim"
IBNETDISCOVER = "ibnetdiscover"
UMAD2SIM_PACKAGE = "libumad2sim0"
UMAD2SIM_DEFAULT = Path("/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so")
READY_LINE = "Network simulator ready."
SWITCH_PORTS = 40


class IbSimError(RuntimeError):
    """ibsim or ibnetdiscover failed; the message carries the end of what it printed."""


def umad2sim_path() -> Path | None:
    """Where libumad2sim.so is (as ``dpkg -L libumad2sim0`` lists it, else Debian's amd64 path); None without."""
    if shutil.which("dpkg-query") is not None:
        listed = subprocess.run(["dpkg-query", "-L", UMAD2SIM_PACKAGE], capture_output=True, text=True, check=False)
        for line in listed.stdout.splitlines() if listed.returncode == 0 else []:
            if line.endswith("/libumad2sim.so") and Path(line).is_file():
                return Path(line)
    return UMAD2SIM_DEFAULT if UMAD2SIM_DEFAULT.is_file() else None


@functools.cache
def ibsim_unavailable_reason() -> str | None:
    """Why ibsim cannot run here (a sentence for ``pytest.skip``), or None if it can."""
    missing = [name for name in (IBSIM, IBNETDISCOVER) if shutil.which(name) is None]
    if umad2sim_path() is None:
        missing.append("libumad2sim.so")
    if missing:
        return (f"needs Debian's ibsim-utils and infiniband-diags (missing {', '.join(missing)}); "
                f"run scripts/install-test-deps as root")
    return None


@dataclass(frozen=True)
class IbSwitch:
    """A switch: its node description (``name``) and LID."""

    name: str
    lid: int

    @property
    def node_id(self) -> str:
        return f"S-{self.name}"


@dataclass(frozen=True)
class IbHca:
    """One single-port HCA of ``host``: its node description is ``"<host> <hca>"`` (as rdma-ndd sets it)."""

    host: str
    hca: str
    lid: int

    @property
    def name(self) -> str:
        return f"{self.host} {self.hca}"

    @property
    def node_id(self) -> str:
        return f"H-{self.host}-{self.hca}"


@dataclass(frozen=True)
class IbCable:
    """A cable from port ``a_port`` of ``a`` to port ``b_port`` of ``b`` (switch or HCA names, as ``name``),
    trained at ``rate`` (``4xHDR``: the width and speed both ends enable)."""

    a: str
    a_port: int
    b: str
    b_port: int
    rate: str = "4xHDR"


@dataclass(frozen=True)
class IbFabric:
    """Switches, HCAs and the cables between them."""

    switches: tuple[IbSwitch, ...]
    hcas: tuple[IbHca, ...]
    cables: tuple[IbCable, ...]

    def net_text(self) -> str:
        """The fabric as ibsim's net file: a block per node, each cable listed from both ends."""
        nodes: dict[str, IbSwitch | IbHca] = {node.name: node for node in (*self.switches, *self.hcas)}
        ports: dict[str, list[tuple[int, IbSwitch | IbHca, int, str]]] = {name: [] for name in nodes}
        for cable in self.cables:
            ports[cable.a].append((cable.a_port, nodes[cable.b], cable.b_port, cable.rate))
            ports[cable.b].append((cable.b_port, nodes[cable.a], cable.a_port, cable.rate))
        blocks = []
        for switch in self.switches:
            lines = [f'Switch {SWITCH_PORTS} "{switch.node_id}" # "{switch.name}" enhanced port 0 lid {switch.lid} '
                     f'lmc 0']
            lines += [f'[{port}] "{far.node_id}"[{far_port}] # "{far.name}" lid {far.lid} {rate}'
                      for port, far, far_port, rate in sorted(ports[switch.name], key=lambda item: item[0])]
            blocks.append("\n".join(lines))
        for hca in self.hcas:
            lines = [f'Hca 1 "{hca.node_id}" # "{hca.name}"']
            lines += [f'[{port}] "{far.node_id}"[{far_port}] # lid {hca.lid} lmc 0 "{far.name}" lid {far.lid} {rate}'
                      for port, far, far_port, rate in ports[hca.name]]
            blocks.append("\n".join(lines))
        return "\n\n".join(blocks) + "\n"


class IbSim(Started):
    """ibsim serving ``fabric``, in a private temporary directory. A context manager."""

    def __init__(self, fabric: IbFabric, *, start_timeout_s: float = 10.0) -> None:
        self.fabric = fabric
        self.start_timeout_s = start_timeout_s
        self.socket_name = f"gpudiag-ibsim-{os.getpid()}-{secrets.token_hex(4)}"
        self.directory: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        assert self.directory is not None, "the simulator is not started"
        return self.directory / "ibsim.log"

    def start(self) -> IbSim:
        """Write the net file, start ibsim, wait until it says the network is ready. Raises IbSimError (having
        stopped it) when it exits or is not ready within ``start_timeout_s``."""
        self.directory = Path(tempfile.mkdtemp(prefix="gpudiag-ibsim-"))
        net = self.directory / "net"
        net.write_text(self.fabric.net_text())
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen([IBSIM, "-s", "-n", str(net)], cwd=self.directory, env=self._env(),
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout_s
        while READY_LINE not in self.log_path.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                log_text = self.log_path.read_text(errors="replace")
                self.stop()
                raise IbSimError(f"ibsim did not start (exit status {self.process.returncode}):\n{log_text[-3000:]}")
            time.sleep(0.02)
        return self

    def _env(self) -> dict[str, str]:
        return {**os.environ, "IBSIM_SOCKNAME": self.socket_name}

    def discover(self, attach: str, *, timeout_s: float = 30.0) -> str:
        """``ibnetdiscover``'s output, run from the switch or HCA named ``attach`` (``"node01 mlx5_0"``), as
        ``ibnetdiscover -C mlx5_0`` on node01 would be. Raises IbSimError when it fails or takes longer than
        ``timeout_s``, KeyError for a name the fabric lacks."""
        assert self.directory is not None and self.process is not None, "the simulator is not started"
        node_id = {node.name: node.node_id for node in (*self.fabric.switches, *self.fabric.hcas)}[attach]
        env = {**self._env(), "LD_PRELOAD": str(umad2sim_path()), "SIM_HOST": node_id}
        try:
            done = subprocess.run([IBNETDISCOVER], cwd=self.directory, env=env, capture_output=True, text=True,
                                  timeout=timeout_s, stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired as error:
            raise IbSimError(f"ibnetdiscover took longer than {timeout_s} s (ibsim alive: "
                             f"{self.process.poll() is None})\n{self.log_path.read_text(errors='replace')[-2000:]}"
                             ) from error
        if done.returncode != 0 or self.process.poll() is not None:
            raise IbSimError(f"ibnetdiscover exited with status {done.returncode}: {done.stderr[-2000:]}\n"
                             f"ibsim: {self.log_path.read_text(errors='replace')[-2000:]}")
        return done.stdout

    def process_ids(self) -> set[int]:
        """ibsim's process while it runs (it starts no other)."""
        return {self.process.pid} if self.process is not None and self.process.poll() is None else set()

    def stop(self) -> None:
        """End ibsim (TERM, then KILL) and delete the directory. Idempotent."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5.0)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

