"""Pair tests on real nodes: the pair server started on one end, the client on the other, both
over the sessions the sweep already holds (gpudiag.transport.pool).

For the pair a–b: ``python -m probes net-server`` starts on b, bound to b's data-plane address,
and prints the port it listens on; the client runs on a against that address and prints one
record per direction and rail; the server ends by itself after its test, its accept window or
its deadline, or at once when this controller is gone (its stdin, held by the SSH session,
reaches end of file) or ends it because the client failed. Each test has a secret of its own,
given to both ends over their sessions as the first line of their stdin (never on a command line
where the node's users could read it, never printed, and cut out of any node text quoted in an
error), which each end proves to the other (probes/net/auth.py): a stranger on the data network
neither takes the session nor gets a figure.

Each rail's figure is the slower direction's (a collective waits for it). Every line a node
prints is checked (gpudiag.links.protocol; the client's records by gpudiag.records and then
here: one record per rail and direction, every direction asked for, figures finite and within
``MAX_LINK_GBPS``). Anything that goes wrong — no session, a server that never listens or prints
a malformed line, a client that cannot connect, stalls, crashes or prints malformed records —
comes back as error results naming the end and the reason, never as an exception and never as a
figure. Where the cause is one end's own (its server did not start, or its client printed no
valid records) the result says so (``fault``), and only that end's verdict changes.
"""

from __future__ import annotations

import math
import secrets
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..errors import ProbeOutputError
from ..records import ProbeResult, parse_probe_output
from ..transport import CommandResult, RunningCommand, Session, TransportError
from ..transport.cancel import cancel_all
from .attribution import BACKENDS, LinkResult
from .groups import MAX_STREAMS, StreamFigure
from .protocol import Listening, PairProtocolError, done_event, listening_event, parse_event, plain_text

AUTO = "auto"
# The backend whose streams' paths a client traces (TTL-limited SYNs of each stream's 5-tuple).
TRACED_BACKEND = "tcp"
NET_BACKENDS = (AUTO, *BACKENDS)
# Seconds the node's Python needs to start (and import torch for nccl) before the test begins.
STARTUP_S = 30.0
# After the client ends, how long the server gets to end by itself; after a client that failed
# (it may never have reached the server, which then waits for its deadline) it is ended sooner.
SERVER_END_S = 10.0
SERVER_END_AFTER_FAILURE_S = 1.0
# How long past its own time limit a client is waited for (the node's ``timeout -k`` ends it first).
CLIENT_GRACE_S = 10.0
# After Ctrl-C, how long the pair servers get to be ended on their nodes (all at once).
CANCEL_WAIT_S = 15.0
# Seconds a server waits for its client: the client starts as soon as the server's port is read,
# and needs its Python (and torch, for nccl) first.
ACCEPT_WINDOW_S = STARTUP_S
# Bytes of a pair test's secret (hex on the command lines: 64 digits).
SECRET_BYTES = 32
# Where a secret would appear in a node's text (an error quoting its command line).
HIDDEN = "<secret>"
# --token's value that has a node read the secret from the first line of its stdin.
STDIN = "-"
DIRECTIONS = ("client_to_server", "server_to_client")
# Bounds of a client's records: Gbit/s of one figure (far above any NIC: 8 × 1.6 Tb/s ports
# bonded), and rails of one pair.
MAX_LINK_GBPS = 100_000.0
MAX_RAILS = 64


