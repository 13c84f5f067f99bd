"""Every phase of a host is inside its time limit: a host still connecting or copying the bundle
when its time is up is ``timeout`` at that moment, naming the phase, and what it had started is
cancelled. (The real thing, an sshd whose SFTP hangs, is tests/integration/test_hung_sftp.py;
here the connector is a test transport implementing the Connector protocol.)"""

from __future__ import annotations

import sys
import threading
import time

from gpudiag.bundle import Bundle, locate_bundle
from gpudiag.hosts import HostSpec
from gpudiag.run.fanout import SweepOptions, probe_hosts
from gpudiag.run.hostprobe import ProbeOptions
from gpudiag.run.progress import QuietProgress
from gpudiag.transport import TransportError
from gpudiag.transport.local import LocalSession

LIMIT_S = 2.0


class _HungCopy(LocalSession):
    """A session whose bundle copy hangs until the session is cancelled (a hung home folder)."""

    def __init__(self) -> None:
        super().__init__()
        self.cancelled = threading.Event()

    def prepare(self, bundle: Bundle) -> None:
        if self.cancelled.wait(60.0):
            raise TransportError("the copy was ended")

    def cancel(self) -> None:
        self.cancelled.set()
        super().cancel()


class _HangingConnector:
    """Connecting to ``stuck`` hangs (a handshake that never ends) until ``close``; the session of
    ``nfs`` hangs copying the bundle."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.sessions: dict[str, _HungCopy] = {}

    def connect(self, host: HostSpec, within_s: float | None = None) -> LocalSession:
        if host.host == "stuck":
            self.release.wait(60.0)
            return LocalSession()
        session = self.sessions[host.host] = _HungCopy()
        return session

    def close(self) -> None:
        self.release.set()


def test_hosts_stuck_connecting_or_copying_the_bundle_are_timeouts_at_their_limit_naming_the_phase():
    connector = _HangingConnector()
    options = SweepOptions(ProbeOptions(names=("facts",), python=sys.executable), host_timeout_s=LIMIT_S)
    done: list[str] = []
    started = time.monotonic()
    try:
        result = probe_hosts([HostSpec("stuck"), HostSpec("nfs")], options, connector, locate_bundle(),
                           QuietProgress(), on_host_done=lambda outcome: done.append(outcome.host))
    finally:
        connector.close()
    elapsed = time.monotonic() - started
    assert elapsed < LIMIT_S + 10.0  # at the limit, never at the 60 s the hangs would last
    statuses = {host.host: (host.status, host.error or "") for host in result.hosts}
    assert statuses["stuck"][0] == "timeout" and "still connecting" in statuses["stuck"][1]
    assert statuses["nfs"][0] == "timeout" and "still copying the probe bundle" in statuses["nfs"][1]
    assert f"the host's {LIMIT_S:g} s time limit" in statuses["nfs"][1]
    assert all(LIMIT_S <= host.duration_s < LIMIT_S + 5.0 for host in result.hosts)
    assert connector.sessions["nfs"].cancelled.is_set()  # the copy under way was ended
    assert sorted(done) == ["nfs", "stuck"]  # each recorded once, as it ended
    assert {f.host for f in result.findings if f.kind == "unchecked"} == {"stuck", "nfs"}
    assert int(result.exit_code) == 3


class _DeafConnector:
    """Every connect hangs, whatever time it is given (a transport whose handshake waits cannot
    be cut short), until ``close``; notes the time each host was given."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.given: dict[str, float | None] = {}
        self._lock = threading.Lock()

    def connect(self, host: HostSpec, within_s: float | None = None) -> LocalSession:
        with self._lock:
            self.given[host.host] = within_s
        self.release.wait(120.0)
        raise TransportError("released")

    def close(self) -> None:
        self.release.set()


def test_a_host_stuck_connecting_frees_its_fanout_slot_at_its_time_limit_and_the_next_host_starts():
    # 8 hosts at fan-out 2: four waves of the 1 s limit. A slot held until the stuck connect
    # returned (120 s here; paramiko's banner timeout, 15 s, over SSH) would keep the second
    # wave from ever starting while this sweep runs.
    connector = _DeafConnector()
    hosts = [HostSpec(f"hung{i}") for i in range(8)]
    options = SweepOptions(ProbeOptions(names=("facts",), python=sys.executable), fanout=2, host_timeout_s=1.0)
    started = time.monotonic()
    try:
        result = probe_hosts(hosts, options, connector, locate_bundle(), QuietProgress())
    finally:
        connector.close()
    assert time.monotonic() - started < 60.0  # four 1 s waves; never a wave per stuck connect
    assert [host.status for host in result.hosts] == ["timeout"] * 8
    assert all("still connecting" in (host.error or "") for host in result.hosts)
    # each connect was given the host's time, to end its own waits by then
    assert sorted(connector.given) == [host.host for host in hosts]
    assert all(given is not None and 0 < given <= 1.0 for given in connector.given.values())
