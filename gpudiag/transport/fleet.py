"""Which transport reaches which host: ``localhost`` runs here, everything else over SSH."""

from __future__ import annotations

from ..hosts import HostSpec
from . import Session, Unreachable
from .local import LocalSession
from .ssh import SshConnector, SshSettings
from .sshconfig import ResolvedFleet, SshOptions, resolve_jump_host


class FleetConnector:
    """Sessions for the hosts of one sweep, whose SSH settings were resolved before it began (a host whose
    configuration ssh rejects is ``unreachable``, with the config problem and its fix as the error)."""

    def __init__(self, resolved: ResolvedFleet, ssh_options: SshOptions, settings: SshSettings) -> None:
        self._resolved = resolved
        self._output = settings.output  # this machine's commands are read within the same caps
        # Jump hosts are resolved when first needed, each with ssh -G as the ssh -W that ssh starts for it.
        self._ssh = SshConnector(settings, resolve_jump=lambda hop, via: resolve_jump_host(hop, ssh_options, via))

    def connect(self, host: HostSpec, within_s: float | None = None) -> Session:
        """A session on ``host`` (within ``within_s`` seconds, as Connector says); raises
        TransportError when it cannot be reached or trusted."""
        if host.is_local:
            return LocalSession(limits=self._output)
        problem = self._resolved.problems.get(host.label)
        if problem is not None:
            raise Unreachable(problem.message)
        resolved = self._resolved.hosts.get(host.label)
        if resolved is None:
            raise Unreachable(f"{host.label}: no SSH settings were resolved for this host")
        return self._ssh.connect(resolved, within_s)

    def close(self) -> None:
        self._ssh.close()
