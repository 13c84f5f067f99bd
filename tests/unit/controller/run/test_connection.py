"""How a run reaches its hosts: the command line builds the connection (gpudiag.cli.connect) and
hands it in through the Runtime; a run without it reaches a stand-in fleet only
(gpudiag.run.connection)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from gpudiag.cli.connect import connect
from gpudiag.errors import InputError
from gpudiag.hosts import HostSpec
from gpudiag.links.remote import PairTestOptions
from gpudiag.run.connection import stand_in_only
from gpudiag.run.fanout import SweepOptions
from gpudiag.run.hostprobe import ProbeOptions
from gpudiag.run.request import LinkOptions, Reach, SweepRequest
from gpudiag.run.runtime import Runtime
from gpudiag.run.sweep import run_sweep
from gpudiag.sim import FleetFile
from gpudiag.transport.local import LocalConnector
from gpudiag.transport.pool import SessionPool
from gpudiag.transport.sshconfig import SshOptions


def _fleet(tmp_path: Path) -> FleetFile:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"nodes": 2, "name_format": "n{}"}))
    return FleetFile(str(path))


def test_a_run_without_the_command_lines_builder_refuses_real_hosts_before_touching_any(tmp_path: Path):
    request = SweepRequest(hosts_argument="node[1-2]", sweep=SweepOptions(ProbeOptions(names=("gemm",))),
                           links=LinkOptions(mode="none"))
    with pytest.raises(InputError, match="no way to reach real hosts"):
        run_sweep(request, Runtime())
    with pytest.raises(InputError, match="no way to reach real hosts"):
        stand_in_only(Reach(), [HostSpec("node1")], 4)


def test_a_stand_in_fleet_brings_its_own_connector_and_pair_runner(tmp_path: Path):
    fleet = _fleet(tmp_path)
    for build in (stand_in_only, connect):
        connection = build(Reach(stand_in=fleet), fleet.host_specs(), 8)
        try:
            assert (connection.fanout, connection.pairs_at_once, connection.session_of) == (8, 8, None)
            results = connection.pairs(PairTestOptions()).run_pair("n1", "n2")
            assert results and all(r.error is None and r.gbps for r in results)
        finally:
            connection.connector.close()
    # the default runtime sweeps a stand-in fleet whole
    result = run_sweep(SweepRequest(hosts_argument=None, sweep=SweepOptions(ProbeOptions(names=("gemm",))),
                                    reach=Reach(stand_in=fleet), links=LinkOptions(mode="full")), Runtime())
    assert [host.status for host in result.hosts] == ["ok", "ok"] and result.links


def test_here_is_this_machine_alone():
    connection = connect(Reach(here=True), [HostSpec("localhost")], 64)
    assert isinstance(connection.connector, LocalConnector) and connection.session_of is None
    with pytest.raises(InputError, match="--here probes this machine: name it as one host, not 2"):
        connect(Reach(here=True), [HostSpec("a"), HostSpec("b")], 64)


def test_ssh_hosts_are_pooled_with_the_address_ssh_reaches(tmp_path: Path):
    config = tmp_path / "ssh_config"
    config.write_text("Host gpu1\n  HostName 10.1.2.3\n  Port 2222\n")
    connection = connect(Reach(ssh=SshOptions(config_file=str(config))), [HostSpec("gpu1"), HostSpec("localhost")], 16)
    try:
        assert isinstance(connection.connector, SessionPool) and connection.session_of is not None
        assert connection.ssh_addresses == {"gpu1": "10.1.2.3", "localhost": socket.getfqdn()}
        assert 1 <= connection.fanout <= 16 and 1 <= connection.pairs_at_once
        assert connection.pairs is None
    finally:
        connection.connector.close()
