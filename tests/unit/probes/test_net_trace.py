"""Tracing each tcp stream's path: the error-queue entries a router's ICMP answer leaves (struct
sock_extended_err and the offender's sockaddr, as the kernel lays them out), the --trace-hops
option, and the order of the per-stream figures the hops are listed beside."""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections import Counter

import pytest

from probes.context import Deadline
from probes.net import main as net_main
from probes.net import tcp as net_tcp
from probes.net import trace
from probes.net.common import MAX_TRACE_HOPS


def _extended_err(code: int, origin: int, kind: int, icmp_code: int = 0) -> bytes:
    return struct.pack("=IBBBBII", code, origin, kind, icmp_code, 0, 0, 0)


def _sockaddr_in(address: str) -> bytes:
    return struct.pack("=H", socket.AF_INET) + struct.pack("!H", 0) + ipaddress.IPv4Address(address).packed + bytes(8)


def _sockaddr_in6(address: str) -> bytes:
    return (struct.pack("=H", socket.AF_INET6) + struct.pack("!HI", 0, 0) + ipaddress.IPv6Address(address).packed
            + struct.pack("=I", 0))


def test_an_ipv4_time_exceeded_names_the_router():
    report = trace.parse_extended_error(_extended_err(113, 2, 11) + _sockaddr_in("10.77.2.2"))
    assert report == trace.IcmpReport(errno=113, origin=2, icmp_type=11, icmp_code=0, offender="10.77.2.2")
    assert report.time_exceeded


def test_an_ipv6_time_exceeded_names_the_router_and_a_mapped_address_reads_as_ipv4():
    report = trace.parse_extended_error(_extended_err(113, 3, 3) + _sockaddr_in6("fd01:2::2"))
    assert report is not None and report.time_exceeded and report.offender == "fd01:2::2"
    mapped = trace.parse_extended_error(_extended_err(113, 3, 3) + _sockaddr_in6("::ffff:10.0.0.9"))
    assert mapped is not None and mapped.offender == "10.0.0.9"


@pytest.mark.parametrize(("origin", "kind"), [
    (2, 3),  # ICMP destination unreachable: a router with no route, not a hop's answer
    (3, 1),  # ICMPv6 destination unreachable
    (3, 11),  # type 11 means time exceeded only in ICMP, not ICMPv6
    (1, 11),  # a local error (SO_EE_ORIGIN_LOCAL)
])
def test_other_errors_are_no_time_exceeded(origin: int, kind: int):
    report = trace.parse_extended_error(_extended_err(113, origin, kind) + _sockaddr_in("10.0.0.1"))
    assert report is not None and not report.time_exceeded


def test_no_offender_or_a_short_entry():
    unspec = trace.parse_extended_error(_extended_err(110, 2, 11) + bytes(16))  # AF_UNSPEC
    assert unspec is not None and unspec.offender is None
    assert trace.parse_extended_error(_extended_err(110, 2, 11)) == trace.IcmpReport(110, 2, 11, 0, None)
    assert trace.parse_extended_error(b"\x00" * 15) is None
    assert trace.offender_address(_sockaddr_in("10.0.0.1")[:6]) is None  # cut off
    assert trace.offender_address(struct.pack("=H", socket.AF_UNIX) + bytes(30)) is None


def test_streams_without_a_source_port_get_no_hops_and_no_probe():
    hops = trace.trace_streams([None, None], ("127.0.0.1", 9), socket.AF_INET, 3, Deadline.after(5))
    assert hops == [[None, None, None], [None, None, None]]


def _client(*extra: str):
    return net_main.parse_arguments(["net-client", "--backend", "tcp", "--connect", "10.0.0.2:4000", *extra])[1]


def test_trace_hops_option():
    assert _client().trace_hops == 0
    assert _client("--trace-hops", "3").trace_hops == 3
    assert _client("--trace-hops", str(MAX_TRACE_HOPS)).trace_hops == MAX_TRACE_HOPS


@pytest.mark.parametrize("argv", [
    ["--backend", "tcp", "--trace-hops", "-1"],
    ["--backend", "tcp", "--trace-hops", str(MAX_TRACE_HOPS + 1)],
    ["--backend", "tcp", "--trace-hops", "two"],
    ["--backend", "perftest", "--trace-hops", "2"],  # only tcp streams are traced
    ["--backend", "nccl", "--trace-hops", "2"],
])
def test_bad_trace_hops_exit_2(argv: list[str], capsys):
    with pytest.raises(SystemExit) as exited:
        net_main.parse_arguments(["net-client", "--connect", "10.0.0.2:4000", *argv])
    assert exited.value.code == 2 and "--trace-hops" in capsys.readouterr().err


def test_the_server_waits_for_the_data_connections_as_long_as_tracing_may_take():
    assert net_tcp.trace_time_s(0) == 0.0
    assert net_tcp.trace_time_s(4) == pytest.approx(4 * trace.TRACE_WAIT_S + 1.0)


def test_per_stream_figures_keep_the_streams_order():
    # stream i moved (i + 1) * 100 MB in one second: its figure is the (i + 1)-th, whatever the sizes
    counts = [net_tcp.StreamCount(0.0, 0.1, (index + 1) * 100_000_000, 0.05, 1.05, Counter({5: 1}))
              for index in (2, 0, 1)]
    assert net_tcp.summarize(counts)["stream_gbps"] == [2.4, 0.8, 1.6]