@dataclass(frozen=True)
class PairTestOptions:
    """How every pair is tested: ``backend`` (auto: the server node's choice), timed seconds per
    direction, parallel streams, the nodes' Python, and ``line_rate_gbps`` (Gb/s) to judge
    links against where the nodes' own port speed is wrong or unknown (virtual NICs);
    ``host_memory``: no GPU memory is touched (a job paused for mitigation holds it), so perftest
    runs without GPUDirect and auto never picks nccl (the nodes' ``--host-memory``)."""

    backend: str = AUTO
    duration_s: float = 2.0
    streams: int = 4
    python: str = "python3"
    line_rate_gbps: float | None = None
    allow_socket: bool = False
    host_memory: bool = False

    @property
    def deadline_s(self) -> float:
        """The pair processes' own deadline: both directions, and time to connect and warm up."""
        return 2 * self.duration_s + STARTUP_S

    def server_argv(self, secret: str | None = None, bind: str | None = None) -> list[str]:
        """The pair server's command line: listening on ``bind`` (the address its client will
        use), proving ``secret``, ending when its stdin closes or no client came in time."""
        argv = [self.python, "-m", "probes", "net-server", "--backend", self.backend,
                "--deadline", f"{self.deadline_s + STARTUP_S:g}", "--accept-window", f"{ACCEPT_WINDOW_S:g}",
                "--stdin-lifeline"]
        argv += ["--bind", bind] if bind else []
        return argv + self._flags(secret)

    def client_argv(self, backend: str, address: str, port: int, secret: str | None = None,
                    trace_hops: int = 0) -> list[str]:
        """The pair client's command line; ``trace_hops``: the switches between the two leaves
        whose address each stream's path is traced for (tcp only; 0: none)."""
        host = f"[{address}]" if ":" in address else address
        argv = [self.python, "-m", "probes", "net-client", "--backend", backend, "--connect", f"{host}:{port}",
                "--duration", f"{self.duration_s:g}", "--streams", str(self.streams),
                "--deadline", f"{self.deadline_s:g}", "--stdin-lifeline"]
        argv += ["--trace-hops", str(trace_hops)] if trace_hops > 0 and backend == TRACED_BACKEND else []
        return argv + self._flags(secret)

    def _flags(self, secret: str | None) -> list[str]:
        # ``-``: the secret comes on stdin (RemotePairRunner._start), never shown on a command line
        token = ["--token", secret] if secret else []
        return token + ["--allow-socket"] * self.allow_socket + ["--host-memory"] * self.host_memory


class PathTracer(Protocol):
    """What a topology says of a pair's paths (gpudiag.fabric): how many switches between the two
    leaves each stream's path is traced through, and the switches a traced path's router
    addresses name."""

    def hops_to_trace(self, a: str, b: str) -> int:
        """Switches between the leaves of client ``a`` and server ``b`` (0: nothing to trace)."""
        ...

    def switches(self, a: str, b: str, addresses: Sequence[str | None]) -> tuple[str, ...] | None:
        """The path of a stream from ``a`` to ``b``, its switches in order (``a``'s leaf first),
        from the addresses its traced hops answered from; None where one did not answer or names
        no switch of the topology."""
        ...


