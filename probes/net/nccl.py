"""The ``nccl`` pair backend: torch.distributed send/recv between rail *i* of the server node and
rail *i* of the client node, every rail at once, each direction in turn.

Process layout — one process group per rail, each in its own pair of processes. NCCL reads
``NCCL_IB_HCA`` once per process, so pinning rail *i* to the HCA nearest GPU *i* needs a process
per rail: the server and the client each start one worker per rail (``python -m
probes.net.nccl``), and worker *i* of the server (rank 0) and worker *i* of the client (rank 1)
form a two-rank group. The server's parent process hosts the rendezvous, a ``TCPStore`` on an
ephemeral port (the port of its ``listening`` line; torch's store listens on every address,
whatever ``--bind`` says); each rail's group lives under its own prefix of that store.

Each worker gets ``NCCL_NET=IB`` (unless ``--allow-socket``: a missing IB path is an error, never
a silent fall-back to sockets), ``NCCL_IB_HCA==<hca>:<port>`` of its rail, and the interface that
faces the peer for NCCL's and gloo's own sockets. Per direction: warm-up transfers, then the
receiver plans enough transfers of ``--message-bytes`` (at least 64 MiB) to fill ``--duration``,
all rails start together (a barrier in the store), one untimed transfer absorbs the start skew,
and the receiver times batches of transfers: Gbit/s = bytes over its wall time. Without CUDA
(or without NCCL in torch) the same path runs on ``gloo`` with CPU tensors, as one rail.

The client parent reads every rail's figures from the store and prints the records.

The store is open to anyone who reaches its port, so what crosses it carries proofs of the pair
secret (probes/net/auth.py): the server's ``server/info`` (with its nonce), the client's
``client/hello`` (with its nonce; a hello without a valid proof is dropped and the server waits
on) and each rail's result (the workers get the secret in their environment, never in argv).
A result without a valid proof is an error for that rail, never a figure; every field read from
the store is checked.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import ModuleType
from typing import Any

from ..context import Deadline
from ..devices import DeviceUnavailable, cuda_devices, import_torch
from ..records import SKIPPED
from ..runner import EXIT_DEADLINE, EXIT_OK
from ..topology import Rail, discover_rails, interface_for_address, local_address_towards, read_ethernet_speed_gbps
from .auth import PairSecret, expect_nonce, new_nonce
from .common import (
    DIRECTIONS,
    MAX_DURATION_S,
    NCCL_MIN_BYTES,
    PROTOCOL,
    STALL_S,
    LinkParams,
    NetOptions,
    Output,
    bandwidth_record,
    connect,
    describe_failure,
    join_host_port,
    link_failure,
    no_client_reason,
    open_listener,
    start_lifeline,
    start_watchdog,
)
from .messages import (
    ProtocolError,
    expect_choice,
    expect_int,
    expect_number,
    expect_numbers,
    expect_str,
)
from .nccl_store import proved, put_json, put_proved, release_barriers, wait_json, wait_key

BACKEND = "nccl"
MIB = 1 << 20
MIN_MESSAGE_BYTES = NCCL_MIN_BYTES
WARMUP_TRANSFERS = 5
TARGET_SAMPLE_S = 0.025
MIN_SAMPLES = 5
# How long a worker may outlive its peer's reported failure before it is ended.
PEER_FAILURE_GRACE_S = 1.0
SIDES = ("server", "client")
# Errors torch.distributed and CUDA raise (DistError, OutOfMemoryError: RuntimeError subclasses),
# and what a malformed or unproved entry of the store raises.
TORCH_ERRORS = (RuntimeError, OSError, ValueError, TimeoutError, ProtocolError)
# The environment variable that hands the pair secret (hex) to the rail workers.
SECRET_ENV = "GPUDIAG_NET_SECRET"
# What a peer may put in the store: rails, bytes per transfer, transfers, Gbit/s.
MAX_RAILS = 64
MAX_MESSAGE_BYTES = 1 << 36
MAX_TRANSFERS = 1 << 30
MAX_GBPS = 1e6


@dataclass(frozen=True)
class LocalSide:
    """This node's half of the test: ``gloo`` or ``nccl``, its rails, their GPU UUIDs, and where
    its GPU-to-NIC distances came from."""

    collective: str
    rails: tuple[Rail, ...]
    gpu_uuids: Mapping[int, str | None]
    topology_source: str

    def rail(self, index: int) -> Rail | None:
        return next((rail for rail in self.rails if rail.index == index), None)


def collective_backend(torch: ModuleType) -> str:
    """``nccl`` where torch sees a CUDA device and has NCCL, else ``gloo`` (CPU tensors)."""
    dist = torch.distributed
    if torch.cuda.is_available() and dist.is_nccl_available():
        return "nccl"
    return "gloo"


def describe_local_side(torch: ModuleType, options: NetOptions) -> LocalSide:
    """Rails of this node: one per GPU with its nearest HCA (nccl), or one CPU rail (gloo)."""
    collective = collective_backend(torch)
    if collective == "gloo":
        rails: list[Rail] = [Rail(0, None, None, None, "cpu", None)]
        uuids: dict[int, str | None] = {}
        source = "none (gloo on CPU: one rail)"
    else:
        devices = cuda_devices(torch)
        rails, source = discover_rails(len(devices), {d.index: d.pci_bus_id for d in devices if d.pci_bus_id},
                                       options.hcas, options.sysfs_root)
        uuids = {d.index: d.gpu_uuid for d in devices}
    wanted = [rail for rail in rails if options.rails is None or rail.index in options.rails]
    return LocalSide(collective, tuple(wanted), uuids, source)


def nccl_environment(rail: Rail, *, collective: str, allow_socket: bool, interface: str | None,
                     gid_index: int | None, inherited: Mapping[str, str]) -> dict[str, str]:
    """The environment variables a rail's worker gets on top of ``inherited``.

    NCCL_NET=IB unless sockets are allowed; NCCL_IB_HCA pinned (exact match) to the rail's HCA
    and port; the interface facing the peer for NCCL's bootstrap and gloo, unless the user set
    one; CUDA devices numbered in PCI order, as nvidia-smi numbers them, unless set.
    """
    env: dict[str, str] = {}
    if collective == "nccl":
        if not allow_socket:
            env["NCCL_NET"] = "IB"
        if rail.hca:
            env["NCCL_IB_HCA"] = f"={rail.hca}:{rail.port or 1}"
        if gid_index is not None:
            env["NCCL_IB_GID_INDEX"] = str(gid_index)
        if interface and "NCCL_SOCKET_IFNAME" not in inherited:
            env["NCCL_SOCKET_IFNAME"] = f"={interface}"
    if interface and "GLOO_SOCKET_IFNAME" not in inherited:
        env["GLOO_SOCKET_IFNAME"] = interface
    if "CUDA_DEVICE_ORDER" not in inherited:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return env


# --- parents: server and client ----------------------------------------------------------------

class Workers:
    """The rail workers this process started: started, watched, ended (by their own pids)."""

    def __init__(self) -> None:
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    def start(self, rail: int, command: Sequence[str], env: Mapping[str, str]) -> None:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bundle's
        with self._lock:
            self.processes[rail] = subprocess.Popen(list(command), cwd=root, env=dict(env), stdin=subprocess.DEVNULL,
                                                    stdout=sys.stderr.fileno())

    def running(self) -> dict[int, subprocess.Popen[bytes]]:
        return {rail: process for rail, process in self.processes.items() if process.poll() is None}

    def stop(self, rails: Sequence[int] | None = None) -> None:
        """Terminate the named (default: every) worker still running, then kill what is left."""
        with self._lock:
            chosen = [p for rail, p in self.processes.items() if (rails is None or rail in rails) and p.poll() is None]
            for process in chosen:
                process.terminate()
            for process in chosen:
                try:
                    process.wait(timeout=2.0)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=2.0)


def supervise(workers: Workers, store: Any, side: str, directions: Sequence[str], deadline: Deadline) -> None:
    """Wait for the workers, ending one whose peer reported a failure (it would wait for that
    peer until the deadline) and every one at the deadline; release the barriers of each that ends."""
    peer = SIDES[1 - SIDES.index(side)]
    released: set[int] = set()
    peer_failed_at: dict[int, float] = {}
    while True:
        for rail, process in workers.processes.items():
            if process.poll() is not None and rail not in released:
                release_barriers(store, side, rail, directions)
                released.add(rail)
        running = workers.running()
        if not running or deadline.expired():
            break
        for rail in running:
            if store.check([f"error/{rail}/{peer}"]):
                first = peer_failed_at.setdefault(rail, time.monotonic())
                if time.monotonic() - first > PEER_FAILURE_GRACE_S:
                    workers.stop([rail])
        time.sleep(0.05)
    workers.stop()
    for rail in set(workers.processes) - released:
        release_barriers(store, side, rail, directions)


def worker_command(side: str, rail: Rail, rails: Sequence[int], store_address: str, session: Mapping[str, Any],
                   deadline: Deadline, collective: str) -> list[str]:
    """``python -m probes.net.nccl_worker ...`` for one rail's worker, its deadline what is left of
    ours (the secret goes in its environment: SECRET_ENV)."""
    return [sys.executable, "-m", "probes.net.nccl_worker", "--side", side, "--rail", str(rail.index),
            "--gpu", str(-1 if rail.gpu is None else rail.gpu), "--store", store_address,
            "--rails", ",".join(str(index) for index in rails), "--directions", ",".join(session["directions"]),
            "--duration", str(session["duration_s"]), "--message-bytes", str(session["message_bytes"]),
            "--deadline", f"{max(deadline.left_s(), 0.1):.3f}", "--collective", collective,
            "--nonces", f"{session['server_nonce']},{session['nonce']}"]


def start_workers(workers: Workers, side: str, local: LocalSide, rails: Sequence[int], store_address: str,
                  options: NetOptions, session: Mapping[str, Any], interface: str | None, deadline: Deadline,
                  secret: PairSecret) -> None:
    for index in rails:
        rail = local.rail(index)
        if rail is None:
            continue
        env = {**os.environ, **nccl_environment(rail, collective=local.collective, allow_socket=options.allow_socket,
                                                interface=interface, gid_index=options.gid_index,
                                                inherited=os.environ), SECRET_ENV: secret.key.hex()}
        workers.start(index, worker_command(side, rail, rails, store_address, session, deadline, local.collective),
                      env)


def serve(options: NetOptions, secret: PairSecret, out: Output) -> int:
    """Host the rendezvous, run this node's rank-0 rail workers for the first client that proves
    ``secret``; the exit status."""
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # before CUDA starts: nvidia-smi's numbering
    deadline = Deadline.after(options.deadline_s)
    started = time.monotonic()
    try:
        # torch's store listens on every address: whether the address given is this node's own
        # is asked of the kernel with a socket of our own, bound there and closed.
        open_listener(options.bind).close()
    except OSError as error:
        out.event("done", backend=BACKEND, status="error", cause="bind",
                  reason=f"cannot listen on {options.bind or '*'}: {error.strerror or error}")
        return EXIT_OK
    hosted = _host_rendezvous(options, secret, out)
    if hosted is None:
        return EXIT_OK
    store, local, server_nonce = hosted
    workers = Workers()

    def give_up(reason: str) -> None:
        out.event("done", backend=BACKEND, status="error", reason=reason, elapsed_s=since(started))
        workers.stop()

    start_watchdog(deadline, lambda: give_up("the server's deadline passed"))
    if options.stdin_lifeline:
        start_lifeline(lambda: give_up("the controller is gone (stdin closed)"))
    try:
        hello = _await_hello(store, secret, server_nonce, deadline.sooner(options.accept_window_s))
    except TimeoutError:
        out.event("done", backend=BACKEND, status="error", client=None, elapsed_s=since(started),
                  reason=no_client_reason(options, deadline))
        return EXIT_DEADLINE
    try:
        rails, reason = _serve_session(store, local, hello, options, workers, deadline, secret)
    finally:
        workers.stop()
    if deadline.expired():
        reason = f"the test did not end within the server's deadline of {options.deadline_s:g} s"
    out.event("done", backend=BACKEND, status="ok" if reason is None else "error", reason=reason,
              client=hello["address"], rails=rails, elapsed_s=since(started))
    return EXIT_DEADLINE if deadline.expired() else EXIT_OK


def _host_rendezvous(options: NetOptions, secret: PairSecret, out: Output) -> tuple[Any, LocalSide, str] | None:
    """The store on an ephemeral port, this node's rails published in it (proved), the listening
    line printed: (store, local side, the server's nonce); None (after a ``done`` line saying
    why) when torch is missing or the store fails."""
    try:
        torch = import_torch()
        local = describe_local_side(torch, options)
        store = torch.distributed.TCPStore(options.bind or "localhost", 0, None, True,
                                           timeout=timedelta(seconds=max(options.deadline_s, 1.0)),
                                           wait_for_workers=False)
    except DeviceUnavailable as missing:
        out.event("done", backend=BACKEND, status=SKIPPED, reason=str(missing))
        return None
    except TORCH_ERRORS as error:
        out.event("done", backend=BACKEND, status="error", reason=f"cannot host the rendezvous: {first_line(error)}")
        return None
    server_nonce = new_nonce()
    info = {"host": socket.gethostname(), "collective": local.collective, "topology_source": local.topology_source,
            "rails": [rail.to_dict() for rail in local.rails], "nonce": server_nonce}
    put_proved(store, "server/info", info, secret, "server-info")
    out.event("listening", backend=BACKEND, port=int(store.port), bind="*", host=info["host"],
              pid=os.getpid(), protocol=PROTOCOL, deadline_s=options.deadline_s, collective=local.collective,
              rails=info["rails"], topology_source=local.topology_source)
    return store, local, server_nonce


def _await_hello(store: Any, secret: PairSecret, server_nonce: str, deadline: Deadline) -> dict[str, Any]:
    """The first ``client/hello`` that proves ``secret`` for this server's nonce, its fields
    checked; any other is dropped (deleted) and the wait goes on. Raises TimeoutError."""
    while True:
        try:
            hello = wait_json(store, "client/hello", deadline)
            return checked_hello(proved(hello, secret, "client-hello", server_nonce), server_nonce)
        except (ProtocolError, ValueError) as error:
            print(f"net-server: dropped a client hello: {error}", file=sys.stderr)
            store.delete_key("client/hello")


def checked_hello(hello: Mapping[str, Any], server_nonce: str) -> dict[str, Any]:
    """A client's proved hello with every field the server reads checked. Raises ProtocolError."""
    if hello.get("protocol") != PROTOCOL:
        raise ProtocolError(f"not a {PROTOCOL} hello")
    rails = hello.get("rails")
    if not isinstance(rails, list) or len(rails) > MAX_RAILS or not all(
            isinstance(rail, int) and not isinstance(rail, bool) and 0 <= rail < MAX_RAILS for rail in rails):
        raise ProtocolError(f"'rails' must be a list of at most {MAX_RAILS} rail numbers")
    directions = hello.get("directions")
    if not isinstance(directions, list) or not directions or len(set(directions)) != len(directions) or not all(
            direction in DIRECTIONS for direction in directions):
        raise ProtocolError(f"'directions' must name some of {', '.join(DIRECTIONS)}, once each")
    address = expect_str(hello, "address", limit=64)
    try:
        ipaddress.ip_address(address)
    except ValueError:
        raise ProtocolError(f"'address' must be an IP address, not {address[:64]!r}") from None
    return {"protocol": PROTOCOL, "address": address, "rails": sorted(set(rails)), "directions": directions,
            "duration_s": expect_number(hello, "duration_s", 0.0, MAX_DURATION_S, above=True),
            "message_bytes": expect_int(hello, "message_bytes", NCCL_MIN_BYTES, MAX_MESSAGE_BYTES),
            "abort": expect_str(hello, "abort", optional=True), "nonce": expect_nonce(hello),
            "server_nonce": server_nonce}


