"""The pair probes' pure parts: --backend auto, the command line, the record shape, the NCCL
environment of a rail, and the tcp receiver's arithmetic."""

from __future__ import annotations

from collections import Counter

import pytest

from probes.net import auth as net_auth
from probes.net import common as net
from probes.net import main as net_main
from probes.net import nccl as net_nccl
from probes.net import tcp as net_tcp
from probes.net.common import LinkParams, NetCapabilities
from probes.topology import Rail


@pytest.mark.parametrize(("capabilities", "backend"), [
    (NetCapabilities("/usr/bin/ib_write_bw", ("mlx5_0",), 8, True), "perftest"),
    (NetCapabilities("/usr/bin/ib_write_bw", ("mlx5_0",), 0, False), "perftest"),
    (NetCapabilities(None, ("mlx5_0",), 8, True), "nccl"),
    (NetCapabilities("/usr/bin/ib_write_bw", (), 8, True), "nccl"),
    (NetCapabilities(None, (), 8, False), "tcp"),  # CUDA without NCCL
    (NetCapabilities(None, ("mlx5_0",), 0, True), "tcp"),  # NCCL without a GPU
    (NetCapabilities(None, (), 0, False), "tcp"),
])
def test_auto_backend(capabilities: NetCapabilities, backend: str):
    chosen, why = net.choose_backend(capabilities)
    assert chosen == backend
    assert why


@pytest.mark.parametrize(("capabilities", "backend"), [
    (NetCapabilities("/usr/bin/ib_write_bw", ("mlx5_0",), 8, True), "perftest"),
    (NetCapabilities(None, ("mlx5_0",), 8, True), "tcp"),
    (NetCapabilities("/usr/bin/ib_write_bw", (), 8, True), "tcp"),
])
def test_auto_never_picks_nccl_in_host_memory(capabilities: NetCapabilities, backend: str):
    assert net.choose_backend(capabilities, host_memory=True)[0] == backend


def test_host_memory_turns_gpudirect_off_and_refuses_nccl(capsys):
    _, server = net_main.parse_arguments(["net-server", "--backend", "auto", "--host-memory"])
    assert server.host_memory and not server.gpu_direct
    _, client = net_main.parse_arguments(["net-client", "--backend", "perftest", "--connect", "node2:1",
                                          "--host-memory"])
    assert client.host_memory and not client.gpu_direct
    with pytest.raises(SystemExit) as exited:
        net_main.parse_arguments(["net-server", "--backend", "nccl", "--host-memory"])
    assert exited.value.code == 2 and "nccl moves GPU memory" in capsys.readouterr().err


def test_server_and_client_command_lines():
    command, server = net_main.parse_arguments(["net-server", "--backend", "nccl", "--deadline", "30",
                                                "--bind", "10.0.0.1"])
    assert command == "net-server"
    assert (server.role, server.backend, server.deadline_s, server.bind) == ("server", "nccl", 30.0, "10.0.0.1")
    command, client = net_main.parse_arguments(["net-client", "--backend", "tcp", "--connect", "[fd00::2]:40123",
                                           "--duration", "0.5", "--streams", "8", "--direction", "server_to_client",
                                           "--rails", "3,0", "--hcas", "mlx5_0,mlx5_3"])
    assert (client.host, client.port, client.peer) == ("fd00::2", 40123, "[fd00::2]:40123")
    assert (client.duration_s, client.streams, client.directions) == (0.5, 8, ("server_to_client",))
    assert (client.rails, client.hcas) == ((0, 3), ("mlx5_0", "mlx5_3"))
    _, both = net_main.parse_arguments(["net-client", "--backend", "perftest", "--connect", "node002:1234"])
    assert both.directions == ("client_to_server", "server_to_client") and both.rails is None


@pytest.mark.parametrize("argv", [
    ["net-client", "--backend", "tcp", "--connect", "node002"],  # no port
    ["net-client", "--backend", "auto", "--connect", "node002:1"],  # the client names the server's backend
    ["net-client", "--backend", "tcp", "--connect", "node002:1", "--streams", "0"],
    ["net-client", "--backend", "perftest", "--connect", "node002:1", "--streams", "33"],  # one ib_write_bw per QP
    ["net-client", "--backend", "tcp", "--connect", "node002:1", "--rails", "one"],
    ["net-server", "--deadline", "0"],
    ["net-client", "--backend", "nccl", "--connect", "node002:1", "--message-bytes", "1048576"],  # under 64 MiB
])
def test_bad_command_lines_exit_2(argv: list[str]):
    with pytest.raises(SystemExit) as exited:
        net_main.parse_arguments(argv)
    assert exited.value.code == 2