class RemotePairRunner:
    """The PairRunner of gpudiag.links.rounds over the sweep's sessions. ``session_of(host)``
    gives a host's open session (None: it has none), which the runner closes when its pair is
    done (a pooled session stays connected); ``addresses`` each host's data-plane address;
    ``tracer``: the topology's paths, to trace each tcp stream's (None: no tracing).
    Thread-safe: the pairs of a round run at once."""

    def __init__(self, session_of: Callable[[str], Session | None], addresses: Mapping[str, str],
                 options: PairTestOptions, tracer: PathTracer | None = None) -> None:
        self._session_of = session_of
        self._addresses = dict(addresses)
        self._options = options
        self._tracer = tracer
        self._lock = threading.Lock()
        self._running: set[RunningCommand] = set()

    def run_pair(self, a: str, b: str) -> list[LinkResult]:
        """One result per rail of a–b, client on ``a``, server on ``b`` (see the module)."""
        backend = self._options.backend
        try:
            return self._run_pair(a, b)
        except TransportError as error:
            return [self._error(a, b, backend, None, str(error))]

    def round_started(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Nothing to prepare: real pairs load the real fabric."""
        return None

    def cancel(self) -> None:
        """End every server and client started and not yet finished (Ctrl-C, the run's deadline)."""
        with self._lock:
            running = list(self._running)
        cancel_all(running, CANCEL_WAIT_S)

    def _run_pair(self, a: str, b: str) -> list[LinkResult]:
        client_session, server_session = self._session_of(a), self._session_of(b)
        try:
            for host, session in ((a, client_session), (b, server_session)):
                if session is None:
                    return [self._error(a, b, self._options.backend, None,
                                        f"{host}: no open SSH session for the pair test")]
            assert client_session is not None and server_session is not None
            return self._test(a, b, client_session, server_session)
        finally:  # handed back: the pool keeps the connections (or closes some where files are short)
            for session in (client_session, server_session):
                if session is not None:
                    session.close()

    def _test(self, a: str, b: str, client_session: Session, server_session: Session) -> list[LinkResult]:
        options = self._options
        secret = secrets.token_hex(SECRET_BYTES)
        address = self._addresses[b]
        server = self._start(b, server_session, lambda token: options.server_argv(token, address), secret)
        with self._lock:
            self._running.add(server)
        try:
            started = _listening(b, server, secret)
            if isinstance(started, str):
                return [self._error(a, b, options.backend, None, started, fault=b)]
            hops = self._tracer.hops_to_trace(a, b) if self._tracer is not None else 0
            client = self._run_client(a, client_session, lambda token: options.client_argv(
                started.backend, address, started.port, token, hops), secret)
            records, problem = _client_records(a, client, options.deadline_s + STARTUP_S)
            if problem is None:
                problem = check_records(a, records)
            measured = problem is None and bool(records) and all(record.ok for record in records)
            if not measured:
                server.cancel()  # the client will not come (back): the server has nothing to wait for
            server_end = server.finish(SERVER_END_S if measured else SERVER_END_AFTER_FAILURE_S)
        except TransportError:
            server.cancel()
            raise
        finally:
            with self._lock:
                self._running.discard(server)
        backend = started.backend
        if problem is not None:
            return [self._error(a, b, backend, None, _hide(problem, secret), fault=a)]
        if not records:
            why = _last_words(client.stderr) or _last_words(server_end.stderr) or f"exit status {client.exit_status}"
            return [self._error(a, b, backend, None, _hide(f"{a}: the pair client printed no result: {why}", secret),
                                fault=a)]
        return self._rails(a, b, backend, records, secret)

    def _start(self, host: str, session: Session, command_line: Callable[[str], list[str]],
               secret: str) -> RunningCommand:
        """Start a pair command on ``host`` with the test's secret on its stdin (``--token -``):
        never on its command line, which every user of the node can read."""
        command = session.start(command_line(STDIN), self._options.deadline_s + STARTUP_S)
        try:
            command.send_line(secret)
        except TransportError:
            pass  # it ended already: what it printed, or that it had no secret, says why
        return command

    def _run_client(self, host: str, session: Session, command_line: Callable[[str], list[str]],
                    secret: str) -> CommandResult:
        """Run the client as a started command: its stdin carries the secret and stays live while
        this controller holds it (a ``run`` command's may be at end of file from the start, which
        would end its lifeline)."""
        limit_s = self._options.deadline_s + STARTUP_S
        client = self._start(host, session, command_line, secret)
        with self._lock:
            self._running.add(client)
        try:
            return client.finish(limit_s + CLIENT_GRACE_S)
        finally:
            with self._lock:
                self._running.discard(client)

    def _rails(self, a: str, b: str, backend: str, records: Sequence[ProbeResult], secret: str) -> list[LinkResult]:
        by_rail: dict[int | None, list[ProbeResult]] = defaultdict(list)
        for record in records:
            rail = record.params.get("rail")
            by_rail[rail if isinstance(rail, int) else None].append(record)
        results = []
        for rail, rail_records in sorted(by_rail.items(), key=lambda item: -1 if item[0] is None else item[0]):
            line_rate = self._line_rate(rail_records)
            # (a rate given on the command line judges every pair: the ends' own are not asked)
            ends = ((None, None) if self._options.line_rate_gbps is not None else
                    (_end_rate(rail_records, "local_line_rate_gbps"), _end_rate(rail_records, "peer_line_rate_gbps")))
            failed = [r for r in rail_records if not r.ok or r.value is None]
            if failed:
                results.append(LinkResult(a, b, backend, rail, line_rate_gbps=line_rate,
                                          error=_hide(_failure(failed), secret), end_rates_gbps=ends))
                continue
            slowest = min(float(r.value) for r in rail_records if r.value is not None)
            forward, backward = self._streams(a, b, rail_records)
            results.append(LinkResult(a, b, backend, rail, max(0.0, slowest), line_rate, streams=forward,
                                      back_streams=backward, end_rates_gbps=ends))
        return results

    def _streams(self, a: str, b: str,
                 records: Sequence[ProbeResult]) -> tuple[tuple[StreamFigure, ...], tuple[StreamFigure, ...]]:
        """Each direction's streams of one rail (client to server, then back), each client-to-server
        stream's traced path named by the tracer; none where a record's figures do not add up."""
        directions = {}
        for record in records:
            figures = _stream_figures(record)
            hops = record.details.get("stream_hops") if record.params.get("direction") == DIRECTIONS[0] else None
            paths: list[tuple[str, ...] | None] = [None] * len(figures)
            if self._tracer is not None and isinstance(hops, list) and len(hops) == len(figures):
                paths = [self._tracer.switches(a, b, trace) if isinstance(trace, list) else None for trace in hops]
            directions[record.params.get("direction")] = tuple(
                StreamFigure(gbps, path) for gbps, path in zip(figures, paths, strict=True))
        return directions.get(DIRECTIONS[0], ()), directions.get(DIRECTIONS[1], ())

    def _line_rate(self, records: Sequence[ProbeResult]) -> float | None:
        if self._options.line_rate_gbps is not None:
            return self._options.line_rate_gbps
        return _end_rate(records, "line_rate_gbps")

    def _error(self, a: str, b: str, backend: str, rail: int | None, reason: str,
               fault: str | None = None) -> LinkResult:
        backend = backend if backend in BACKENDS else "tcp"
        return LinkResult(a, b, backend, rail, line_rate_gbps=self._options.line_rate_gbps, error=reason, fault=fault)


def _end_rate(records: Sequence[ProbeResult], field: str) -> float | None:
    """The lowest rate the client's records give under ``field`` (its own port's
    ``local_line_rate_gbps``, its peer's ``peer_line_rate_gbps``, or the pair's ``line_rate_gbps``);
    None where none gives a number in (0, MAX_LINK_GBPS]."""
    rates = [float(rate) for r in records if isinstance(rate := r.details.get(field), int | float)
             and not isinstance(rate, bool) and math.isfinite(rate) and 0 < rate <= MAX_LINK_GBPS]
    return min(rates) if rates else None


# What a direction's streams may add up to against its figure: each stream's figure is its bytes
# over its own time, the direction's over the time from its first byte to its last, so streams
# on a slow path that finish late leave their sum above the figure (never below it, but for
# rounding); past these bounds they are no streams of that one measurement.
STREAMS_BELOW = 0.75
STREAMS_ABOVE = 2.0


def _stream_figures(record: ProbeResult) -> list[float]:
    """A record's per-stream Gbit/s (``stream_gbps``, checked by the record's schema), where they
    add up to between STREAMS_BELOW and STREAMS_ABOVE of its figure; else none."""
    figures = record.details.get("stream_gbps")
    if not isinstance(figures, list) or not figures or record.value is None or len(figures) > MAX_STREAMS:
        return []
    values = [float(v) for v in figures if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)]
    total, figure = math.fsum(values), float(record.value)
    if len(values) != len(figures) or not STREAMS_BELOW * figure <= total <= STREAMS_ABOVE * figure:
        return []
    return values


def _listening(host: str, server: RunningCommand, secret: str) -> Listening | str:
    """The server's checked ``listening`` line, or why it did not start (its ``done`` line's
    reason, a malformed line, or its last words), the server then ended."""
    line = server.first_line(STARTUP_S + 5.0)
    try:
        event = parse_event(line)
        if event["event"] == "listening":
            return listening_event(event)
        why = done_event(event).reason or "it printed no port"
    except PairProtocolError as error:
        if line is None:
            server.cancel()
            ended = server.finish(SERVER_END_AFTER_FAILURE_S)
            why = _last_words(ended.stderr) or "it printed no port"
            return _hide(f"{host}: the pair server did not start: {why}", secret)
        why = f"its first line is no listening event: {error}"
    server.cancel()
    server.finish(SERVER_END_AFTER_FAILURE_S)
    return _hide(f"{host}: the pair server did not start: {why}", secret)


def check_records(host: str, records: Sequence[ProbeResult]) -> str | None:
    """Why a client's records cannot be a pair test's figures, or None: each a ``net`` record
    with a direction and a rail below MAX_RAILS (or none), one per rail and direction, every
    direction for every rail, and every figure finite, not negative and at most MAX_LINK_GBPS."""
    seen: dict[int | None, set[str]] = defaultdict(set)
    for record in records:
        rail, direction = record.params.get("rail"), record.params.get("direction")
        if record.probe != "net":
            return f"{host}: the pair client printed a {plain_text(record.probe, 40)!r} record"
        if direction not in DIRECTIONS:
            return f"{host}: a pair client record names no direction"
        if rail is not None and (not isinstance(rail, int) or isinstance(rail, bool) or not 0 <= rail < MAX_RAILS):
            return f"{host}: a pair client record names rail {plain_text(str(rail), 40)!r}"
        if direction in seen[rail]:
            return f"{host}: the pair client printed two records for {direction} on rail {rail}"
        seen[rail].add(str(direction))
        value = record.value
        if record.ok and (value is None or isinstance(value, bool) or not math.isfinite(value)
                          or not 0 <= value <= MAX_LINK_GBPS):
            return f"{host}: the pair client printed {plain_text(str(value), 40)} Gbit/s, no figure a link can have"
    for rail, directions in seen.items():
        if directions != set(DIRECTIONS):
            missing = ", ".join(sorted(set(DIRECTIONS) - directions))
            return f"{host}: the pair client printed no record for {missing} on rail {rail}"
    return None


def _client_records(host: str, client: CommandResult, timeout_s: float) -> tuple[list[ProbeResult], str | None]:
    """The client's records, or why there are none to read (it timed out, or printed something
    other than records)."""
    if client.timed_out:
        return [], f"{host}: the pair client did not end within {timeout_s:g} s"
    try:
        return parse_probe_output(client.stdout, f"{host} net-client"), None
    except ProbeOutputError as error:
        return [], str(error)


def _failure(failed: Sequence[ProbeResult]) -> str:
    """Why a rail has no figure: ``both directions: <reason>`` when they failed alike, else each
    direction's reason."""
    reasons = {str(r.params.get("direction", "?")): plain_text(r.reason or r.status) for r in failed}
    if len(reasons) > 1 and len(set(reasons.values())) == 1:
        return f"both directions: {next(iter(reasons.values()))}"
    return "; ".join(sorted(f"{direction}: {reason}" for direction, reason in reasons.items()))


def _hide(text: str, secret: str) -> str:
    """``text`` with the pair test's secret cut out (an argparse error quotes the command line)."""
    return text.replace(secret, HIDDEN)


def _last_words(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return plain_text(lines[-1]) if lines else ""
