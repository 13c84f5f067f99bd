"""The command line builds the run's connection (gpudiag.run.connection) from the request's
``Reach``: a stand-in fleet's own connector and pair runner (``--simulate``, ``demo``), this
machine alone (``--here``), srun steps (``--launcher slurm``), or SSH sessions pooled one per
host as the open-file limit allows. The run is handed it through its ``Runtime``."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

from ..errors import InputError
from ..hosts import HostSpec
from ..run.connection import Connection, stand_in_only
from ..run.request import Reach
from ..slurm.launcher import slurm_connector
from ..transport.fdlimit import plan_open_files
from ..transport.fleet import FleetConnector
from ..transport.local import LocalConnector
from ..transport.pool import SessionPool
from ..transport.sshconfig import resolve_all


def connect(reach: Reach, hosts: Sequence[HostSpec], fanout: int) -> Connection:
    """The connection to ``hosts`` as ``reach`` asks, with at most ``fanout`` hosts at once.
    Raises InputError (a host ssh's config rejects is no error: it is unreachable) before any
    host is touched."""
    if reach.stand_in is not None:
        return stand_in_only(reach, hosts, fanout)
    if reach.here:
        if len(hosts) != 1:
            raise InputError(f"--here probes this machine: name it as one host, not {len(hosts)}")
        return Connection(LocalConnector(reach.settings.output), fanout, fanout)
    if reach.launcher == "slurm":
        # srun does the fan-out: one step for every host at once; the pairs stay at --fanout at once.
        pool, addresses, steps = slurm_connector(hosts, reach.ssh, reach.settings, os.environ, reach.launcher_fallback,
                                                 reach.slurm_bundle_dir, fanout)
        return Connection(pool, steps, fanout, addresses, session_of=pool.session)
    remote = [host for host in hosts if not host.is_local]
    resolved = resolve_all(remote, reach.ssh)  # a host whose config ssh rejects is unreachable, not the end
    addresses = {label: host.hostname for label, host in resolved.hosts.items()}
    addresses.update({host.label: socket.getfqdn() for host in hosts if host.is_local})
    # One connection per host for the node probes, the re-tests and every link round, as the
    # open-file limit allows (gpudiag.transport.fdlimit).
    per_connection = 4 if any(host.proxy_command for host in resolved.hosts.values()) else 1
    files = plan_open_files(len(resolved.hosts), per_connection, fanout)
    pool = SessionPool(FleetConnector(resolved, reach.ssh, reach.settings), max_open=files.max_open)
    return Connection(pool, files.fanout, files.pairs_at_once, addresses, files.notes, session_of=pool.session)
