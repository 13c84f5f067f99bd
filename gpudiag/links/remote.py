"""Pair tests on real nodes: the pair server started on one end, the client on the other, both
over the sessions the sweep already holds (gpudiag.transport.pool).

For the pair a–b: ``python -m probes net-server`` starts on b and prints the port it bound; the
client runs on a against b's data-plane address and prints one record per direction and rail;
the server ends by itself after its test or its deadline. Each rail's figure is the slower
direction's (a collective waits for it). Anything that goes wrong — no session, a server that
never listens, a client that cannot connect, stalls or crashes — comes back as error results
naming the end and the reason, never as an exception and never as a figure.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ProbeOutputError
from ..results import ProbeResult, parse_probe_output
from ..transport import CommandResult, RunningCommand, Session, TransportError
from ..transport.cancel import cancel_all
from .attribution import BACKENDS, LinkResult

AUTO = "auto"
NET_BACKENDS = (AUTO, *BACKENDS)
# Seconds the node's Python needs to start (and import torch for nccl) before the test begins.
STARTUP_S = 30.0
# After the client ends, how long the server gets to end by itself; after a client that failed
# (it may never have reached the server, which then waits for its deadline) it is ended sooner.
SERVER_END_S = 10.0
SERVER_END_AFTER_FAILURE_S = 1.0
# After Ctrl-C, how long the pair servers get to be ended on their nodes (all at once).
CANCEL_WAIT_S = 15.0


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

    def server_argv(self) -> list[str]:
        argv = [self.python, "-m", "probes", "net-server", "--backend", self.backend,
                "--deadline", f"{self.deadline_s + STARTUP_S:g}"]
        return argv + self._flags()

    def client_argv(self, backend: str, address: str, port: int) -> list[str]:
        host = f"[{address}]" if ":" in address else address
        argv = [self.python, "-m", "probes", "net-client", "--backend", backend, "--connect", f"{host}:{port}",
                "--duration", f"{self.duration_s:g}", "--streams", str(self.streams),
                "--deadline", f"{self.deadline_s:g}"]
        return argv + self._flags()

    def _flags(self) -> list[str]:
        return ["--allow-socket"] * self.allow_socket + ["--host-memory"] * self.host_memory


class RemotePairRunner:
    """The PairRunner of gpudiag.links.rounds over the sweep's sessions. ``session_of(host)``
    gives a host's open session (None: it has none), which the runner closes when its pair is
    done (a pooled session stays connected); ``addresses`` each host's data-plane address.
    Thread-safe: the pairs of a round run at once."""

    def __init__(self, session_of: Callable[[str], Session | None], addresses: Mapping[str, str],
                 options: PairTestOptions) -> None:
        self._session_of = session_of
        self._addresses = dict(addresses)
        self._options = options
        self._lock = threading.Lock()
        self._running: set[RunningCommand] = set()

    def run_pair(self, a: str, b: str) -> list[LinkResult]:
        """One result per rail of a–b, client on ``a``, server on ``b`` (see the module)."""
        backend = self._options.backend
        try:
            return self._run_pair(a, b)
        except TransportError as error:
            return [self._error(a, b, backend, None, str(error))]

    def cancel(self) -> None:
        """End every server started and not yet finished (Ctrl-C); the clients end with their
        sessions' ``cancel``."""
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
        server = server_session.start(options.server_argv(), options.deadline_s + STARTUP_S)
        with self._lock:
            self._running.add(server)
        try:
            listening = _event(server.first_line(STARTUP_S + 5.0))
            if listening.get("event") != "listening":
                ended = server.finish(SERVER_END_S)
                reason = listening.get("reason") or _last_words(ended.stderr) or "it printed no port"
                return [self._error(a, b, str(listening.get("backend") or options.backend), None,
                                    f"{b}: the pair server did not start: {reason}")]
            backend = str(listening.get("backend"))
            client = client_session.run(options.client_argv(backend, self._addresses[b], int(listening["port"])),
                                        options.deadline_s + STARTUP_S)
            records, problem = _client_records(a, client, options.deadline_s + STARTUP_S)
            measured = problem is None and bool(records) and all(record.ok for record in records)
            server_end = server.finish(SERVER_END_S if measured else SERVER_END_AFTER_FAILURE_S)
        except TransportError:
            server.cancel()
            raise
        finally:
            with self._lock:
                self._running.discard(server)
        if problem is not None:
            return [self._error(a, b, backend, None, problem)]
        if not records:
            why = _last_words(client.stderr) or _last_words(server_end.stderr) or f"exit status {client.exit_status}"
            return [self._error(a, b, backend, None, f"{a}: the pair client printed no result: {why}")]
        return self._rails(a, b, backend, records)

    def _rails(self, a: str, b: str, backend: str, records: Sequence[ProbeResult]) -> list[LinkResult]:
        by_rail: dict[int | None, list[ProbeResult]] = defaultdict(list)
        for record in records:
            if record.probe == "net":
                rail = record.params.get("rail")
                by_rail[rail if isinstance(rail, int) else None].append(record)
        results = []
        for rail, rail_records in sorted(by_rail.items(), key=lambda item: -1 if item[0] is None else item[0]):
            line_rate = self._line_rate(rail_records)
            failed = [r for r in rail_records if not r.ok or r.value is None]
            if failed:
                results.append(LinkResult(a, b, backend, rail, line_rate_gbps=line_rate, error=_failure(failed)))
                continue
            slowest = min(float(r.value) for r in rail_records if r.value is not None)
            results.append(LinkResult(a, b, backend, rail, max(0.0, slowest), line_rate))
        return results

    def _line_rate(self, records: Sequence[ProbeResult]) -> float | None:
        if self._options.line_rate_gbps is not None:
            return self._options.line_rate_gbps
        rates = [float(rate) for r in records if isinstance(rate := r.details.get("line_rate_gbps"), int | float)
                 and rate > 0]
        return min(rates) if rates else None

    def _error(self, a: str, b: str, backend: str, rail: int | None, reason: str) -> LinkResult:
        backend = backend if backend in BACKENDS else "tcp"
        return LinkResult(a, b, backend, rail, line_rate_gbps=self._options.line_rate_gbps, error=reason)


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
    reasons = {str(r.params.get("direction", "?")): r.reason or r.status for r in failed}
    if len(reasons) > 1 and len(set(reasons.values())) == 1:
        return f"both directions: {next(iter(reasons.values()))}"
    return "; ".join(sorted(f"{direction}: {reason}" for direction, reason in reasons.items()))


def _event(line: str | None) -> dict[str, Any]:
    if line is None:
        return {}
    try:
        event = json.loads(line)
    except ValueError:
        return {"reason": f"not a JSON line: {line[:120]!r}"}
    return event if isinstance(event, dict) else {}


def _last_words(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