def _serve_session(store: Any, local: LocalSide, hello: Mapping[str, Any], options: NetOptions, workers: Workers,
                   deadline: Deadline, secret: PairSecret) -> tuple[list[int], str | None]:
    """Run the agreed rails' rank-0 workers to their end: (the rails, why it failed or None)."""
    if hello["abort"]:
        return [], f"the client gave up: {hello['abort']}"
    rails = [index for index in hello["rails"] if local.rail(index) is not None]
    client = hello["address"]
    try:
        put_json(store, "session/plan", {"rails": rails})
        toward = local_address_towards(client, 9)
        start_workers(workers, "server", local, rails, join_host_port(options.bind or "127.0.0.1", int(store.port)),
                      options, hello, interface_for_address(toward) if toward else None, deadline, secret)
        supervise(workers, store, "server", hello["directions"], deadline)
        wait_key(store, "client/done", deadline, limit_s=STALL_S)
    except TimeoutError:
        return rails, "the client did not confirm the end of the test"
    except TORCH_ERRORS as error:
        return rails, f"the rendezvous failed: {first_line(error)}"
    return rails, None


def run_client(options: NetOptions, secret: PairSecret, out: Output) -> int:
    """Join the rendezvous of the server that proves ``secret``, run this node's rank-1 rail
    workers, print one record per rail and direction."""
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    deadline = Deadline.after(options.deadline_s)
    report = ClientReport(options, out)
    workers = Workers()

    def give_up(reason: str) -> None:
        workers.stop()
        report.fail_pending(reason)

    start_watchdog(deadline, lambda: give_up(f"the client's deadline of {options.deadline_s:g} s passed"))
    if options.stdin_lifeline:
        start_lifeline(lambda: give_up("the controller is gone (stdin closed)"))
    try:
        # A plain connection first: torch's store retries a refused connection until its timeout.
        with connect(options.host or "", options.port or 0, deadline) as probe:
            own_address = str(probe.getsockname()[0])
    except OSError as error:
        report.fail_pending(describe_failure(error, options.peer))
        return EXIT_OK
    try:
        torch = import_torch()
    except DeviceUnavailable as missing:
        report.fail_pending(str(missing), status=SKIPPED)
        return EXIT_OK
    try:
        _client_session(torch, options, secret, report, workers, own_address, deadline)
    except TORCH_ERRORS as error:
        report.fail_pending(f"rendezvous with {options.peer} failed: {first_line(error)}")
    finally:
        workers.stop()
    return EXIT_OK