def test_host_port_forms():
    assert net.split_host_port("10.0.0.2:5") == ("10.0.0.2", 5)
    assert net.split_host_port("[::1]:40000") == ("::1", 40000)
    assert net.join_host_port("::1", 40000) == "[::1]:40000"
    assert net_auth.plain_address("::ffff:10.0.0.2") == "10.0.0.2"
    for bad in ("node:0", "node:70000", ":22", "node:x"):
        with pytest.raises(ValueError):
            net.split_host_port(bad)


def test_record_shape_of_a_measured_and_a_failed_direction():
    params = LinkParams("nccl", "client_to_server", 1, 0.3, rail=3, hca="mlx5_3", extra={"collective": "nccl"})
    ok = net.bandwidth_record(params, 50_000_000_000, 1.0, [399.0, 401.0], {"line_rate_gbps": 400.0},
                              gpu_uuid="GPU-1").to_dict()
    assert (ok["probe"], ok["device"], ok["metric"], ok["unit"], ok["status"]) == (
        "net", "rail:3", "bandwidth", "Gbit/s", "ok")
    assert ok["value"] == 400.0 and ok["samples"] == 2 and ok["cv"] == pytest.approx(0.0025)
    assert ok["params"] == {"backend": "nccl", "direction": "client_to_server", "streams": 1, "duration_s": 0.3,
                            "rail": 3, "hca": "mlx5_3", "collective": "nccl"}
    assert ok["details"]["line_rate_gbps"] == 400.0 and ok["details"]["bytes"] == 50_000_000_000
    failed = net.link_failure(LinkParams("tcp", "server_to_client", 4, 2.0), "connection refused").to_dict()
    assert (failed["device"], failed["status"], failed["value"], failed["reason"]) == (
        "host", "error", None, "connection refused")


def test_rail_environment_pins_the_hca_and_forbids_sockets():
    rail = Rail(3, 3, "mlx5_3", 1, "PIX", 400.0, "InfiniBand")
    env = net_nccl.nccl_environment(rail, collective="nccl", allow_socket=False, interface="ib0", gid_index=None,
                                    inherited={})
    assert env == {"NCCL_NET": "IB", "NCCL_IB_HCA": "=mlx5_3:1", "NCCL_SOCKET_IFNAME": "=ib0",
                   "GLOO_SOCKET_IFNAME": "ib0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    allowed = net_nccl.nccl_environment(rail, collective="nccl", allow_socket=True, interface=None, gid_index=3,
                                        inherited={"CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    assert allowed == {"NCCL_IB_HCA": "=mlx5_3:1", "NCCL_IB_GID_INDEX": "3"}
    gloo = net_nccl.nccl_environment(Rail(0, None, None, None, "cpu", None), collective="gloo", allow_socket=False,
                                     interface="lo", gid_index=None, inherited={"GLOO_SOCKET_IFNAME": "eth0"})
    assert gloo == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}  # the user's own interface choice stands


def _count(origin: float, first: float, last: float, total: int, per_interval: dict[int, int]) -> net_tcp.StreamCount:
    return net_tcp.StreamCount(origin, 0.1, total, first, last, Counter(per_interval))


def test_tcp_reception_is_bytes_over_the_first_to_last_byte():
    counts = [_count(0.0, 0.05, 1.05, 1_250_000_000, {0: 62_500_000, **{i: 125_000_000 for i in range(1, 10)},
                                                       10: 62_500_000}),
              _count(0.0, 0.05, 1.05, 1_250_000_000, {0: 62_500_000, **{i: 125_000_000 for i in range(1, 10)},
                                                       10: 62_500_000})]
    summary = net_tcp.summarize(counts)
    assert summary["bytes"] == 2_500_000_000
    assert summary["elapsed_s"] == pytest.approx(1.0)
    assert net.bits_gbps(summary["bytes"], summary["elapsed_s"]) == pytest.approx(20.0)
    # the partial first and last intervals are left out of the samples
    assert summary["interval_gbps"] == [20.0] * 9
    assert summary["stream_gbps"] == [10.0, 10.0]


def test_tcp_reception_that_failed_or_got_nothing_is_an_error():
    broken = _count(0.0, 0.1, 0.2, 10, {1: 10})
    broken.error = "connection to a data stream reset"
    with pytest.raises(net.ProtocolError, match="reset"):
        net_tcp.summarize([broken])
    with pytest.raises(net.ProtocolError, match="no data"):
        net_tcp.summarize([net_tcp.StreamCount(0.0, 0.1)])


def test_failure_reasons_name_the_cause_and_the_peer():
    assert net.describe_failure(ConnectionRefusedError(111, "Connection refused"), "node2:5") == \
        "connection refused by node2:5 (nothing listening there)"
    assert "timed out" in net.describe_failure(TimeoutError("timed out"), "node2:5")
    assert "reset" in net.describe_failure(ConnectionResetError(104, "Connection reset by peer"), "node2:5")
