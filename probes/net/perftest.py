"""The ``perftest`` pair backend: ``ib_write_bw`` server and client per HCA, every rail at once,
each direction in turn; and the parser of ``ib_write_bw``'s report.

The control connection (common.Channel) sequences the phases. Each rail runs ``--streams`` N
ib_write_bw pairs at once, each with one QP (``-q 1``) on its own TCP port: ib_write_bw reports
only the total of its QPs, and N runs give each QP's figure. Client to server: the server starts
N ``ib_write_bw`` servers per rail on free TCP ports, says which (a list per rail) once each
listens, and the client runs its ``ib_write_bw`` clients against them; the writers' reports are
the figures. Server to client: the same with the roles swapped, the server's clients aiming at
the client's address on the control connection, their parsed reports sent back (a list per
rail, in the order of the ports). Every run has ``--report_gbits``, ``-F`` (no abort on CPU
frequency scaling), ``-D`` whole seconds and ``-s`` the message size; ``--use_cuda=<gpu>`` where
the rail has a GPU, this perftest was built with CUDA and GPUDirect RDMA is loaded
(nvidia_peermem). The figure of a run is the average of its largest message size; a rail's
figure is the sum of its runs' (``stream_gbps`` in the details: each run's, in port order), the
peaks' sum goes in the details with the link information. A run that fails fails its rail.

ib_write_bw picks no ephemeral port itself: free ones are found by binding port 0 (all of a phase's
at once, so they differ) and closing them, so another program could take one in between; that
run then fails with a clear error.

The control connection opens with the handshake of probes/net/auth.py (both ends prove the pair
secret; its params are {"streams", "duration_s", "message_bytes"}), and every later message is
checked field by field on both ends (probes/net/perftest_messages.py). ib_write_bw's own
connections are its own program's and carry no secret: a run against a stranger ends in an error
(no report), never in our figure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..context import Deadline
from ..records import SKIPPED
from ..runner import EXIT_DEADLINE, EXIT_OK
from ..topology import Rail, discover_rails
from .auth import PairSecret, accept_client, open_session
from .common import (
    DIRECTIONS,
    PROTOCOL,
    STALL_S,
    Channel,
    LinkParams,
    NetOptions,
    Output,
    bound_address,
    describe_failure,
    figure_record,
    link_failure,
    no_client_reason,
    open_listener,
    start_lifeline,
    start_watchdog,
)
from .messages import ProtocolError, expect_choice
from .perftest_messages import (
    phase_rails,
    rail_ports,
    rail_results,
    rail_texts,
    server_info,
    session_params,
)
from .perftest_output import RULE, PerftestOutputError, combine_runs, parse_perftest

BACKEND = "perftest"
DEFAULT_MESSAGE_BYTES = 1 << 20
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
# Seconds an ib_write_bw run may take beyond its -D duration (connection setup, warm-up, teardown).
RUN_OVERHEAD_S = 15.0
_WAITING = "Waiting for client to connect"


# --- running ib_write_bw -----------------------------------------------------------------------

@dataclass(frozen=True)
class PerftestTool:
    """The ``ib_write_bw`` to run and whether it was built with CUDA (``--use_cuda``)."""

    path: str
    cuda: bool


def find_tool(executable: str | None, timeout_s: float = 10.0) -> PerftestTool | None:
    """The ib_write_bw named (or on PATH), None when there is none."""
    path = shutil.which(executable) if executable else shutil.which("ib_write_bw")
    if path is None:
        return None
    try:
        said = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return PerftestTool(path, cuda=False)
    return PerftestTool(path, cuda="use_cuda" in said.stdout + said.stderr)


def gpudirect_loaded(sysfs_root: str | Path) -> bool:
    """Whether a GPUDirect RDMA kernel module (nvidia_peermem, nv_peer_mem) is loaded."""
    return any((Path(sysfs_root) / "module" / name).exists() for name in PEERMEM_MODULES)


def ib_write_bw_command(tool: str, rail: Rail, *, tcp_port: int, qps: int, duration_s: float, message_bytes: int,
                        gid_index: int | None, cuda_gpu: int | None, server: str | None = None) -> list[str]:
    """The ib_write_bw command of one rail: a server when ``server`` is None, else a client of it."""
    command = [tool, "-d", rail.hca or "", "-i", str(rail.port or 1), "-p", str(tcp_port), "-q", str(qps),
               "-s", str(message_bytes), "-D", str(max(1, round(duration_s))), "-F", "--report_gbits"]
    if gid_index is not None:
        command += ["-x", str(gid_index)]
    if cuda_gpu is not None:
        command.append(f"--use_cuda={cuda_gpu}")
    if server is not None:
        command.append(server)
    return command


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports nothing listens on now (all bound to 0 at once, then released)."""
    with contextlib.ExitStack() as held:
        probes = [held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for probe in probes:
            probe.bind(("", 0))
        return [int(probe.getsockname()[1]) for probe in probes]


def listening_ports(proc_net: str | Path = "/proc/net") -> set[int]:
    """Local TCP ports in LISTEN state (IPv4 and IPv6), from /proc/net/tcp{,6}."""
    ports: set[int] = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = (Path(proc_net) / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class PerftestRun:
    """One ib_write_bw process (ours, ended by its own handle); its output gathered on a thread."""

    def __init__(self, command: Sequence[str]) -> None:
        self.command = list(command)
        self.lines: list[str] = []
        self.waiting = threading.Event()
        self.process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, errors="replace",
                                        env={**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            if _WAITING in line:
                self.waiting.set()
        self.waiting.set()

    def wait_listening(self, port: int, deadline: Deadline) -> bool:
        """Until the server says it waits and its port listens (or it ended): True when listening."""
        while not deadline.expired() and self.process.poll() is None:
            if self.waiting.is_set() and port in listening_ports():
                return True
            time.sleep(0.02)
        return False

    def finish(self, timeout_s: float) -> dict[str, Any]:
        """Wait for the run to end (ending it after ``timeout_s``); its summary or ``{"error": ...}``."""
        try:
            self.process.wait(timeout=max(timeout_s, 0.1))
        except subprocess.TimeoutExpired:
            self.stop()
            return {"error": f"ib_write_bw did not finish within {timeout_s:.0f} s: {self.tail()}"}
        self._reader.join(2.0)
        text = "".join(self.lines)
        try:
            summary = parse_perftest(text).summary()
        except PerftestOutputError as error:
            return {"error": f"ib_write_bw exited {self.process.returncode} without a report ({error}): {self.tail()}"}
        if self.process.returncode != 0:
            summary["exit_status"] = self.process.returncode
        return summary

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=2.0)

    def tail(self) -> str:
        said = [line.strip() for line in self.lines if line.strip() and not RULE.match(line)]
        return " | ".join(said[-3:]) or "no output"


@dataclass(frozen=True)
class Node:
    """This node's side: its ib_write_bw, rails, whether GPUDirect RDMA is on, and options."""

    tool: PerftestTool | None
    rails: tuple[Rail, ...]
    gpu_direct: bool
    options: NetOptions

    @classmethod
    def discover(cls, options: NetOptions) -> Node:
        tool = find_tool(options.ib_write_bw)
        rails = ()
        if tool is not None:
            found, _ = discover_rails(None, None, options.hcas, options.sysfs_root)
            rails = tuple(rail for rail in found if rail.hca and (options.rails is None or rail.index in options.rails))
        gpu_direct = bool(tool and tool.cuda and options.gpu_direct and gpudirect_loaded(options.sysfs_root))
        return cls(tool, rails, gpu_direct, options)

    @property
    def unavailable(self) -> str | None:
        if self.tool is None:
            return "ib_write_bw is not on PATH (install perftest)"
        if not self.rails:
            return "no RDMA device (nothing under /sys/class/infiniband)"
        return None

    def rail(self, index: int) -> Rail | None:
        return next((rail for rail in self.rails if rail.index == index), None)

    def command(self, rail: Rail, session: Mapping[str, Any], tcp_port: int, server: str | None) -> list[str]:
        """One QP's ib_write_bw run of ``rail`` on ``tcp_port``: a server, or a client of ``server``."""
        assert self.tool is not None
        return ib_write_bw_command(self.tool.path, rail, tcp_port=tcp_port, qps=1,
                                   duration_s=float(session["duration_s"]),
                                   message_bytes=int(session["message_bytes"]), gid_index=self.options.gid_index,
                                   cuda_gpu=rail.gpu if self.gpu_direct else None, server=server)

    def start_servers(self, rails: Sequence[int], session: Mapping[str, Any], deadline: Deadline
                      ) -> tuple[dict[int, list[PerftestRun]], dict[str, list[int]], dict[int, str]]:
        """``streams`` listening ib_write_bw servers per rail: (runs by rail, their ports by rail
        (as text), errors by rail). A rail one of whose servers does not listen is an error."""
        count = int(session["streams"])
        usable = [index for index in rails if self.rail(index) is not None]
        errors = {index: f"rail {index} has no RDMA device here" for index in rails if index not in usable}
        free = free_ports(count * len(usable))
        ports = {str(index): free[at * count:(at + 1) * count] for at, index in enumerate(usable)}
        runs = {index: [PerftestRun(self.command(self._rail(index), session, port, None))
                        for port in ports[str(index)]] for index in usable}
        for index, started in runs.items():
            for run, port in zip(started, ports[str(index)], strict=True):
                if index not in errors and not run.wait_listening(port, deadline.sooner(STALL_S)):
                    errors[index] = f"the ib_write_bw server did not start listening: {run.tail()}"
            if index in errors:
                for run in started:
                    run.stop()
        return runs, {rail: listed for rail, listed in ports.items() if int(rail) not in errors}, errors

    def run_clients(self, ports: Mapping[str, Sequence[int]], session: Mapping[str, Any], server: str,
                    deadline: Deadline) -> dict[int, list[dict[str, Any]]]:
        """Run an ib_write_bw client against each of ``server``'s ports of each rail, all at once;
        each run's summary (or error), per rail in port order."""
        limit_s = float(session["duration_s"]) + RUN_OVERHEAD_S
        runs: dict[int, list[PerftestRun]] = {}
        results: dict[int, list[dict[str, Any]]] = {}
        for key, listed in ports.items():
            rail = self.rail(int(key))
            if rail is None:
                results[int(key)] = [{"error": f"rail {key} has no RDMA device here"} for _ in listed]
            else:
                runs[rail.index] = [PerftestRun(self.command(rail, session, int(port), server)) for port in listed]
        for index, started in runs.items():
            results[index] = [run.finish(min(limit_s, deadline.left_s())) for run in started]
        return results

    def _rail(self, index: int) -> Rail:
        rail = self.rail(index)
        assert rail is not None
        return rail


# --- server and client -------------------------------------------------------------------------

def serve(options: NetOptions, secret: PairSecret, out: Output) -> int:
    """Serve one perftest pair test (see the module docstring) to the first client that proves
    ``secret``; the exit status."""
    deadline = Deadline.after(options.deadline_s)
    node = Node.discover(options)
    try:
        listener = open_listener(options.bind)
    except OSError as error:
        out.event("done", backend=BACKEND, status="error", cause="bind",
                  reason=f"cannot listen on {options.bind or '*'}: {error.strerror or error}")
        return EXIT_OK
    out.event("listening", backend=BACKEND, port=listener.getsockname()[1], bind=bound_address(listener),
              host=socket.gethostname(), pid=os.getpid(), protocol=PROTOCOL, deadline_s=options.deadline_s,
              rails=[rail.to_dict() for rail in node.rails], unavailable=node.unavailable,
              gpu_direct=node.gpu_direct)
    runs: list[PerftestRun] = []
    started = time.monotonic()
    start_watchdog(deadline, lambda: _end(runs, out, "error", "the server's deadline passed", None, started))
    if options.stdin_lifeline:
        start_lifeline(lambda: _end(runs, out, "error", "the controller is gone (stdin closed)", None, started))
    client = None
    try:
        channel, handshake = accept_client(listener, BACKEND, secret, deadline.sooner(options.accept_window_s),
                                           session=deadline)
        client = handshake.client
        _serve_session(channel, session_params(handshake.params), client, node, runs, deadline)
    except TimeoutError as error:
        if client is None:
            _end(runs, out, "error", no_client_reason(options, deadline), None, started)
            return EXIT_DEADLINE
        if deadline.expired():
            _end(runs, out, "error", f"the test with {client} did not end within the deadline", client, started)
            return EXIT_DEADLINE
        _end(runs, out, "error", describe_failure(error, client), client, started)
        return EXIT_OK
    except (OSError, ProtocolError) as error:
        _end(runs, out, "error", describe_failure(error, client or "the client"), client, started)
        return EXIT_OK
    finally:
        listener.close()
    # A server without ib_write_bw or RDMA devices still answers, so its client can say why it skipped.
    _end(runs, out, SKIPPED if node.unavailable else "ok", node.unavailable, client, started)
    return EXIT_OK


def _serve_session(channel: Channel, session: Mapping[str, Any], client: str, node: Node, runs: list[PerftestRun],
                   deadline: Deadline) -> None:
    channel.send({"host": socket.gethostname(), "rails": [rail.to_dict() for rail in node.rails],
                  "unavailable": node.unavailable, "gpu_direct": node.gpu_direct})
    wait_s = float(session["duration_s"]) + RUN_OVERHEAD_S + STALL_S
    while True:
        message = channel.receive(timeout_s=wait_s)
        if message.get("bye") is True:
            return
        phase = expect_choice(message, "phase", DIRECTIONS)
        if phase == "client_to_server":
            servers, ports, errors = node.start_servers(phase_rails(message), session, deadline)
            runs.extend(run for started in servers.values() for run in started)
            channel.send({"ports": ports, "errors": {str(rail): error for rail, error in errors.items()}})
            channel.receive(timeout_s=wait_s)  # the client's runs ended
            for started in servers.values():
                for run in started:
                    run.finish(min(STALL_S, deadline.left_s()))
            channel.send({"ok": True})
        else:
            results = node.run_clients(rail_ports(message, int(session["streams"])), session, client, deadline)
            channel.send({"results": {str(rail): listed for rail, listed in results.items()}})


def run_client(options: NetOptions, secret: PairSecret, out: Output) -> int:
    """Measure each rail in each direction against the perftest net-server that proves
    ``secret``; one record per rail and direction."""
    deadline = Deadline.after(options.deadline_s)
    node = Node.discover(options)
    report = _Report(options, node, out)
    runs: list[PerftestRun] = []

    def give_up(reason: str) -> None:
        for run in runs:
            run.stop()
        report.fail_pending(reason)

    start_watchdog(deadline, lambda: give_up(f"the client's deadline of {options.deadline_s:g} s passed"))
    if options.stdin_lifeline:
        start_lifeline(lambda: give_up("the controller is gone (stdin closed)"))
    channel: Channel | None = None
    try:
        session = {"streams": options.streams, "duration_s": options.duration_s,
                   "message_bytes": options.message_bytes or DEFAULT_MESSAGE_BYTES}
        channel, _ = open_session(options.host or "", options.port or 0, BACKEND, secret, session, options.peer,
                                  deadline)
        reply = server_info(channel.receive())
        report.server = reply
        unavailable = node.unavailable
        if unavailable is None and reply["unavailable"]:
            unavailable = f"on the server: {reply['unavailable']}"
        if unavailable:
            report.fail_pending(unavailable, status=SKIPPED)
        else:
            report.rails = [rail.index for rail in node.rails if any(r["rail"] == rail.index for r in reply["rails"])]
            if not report.rails:
                report.fail_pending("no rail in common between the server and this client")
            else:
                for direction in options.directions:
                    _client_phase(channel, direction, node, report, session, runs, deadline)
        channel.send({"bye": True})
    except (OSError, ProtocolError) as error:
        report.fail_pending(describe_failure(error, options.peer))
    finally:
        for run in runs:
            run.stop()
        if channel is not None:
            channel.close()
    return EXIT_OK


def _client_phase(channel: Channel, direction: str, node: Node, report: _Report, session: Mapping[str, Any],
                  runs: list[PerftestRun], deadline: Deadline) -> None:
    rails = report.rails or []
    wait_s = float(session["duration_s"]) + RUN_OVERHEAD_S + STALL_S
    count = int(session["streams"])
    if direction == "client_to_server":
        channel.send({"phase": direction, "rails": rails})
        reply = channel.receive(timeout_s=wait_s)
        ports = {rail: listed for rail, listed in rail_ports(reply, count).items() if int(rail) in rails}
        for rail, error in rail_texts(reply, "errors").items():
            report.add(rail, direction, {"error": f"server: {error}"})
        results = node.run_clients(ports, session, node.options.host or "", deadline)
        channel.send({"finished": True})
        channel.receive(timeout_s=wait_s)
    else:
        servers, ports, errors = node.start_servers(rails, session, deadline)
        runs.extend(run for started in servers.values() for run in started)
        for rail, error in errors.items():
            report.add(rail, direction, {"error": error})
        channel.send({"phase": direction, "ports": ports})
        # Only the rails this client asked for: a result for another is no figure of this test.
        results = rail_results(channel.receive(timeout_s=wait_s), ports, count)
        for started in servers.values():
            for run in started:
                run.finish(min(STALL_S, deadline.left_s()))
    for rail, listed in results.items():
        report.add(rail, direction, combine_runs(listed))


class _Report:
    """The client's records, one per rail and direction, each written once."""

    def __init__(self, options: NetOptions, node: Node, out: Output) -> None:
        self.options, self.node, self.out = options, node, out
        self.server: Mapping[str, Any] = {}
        self.rails: list[int] | None = None
        self._written: set[tuple[int | None, str]] = set()
        self._lock = threading.Lock()

    def add(self, rail: int, direction: str, result: Mapping[str, Any]) -> None:
        params, details = self._describe(rail, direction, result)
        if "error" in result:
            record = link_failure(params, str(result["error"]), details)
        else:
            record = figure_record(params, float(result["average_gbps"]), details)
        self._write((rail, direction), record)

    def fail_pending(self, reason: str, status: str = "error") -> None:
        rails: Sequence[int | None] = self.rails or [rail.index for rail in self.node.rails] or [None]
        for rail in rails:
            for direction in self.options.directions:
                params, details = self._describe(rail, direction, {})
                self._write((rail, direction), link_failure(params, reason, details, status=status))

    def _write(self, key: tuple[int | None, str], record: Any) -> None:
        with self._lock:
            if key not in self._written:
                self._written.add(key)
                self.out.record(record)

    def _describe(self, rail: int | None, direction: str,
                  result: Mapping[str, Any]) -> tuple[LinkParams, dict[str, Any]]:
        local = self.node.rail(rail) if rail is not None else None
        peer = next((r for r in self.server.get("rails", []) if r.get("rail") == rail), {})
        message = self.options.message_bytes or DEFAULT_MESSAGE_BYTES
        params = LinkParams(BACKEND, direction, self.options.streams, float(max(1, round(self.options.duration_s))),
                            rail, local.hca if local else None,
                            {"message_bytes": message, "gpu_direct": self.node.gpu_direct})
        known = [r for r in ((local.line_rate_gbps if local else None), peer.get("line_rate_gbps"))
                 if isinstance(r, (int, float))]
        details = {"peer": self.options.peer, "peer_host": self.server.get("host"),
                   "line_rate_gbps": min(known) if known else None,
                   "local_line_rate_gbps": local.line_rate_gbps if local else None,
                   "peer_line_rate_gbps": peer.get("line_rate_gbps"), "peer_hca": peer.get("hca"),
                   "gpu": local.gpu if local else None, "topology_level": local.level if local else None,
                   "hca_shared": local.shared if local else None,
                   "peer_gpu_direct": self.server.get("gpu_direct"),
                   **{key: value for key, value in result.items() if key != "error"}}
        return params, details


def _end(runs: Sequence[PerftestRun], out: Output, status: str, reason: str | None, client: str | None,
         started: float) -> None:
    for run in runs:
        run.stop()
    out.event("done", backend=BACKEND, status=status, reason=reason, client=client,
              elapsed_s=round(time.monotonic() - started, 3))