def _client_session(torch: ModuleType, options: NetOptions, secret: PairSecret, report: ClientReport,
                    workers: Workers, own_address: str, deadline: Deadline) -> None:
    local = describe_local_side(torch, options)
    report.local = local
    store = torch.distributed.TCPStore(options.host, options.port, None, False,
                                       timeout=timedelta(seconds=max(deadline.left_s(), 1.0)))
    try:
        info = checked_server_info(proved(wait_json(store, "server/info", deadline, limit_s=STALL_S), secret,
                                          "server-info"))
    except ProtocolError as error:
        raise ProtocolError(f"{options.peer} is not the rendezvous of this test's server ({error})") from None
    report.server = info
    server_rails = {rail["rail"]: rail for rail in info["rails"]}
    rails = [rail.index for rail in local.rails if rail.index in server_rails]
    report.rails = rails
    message_bytes = options.message_bytes or MIN_MESSAGE_BYTES
    session = {"protocol": PROTOCOL, "address": own_address, "rails": rails, "directions": list(options.directions),
               "duration_s": options.duration_s, "message_bytes": message_bytes, "abort": None,
               "nonce": new_nonce()}
    abort = _abort_reason(info, local, rails)
    if abort:
        put_proved(store, "client/hello", {**session, "abort": abort}, secret, "client-hello", info["nonce"])
        report.fail_pending(abort)
        return
    put_proved(store, "client/hello", session, secret, "client-hello", info["nonce"])
    wait_json(store, "session/plan", deadline, limit_s=STALL_S)
    start_workers(workers, "client", local, rails, join_host_port(options.host or "", options.port or 0), options,
                  {**session, "server_nonce": info["nonce"]}, interface_for_address(own_address), deadline, secret)
    supervise(workers, store, "client", options.directions, deadline)
    for rail in rails:
        for direction in options.directions:
            report.add(rail, direction, _rail_result(store, rail, direction, deadline, secret,
                                                     (info["nonce"], session["nonce"])))
    store.set("client/done", "1")


