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

    def connect(self, host: HostSpec) -> LocalSession:
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
