"""The simulated transport and network: unreachable and hung nodes, slow NICs and links in the
pair measurements, the same bytes whatever the thread order, fresh noise on a re-test, and a
whole sweep of the 64-node demo fleet."""

from __future__ import annotations

import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from simfleet import GPUS, ratio, run_node

from gpudiag.bundle import locate_bundle
from gpudiag.exitcodes import ExitCode
from gpudiag.hosts import HostSpec
from gpudiag.run.fanout import SweepOptions, probe_hosts
from gpudiag.run.hostprobe import ProbeOptions
from gpudiag.run.progress import QuietProgress
from gpudiag.sim import SimulatedConnector, SimulatedFleet, demo_fleet_path, load_fleet, parse_fleet
from gpudiag.transport import Unreachable


@pytest.fixture(scope="module")
def demo() -> SimulatedFleet:
    return SimulatedFleet(load_fleet(demo_fleet_path()))


# ------------------------------------------------------------------------------ network links and transport


def test_slow_nics_and_links_show_only_in_link_measurements(demo: SimulatedFleet) -> None:
    def rate(a: str, b: str, rail: int = 0) -> float:
        return statistics.median(demo.link_gbps(a, b, rail, demo.link_rng(a, b, rail, i)) for i in range(9))

    nominal = rate("node001", "node002")
    assert 370 < nominal < 410
    assert rate("node030", "node031") / nominal == pytest.approx(0.6, abs=0.04)
    assert rate("node002", "node030", rail=5) / nominal == pytest.approx(0.6, abs=0.04)
    assert rate("node009", "node004") / nominal == pytest.approx(0.5, abs=0.04)
    assert rate("node004", "node010") / nominal == pytest.approx(1.0, abs=0.04)
    with pytest.raises(ValueError, match="node999"):
        demo.link_gbps("node001", "node999", 0, demo.link_rng("node001", "node999", 0, 0))
    node_results = run_node(SimulatedConnector(demo), "node030")
    assert ratio(node_results, "gemm", "cuda:0") == pytest.approx(1.0, abs=0.04)


def test_an_unreachable_node_and_a_stranger_raise_unreachable(demo: SimulatedFleet) -> None:
    connector = SimulatedConnector(demo)
    with pytest.raises(Unreachable, match="port 22: no answer within 10 s"):
        connector.connect(HostSpec("node050"))
    with pytest.raises(Unreachable, match="not a node of the simulated fleet"):
        connector.connect(HostSpec("elsewhere"))


def test_a_hung_node_times_out_at_once(demo: SimulatedFleet) -> None:
    started = time.monotonic()
    result = SimulatedConnector(demo).connect(HostSpec("node051")).run(ProbeOptions().bundle_argv(), 635.0)
    assert time.monotonic() - started < 1.0
    assert result.timed_out and result.exit_status is None and result.stdout == ""


# ------------------------------------------------------------------------------ determinism


def test_the_same_fleet_gives_the_same_bytes_whatever_the_thread_order(demo: SimulatedFleet) -> None:
    argv = ProbeOptions().bundle_argv()
    hosts = ["node017", "node012", "node002", "node040"]

    def outputs(order: list[str]) -> dict[str, str]:
        connector = SimulatedConnector(load_fleet(demo_fleet_path()))
        with ThreadPoolExecutor(max_workers=4) as pool:
            done = pool.map(lambda host: (host, connector.connect(HostSpec(host)).run(argv, 600.0).stdout), order)
            return dict(done)

    assert outputs(hosts) == outputs(list(reversed(hosts)))


def test_a_retest_gets_fresh_noise_on_the_same_faults(demo: SimulatedFleet) -> None:
    connector = SimulatedConnector(demo)
    first, second = run_node(connector, "node017"), run_node(connector, "node017")
    assert [r.value for r in first if r.probe == "gemm"] != [r.value for r in second if r.probe == "gemm"]
    assert ratio(second, "gemm", "cuda:3") == pytest.approx(0.85, abs=0.03)
    assert [r.gpu_uuid for r in first] == [r.gpu_uuid for r in second]
    other_seed = SimulatedConnector(parse_fleet({"nodes": 20, "seed": 8}, "x"))
    assert [r.value for r in run_node(other_seed, "node017") if r.probe == "gemm"] != [
        r.value for r in first if r.probe == "gemm"]


# ------------------------------------------------------------------------------ a whole sweep


def test_a_sweep_of_the_demo_fleet_finishes_in_seconds() -> None:
    fleet = load_fleet(demo_fleet_path())
    started = time.monotonic()
    result = probe_hosts(fleet.host_specs(), SweepOptions(ProbeOptions()), SimulatedConnector(fleet), locate_bundle(),
                       QuietProgress())
    assert time.monotonic() - started < 20.0
    statuses = {host.host: host.status for host in result.hosts}
    assert len(statuses) == 64
    assert statuses.pop("node050") == "unreachable" and statuses.pop("node051") == "timeout"
    assert set(statuses.values()) == {"ok"}
    ok = next(host for host in result.hosts if host.host == "node017")
    assert ok.facts["gpu_count"] == GPUS and ok.facts["driver"] == "550.54.15"
    assert sum(1 for r in ok.results if r.probe == "gemm") == GPUS
    assert result.exit_code == ExitCode.UNCHECKED
    json.dumps(result.to_dict())