def checked_server_info(info: Mapping[str, Any]) -> dict[str, Any]:
    """The server's proved ``server/info`` with every field the client reads checked. Raises ProtocolError."""
    rails = info.get("rails")
    if not isinstance(rails, list) or len(rails) > MAX_RAILS or not all(isinstance(rail, dict) for rail in rails):
        raise ProtocolError(f"'rails' must be a list of at most {MAX_RAILS} objects")
    checked = [{"rail": expect_int(rail, "rail", 0, MAX_RAILS - 1),
                "hca": expect_str(rail, "hca", limit=64, optional=True),
                "gpu": expect_int(rail, "gpu", 0, 1023, optional=True),
                "line_rate_gbps": expect_number(rail, "line_rate_gbps", 0.0, MAX_GBPS, optional=True)}
               for rail in rails]
    return {"host": expect_str(info, "host", limit=255), "collective": expect_choice(info, "collective",
                                                                                      ("nccl", "gloo")),
            "rails": checked, "nonce": expect_nonce(info)}


def _abort_reason(info: Mapping[str, Any], local: LocalSide, rails: Sequence[int]) -> str | None:
    if info["collective"] != local.collective:
        return (f"the server runs {info['collective']} and this client {local.collective}: "
                "both ends need CUDA with NCCL, or neither")
    if not rails:
        return "no rail in common between the server and this client"
    return None


