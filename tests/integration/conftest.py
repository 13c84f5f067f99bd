"""Fixtures of real OpenSSH hosts on loopback addresses (the harness is ``sshd_hosts.py`` beside this file),
of hosts in network namespaces with their own sshd and data network (``netns_hosts.py``), and of a real Slurm
cluster on this machine (``slurm_cluster.py``).

``sshd_fleet`` is one 8-host fleet shared by a test module: tests that change a host (reject the client key,
restart it) take their own from ``make_sshd_fleet`` instead. Both fail where sshd cannot run, and fail the
test if a process of the fleet (listener, connection, session or command) outlives its stop.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# tests/ is no package; put the harness on the path whatever pytest's import mode
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from netns_hosts import MakeNetnsFleet, NetnsFleet, link_names, namespace_names  # noqa: E402
from pair_probes import Probe, stop_probes  # noqa: E402
from slurm_cluster import SlurmCluster  # noqa: E402
from sshd_hosts import MakeSshdFleet, SshdFleet, pid_is_running, sshd_unavailable_reason  # noqa: E402


def _require_sshd() -> None:
    # A missing sshd fails rather than skips: a skipped SSH test checks nothing, and the
    # README's test command installs openssh-server (scripts/install-test-deps).
    reason = sshd_unavailable_reason()
    if reason is not None:
        pytest.fail(f"{reason}; run scripts/install-test-deps as root first")


def _stop_fleets(fleets: list[SshdFleet]) -> None:
    """Stop every fleet, then fail if any process that was part of one is still running."""
    pids = set().union(*(fleet.process_ids() for fleet in fleets))
    for fleet in fleets:
        fleet.stop()
    left = sorted(pid for pid in pids if pid_is_running(pid))
    assert not left, f"processes of an sshd fleet still running after its stop: {left}"


@pytest.fixture(scope="module")
def sshd_fleet() -> Iterator[SshdFleet]:
    """Eight started hosts, node01..node08, shared by the test module; stopped after its last test."""
    _require_sshd()
    fleet = SshdFleet(8).start()
    yield fleet
    _stop_fleets([fleet])


@pytest.fixture
def make_sshd_fleet() -> Iterator[MakeSshdFleet]:
    """A factory ``make_sshd_fleet(count, **SshdFleet options)`` of started fleets, all stopped after the test."""
    _require_sshd()
    fleets: list[SshdFleet] = []

    def make(count: int = 8, *, first_address: str = "127.0.1.1", log_level: str = "VERBOSE",
             session_env: dict[str, str] | None = None) -> SshdFleet:
        fleet = SshdFleet(count, first_address=first_address, log_level=log_level, session_env=session_env)
        fleets.append(fleet)
        return fleet.start()

    yield make
    _stop_fleets(fleets)


# --- hosts in network namespaces (the harness is netns_hosts.py beside this file) ------------------



def _stop_netns_fleets(fleets: list[NetnsFleet]) -> None:
    """Stop every fleet, then fail if a process, namespace or link of one is still there."""
    pids = set().union(*(fleet.process_ids() for fleet in fleets))
    names = {name for fleet in fleets for name in (*fleet.namespaces(), *fleet.root_links())}
    for fleet in fleets:
        fleet.stop()
    left = sorted(pid for pid in pids if pid_is_running(pid))
    assert not left, f"processes of a netns fleet still running after its stop: {left}"
    left_names = sorted(names & (namespace_names() | link_names()))
    assert not left_names, f"namespaces or links of a netns fleet left after its stop: {left_names}"


@pytest.fixture(scope="module")
def netns_fleet() -> Iterator[NetnsFleet]:
    """Six started hosts in network namespaces, node01..node06, shared by the test module; stopped after its
    last test. Tests that cap or cut links undo that themselves."""
    fleet = NetnsFleet(6).start()
    yield fleet
    _stop_netns_fleets([fleet])


@pytest.fixture
def clean_netns_fleet(netns_fleet: NetnsFleet) -> Iterator[NetnsFleet]:
    """The module's six hosts (``netns_fleet``), every data link whole and uncapped again after the test."""
    yield netns_fleet
    netns_fleet.clear_caps()
    for host in netns_fleet.hosts:
        netns_fleet.restore_data(host.name)


@pytest.fixture
def netns_fleet_factory() -> Iterator[MakeNetnsFleet]:
    """A factory ``netns_fleet_factory(count, **NetnsFleet options)`` of started fleets, all stopped after the
    test. Its users are marked to skip where network namespaces cannot be made (netns_hosts.requires_netns)."""
    fleets: list[NetnsFleet] = []

    def make(count: int = 6, *, tag: str | None = None, log_level: str = "ERROR") -> NetnsFleet:
        fleet = NetnsFleet(count, tag=tag, log_level=log_level)
        fleets.append(fleet)
        return fleet.start()

    yield make
    _stop_netns_fleets(fleets)


# --- a Slurm cluster on this machine (the harness is slurm_cluster.py beside this file) ---------------------



def _stop_clusters(clusters: list[SlurmCluster]) -> None:
    """Stop every cluster, then fail if a process of one (daemon, slurmstepd, task) is still running."""
    pids = set().union(*(cluster.process_ids() for cluster in clusters))
    for cluster in clusters:
        cluster.stop()
    left = sorted(pid for pid in pids if pid_is_running(pid))
    assert not left, f"processes of a slurm test cluster still running after its stop: {left}"


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A started four-node cluster, n1..n4, shared by the test module; stopped after its last test."""
    cluster = SlurmCluster(4).start()
    yield cluster
    _stop_clusters([cluster])


@pytest.fixture
def clean_slurm_cluster(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """The module's cluster with this process's SLURM_CONF pointing at it (no outer job's SLURM_* variables);
    after the test every job is cancelled and every node back in service."""
    for name in [name for name in os.environ if name.startswith("SLURM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf_path))
    yield slurm_cluster
    slurm_cluster.reset()


@pytest.fixture
def make_slurm_cluster() -> Iterator[Callable[..., SlurmCluster]]:
    """A factory ``make_slurm_cluster(count, prolog=...)`` of started clusters, all stopped after the test."""
    clusters: list[SlurmCluster] = []

    def make(count: int = 4, *, prolog: str | None = None) -> SlurmCluster:
        cluster = SlurmCluster(count, prolog=prolog)
        clusters.append(cluster)
        return cluster.start()

    yield make
    _stop_clusters(clusters)


# --- pair probes on 127.0.0.1 (the harness is pair_probes.py beside this file) --------------------

@pytest.fixture
def probes() -> Iterator[list[Probe]]:
    """The pair probes a test starts (``pair_probes.start_probe(probes, ...)``), all ended after it."""
    started: list[Probe] = []
    yield started
    stop_probes(started)