def _rail_result(store: Any, rail: int, direction: str, deadline: Deadline, secret: PairSecret,
                 nonces: tuple[str, str]) -> dict[str, Any]:
    """A rail's proved result for ``direction``, its fields checked, or ``{"error": reason}``."""
    try:
        stored = wait_json(store, f"result/{rail}/{direction}", deadline, limit_s=2.0)
    except TimeoutError:
        stored = None
    except ProtocolError as error:
        return {"error": f"rail {rail}: the stored result is malformed: {error}"}
    if stored is not None:
        try:
            return checked_result(proved(stored, secret, "rail-result", *nonces, rail, direction))
        except ProtocolError as error:
            return {"error": f"rail {rail}: the stored result is refused: {error}"}
    for side in SIDES:
        if store.check([f"error/{rail}/{side}"]):
            said = store.get(f"error/{rail}/{side}").decode(errors="replace")[:300]
            return {"error": f"{side} rail {rail}: {said}"}
    return {"error": f"rail {rail}: the workers ended without a figure for {direction}"}


def checked_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """A rail worker's result (see net_nccl_worker) with every field checked. Raises ProtocolError."""
    return {"bytes": expect_int(result, "bytes", 1, 1 << 62),
            "elapsed_s": expect_number(result, "elapsed_s", 0.0, MAX_DURATION_S, above=True),
            "transfers": expect_int(result, "transfers", 1, MAX_TRANSFERS),
            "message_bytes": expect_int(result, "message_bytes", NCCL_MIN_BYTES, MAX_MESSAGE_BYTES),
            "interval_gbps": expect_numbers(result, "interval_gbps", MAX_GBPS)}


class ClientReport:
    """The client's records: one per rail and direction, each written once; what is still
    pending when the test fails gets an error (or skipped) record with the reason."""

    def __init__(self, options: NetOptions, out: Output) -> None:
        self.options = options
        self.out = out
        self.local: LocalSide | None = None
        self.server: Mapping[str, Any] = {}
        self.rails: list[int] | None = None
        self._written: set[tuple[int | None, str]] = set()
        self._lock = threading.Lock()

    def add(self, rail: int | None, direction: str, result: Mapping[str, Any]) -> None:
        params, details, uuid = self._describe(rail, direction)
        if "error" in result:
            record = link_failure(params, str(result["error"]), details, gpu_uuid=uuid)
        else:
            details = {**details, "transfers": result["transfers"], "message_bytes": result["message_bytes"]}
            record = bandwidth_record(params, int(result["bytes"]), float(result["elapsed_s"]),
                                      result["interval_gbps"], details, gpu_uuid=uuid)
        self._write((rail, direction), record)

    def fail_pending(self, reason: str, status: str = "error") -> None:
        rails: Sequence[int | None] = self.rails if self.rails else (
            list(self.options.rails) if self.options.rails else [None])
        for rail in rails:
            for direction in self.options.directions:
                params, details, uuid = self._describe(rail, direction)
                self._write((rail, direction), link_failure(params, reason, details, status=status, gpu_uuid=uuid))

    def _write(self, key: tuple[int | None, str], record: Any) -> None:
        with self._lock:
            if key not in self._written:
                self._written.add(key)
                self.out.record(record)

    def _describe(self, rail: int | None, direction: str) -> tuple[LinkParams, dict[str, Any], str | None]:
        local = self.local.rail(rail) if self.local is not None and rail is not None else None
        peer = next((r for r in self.server.get("rails", []) if r.get("rail") == rail), {})
        message = self.options.message_bytes or MIN_MESSAGE_BYTES
        collective = self.local.collective if self.local is not None else None
        params = LinkParams(BACKEND, direction, 1, self.options.duration_s, rail, local.hca if local else None,
                            {"message_mib": message / MIB, "collective": collective,
                             "nccl_net": _nccl_net(collective, self.options.allow_socket)})
        local_rate = local.line_rate_gbps if local else None
        if local is not None and local.hca is None and rail is not None:
            local_rate = _interface_rate(self.options)
        known = [rate for rate in (local_rate, peer.get("line_rate_gbps")) if isinstance(rate, (int, float))]
        details = {"peer": self.options.peer, "peer_host": self.server.get("host"),
                   "line_rate_gbps": min(known) if known else None, "local_line_rate_gbps": local_rate,
                   "peer_line_rate_gbps": peer.get("line_rate_gbps"), "gpu": local.gpu if local else None,
                   "topology_level": local.level if local else None, "peer_hca": peer.get("hca"),
                   "hca_shared": local.shared if local else None,
                   "peer_gpu": peer.get("gpu")}
        uuid = None
        if self.local is not None and local is not None and local.gpu is not None:
            uuid = self.local.gpu_uuids.get(local.gpu)
        return params, details, uuid


def _nccl_net(collective: str | None, allow_socket: bool) -> str | None:
    """What NCCL_NET the workers ran with: ``IB``, ``any`` (sockets allowed), None (gloo)."""
    if collective != "nccl":
        return None
    return "any" if allow_socket else "IB"


def _interface_rate(options: NetOptions) -> float | None:
    address = local_address_towards(options.host or "", options.port or 9)
    interface = interface_for_address(address) if address else None
    return read_ethernet_speed_gbps(interface, options.sysfs_root) if interface else None


# --- the rail worker: python -m probes.net.nccl ------------------------------------------------


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:300] if text else ''}".rstrip(": ")


def since(started: float) -> float:
    return round(time.monotonic() - started, 3)
