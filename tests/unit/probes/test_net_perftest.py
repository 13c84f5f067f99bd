"""ib_write_bw's report parsed from the real captures in tests/data/perftest/ (see the fixtures
README), the ib_write_bw command lines the perftest backend runs, and a rail's figure from its
runs of one QP each, with the messages that carry their ports and results."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.net import perftest, perftest_messages
from probes.topology import Rail

DATA = Path(__file__).resolve().parents[2] / "data" / "perftest"
WRITE_HOST_SWEEP = DATA / "ib_write_bw-client-host-roce-sweep-report_gbits.txt"
READ_HOST_SWEEP = DATA / "ib_read_bw-client-host-roce-sweep-report_gbits.txt"
WRITE_GDR_SWEEP = DATA / "ib_write_bw-client-gdr-h100-roce-8qp-sweep-report_gbits.txt"
WRITE_ONE_SIZE = DATA / "ib_write_bw-client-roce-4qp-report_gbits-100g.txt"

# capture -> (title, HCA, QPs, rows, largest size, iterations, peak, average) of the largest size
EXPECTED = {
    WRITE_HOST_SWEEP: ("RDMA_Write BW Test", "mlx5_2", 1, 23, 8388608, 5000, 224.14, 224.14),
    READ_HOST_SWEEP: ("RDMA_Read BW Test", "mlx5_2", 1, 23, 8388608, 1000, 221.33, 221.33),
    WRITE_GDR_SWEEP: ("RDMA_Write BW Test", "mlx5_2", 8, 23, 8388608, 40000, 210.74, 210.74),
    WRITE_ONE_SIZE: ("RDMA_Write BW Test", "mlx5_5", 4, 1, 65536, 20000, 98.01, 98.01),
}


def test_every_capture_is_covered():
    assert set(DATA.glob("*.txt")) == set(EXPECTED)


@pytest.mark.parametrize("capture", sorted(EXPECTED), ids=lambda path: path.name)
def test_largest_message_size_and_link_info_of_each_capture(capture: Path):
    title, hca, qps, rows, size, iterations, peak, average = EXPECTED[capture]
    report = perftest.parse_perftest(capture.read_text())
    assert report.title == title
    assert report.unit == "Gb/sec"
    assert len(report.rows) == rows
    summary = report.summary()
    assert summary["message_bytes"] == size
    assert summary["iterations"] == iterations
    assert summary["peak_gbps"] == pytest.approx(peak)
    assert summary["average_gbps"] == pytest.approx(average)
    assert (summary["device"], summary["qps"]) == (hca, qps)
    assert (summary["link_type"], summary["mtu_bytes"], summary["transport"], summary["connection"]) == \
        ("Ethernet", 4096, "IB", "RC")


def test_sweep_rows_keep_their_own_peak_and_average():
    report = perftest.parse_perftest(WRITE_HOST_SWEEP.read_text())
    first, dip = report.rows[0], next(row for row in report.rows if row.message_bytes == 16384)
    assert (first.message_bytes, first.peak, first.average) == (2, 0.032967, 0.032099)
    assert first.message_rate_mpps == 2.006171
    # mid-sweep the average falls far below the peak; only the largest size is the figure
    assert (dip.peak, dip.average) == (125.02, 44.97)


def test_gpudirect_capture_names_its_cuda_device_and_dmabuf():
    report = perftest.parse_perftest(WRITE_GDR_SWEEP.read_text())
    assert report.cuda_device == 1
    assert report.gpu_name == "NVIDIA H100 80GB HBM3"
    assert report.dmabuf is True
    host = perftest.parse_perftest(WRITE_HOST_SWEEP.read_text())
    assert (host.cuda_device, host.gpu_name, host.dmabuf) == (None, None, False)


def test_header_settings_split_on_tabs_even_where_a_key_is_followed_by_one():
    settings = perftest.parse_perftest(READ_HOST_SWEEP.read_text()).settings
    assert settings["rdma_cm QPs"] == "ON"
    assert settings["Data ex. method"] == "rdma_cm"
    assert settings["TOS"] == "41"
    assert settings["Outstand reads"] == "16"
    assert settings["GID index"] == "3"


def test_output_without_a_table_or_in_megabytes_is_refused():
    with pytest.raises(perftest.PerftestOutputError, match="no result table"):
        perftest.parse_perftest(" Couldn't connect to 10.0.0.2:18515\nUnable to init the socket connection")
    megabytes = WRITE_ONE_SIZE.read_text().replace("[Gb/sec]", "[MB/sec]")
    report = perftest.parse_perftest(megabytes)
    with pytest.raises(perftest.PerftestOutputError, match="report_gbits"):
        report.summary()


def test_duration_mode_zero_peak_is_no_peak():
    text = WRITE_ONE_SIZE.read_text().replace("98.01              98.01", "0.00              98.01")
    summary = perftest.parse_perftest(text).summary()
    assert summary["peak_gbps"] is None and summary["average_gbps"] == 98.01


def test_server_and_client_commands():
    rail = Rail(3, 3, "mlx5_3", 1, "PIX", 400.0, "InfiniBand")
    server = perftest.ib_write_bw_command("/usr/bin/ib_write_bw", rail, tcp_port=40123, qps=4, duration_s=2.4,
                                          message_bytes=1 << 20, gid_index=None, cuda_gpu=None)
    assert server == ["/usr/bin/ib_write_bw", "-d", "mlx5_3", "-i", "1", "-p", "40123", "-q", "4", "-s", "1048576",
                      "-D", "2", "-F", "--report_gbits"]
    client = perftest.ib_write_bw_command("ib_write_bw", rail, tcp_port=40123, qps=8, duration_s=0.3,
                                          message_bytes=65536, gid_index=3, cuda_gpu=3, server="10.0.0.2")
    assert client[-4:] == ["-x", "3", "--use_cuda=3", "10.0.0.2"]
    assert client[client.index("-D") + 1] == "1"  # whole seconds, at least one


def test_gpudirect_module_and_listening_ports(tmp_path: Path):
    assert not perftest.gpudirect_loaded(tmp_path)
    (tmp_path / "module" / "nvidia_peermem").mkdir(parents=True)
    assert perftest.gpudirect_loaded(tmp_path)
    net = tmp_path / "net"
    net.mkdir()
    (net / "tcp").write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 00000000:9C9B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"
        "   1: 0100007F:A1B2 0100007F:9C9B 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n")
    (net / "tcp6").write_text(
        "  sl  local_address                         remote_address                        st\n"
        "   0: 00000000000000000000000000000000:0050 00000000000000000000000000000000:0000 0A 0 0 0 0 0 0 0 3 1\n")
    assert perftest.listening_ports(net) == {0x9C9B, 0x50}


def test_a_missing_ib_write_bw_is_no_tool(tmp_path: Path):
    assert perftest.find_tool(str(tmp_path / "no-such-ib_write_bw")) is None


# --- one ib_write_bw per QP: the rail's figure from its runs, and the messages that carry them ---------

def _run(average: float, peak: float | None = None, **extra: object) -> dict:
    return {"average_gbps": average, "peak_gbps": peak, "message_bytes": 1 << 20, "iterations": 1000, "qps": 1,
            "link_type": "Ethernet", "device": "mlx5_0", **extra}


def test_a_rails_figure_is_the_sum_of_its_runs_each_kept_in_run_order():
    combined = perftest.combine_runs([_run(97.5, 98.0), _run(88.25, 90.0), _run(99.0, 99.5)])
    assert combined["average_gbps"] == 284.75 and combined["peak_gbps"] == 287.5
    assert combined["stream_gbps"] == [97.5, 88.25, 99.0]
    assert (combined["qps"], combined["iterations"], combined["device"]) == (3, 3000, "mlx5_0")
    assert "exit_status" not in combined
    one = perftest.combine_runs([_run(391.5)])
    assert (one["average_gbps"], one["peak_gbps"], one["stream_gbps"], one["qps"]) == (391.5, None, [391.5], 1)


def test_a_failed_run_fails_its_rail_and_a_nonzero_exit_is_kept():
    failed = perftest.combine_runs([_run(97.5), {"error": "ib_write_bw exited 1 without a report"}])
    assert failed == {"error": "QP run 2 of 2: ib_write_bw exited 1 without a report"}
    assert perftest.combine_runs([{"error": "no report"}]) == {"error": "no report"}
    assert perftest.combine_runs([_run(1.0), _run(2.0, exit_status=3)])["exit_status"] == 3


def test_the_ports_of_a_rail_are_a_list_of_distinct_ports_one_per_run():
    assert perftest_messages.rail_ports({"ports": {"0": [40001, 40002], "3": [40003, 40004]}}, 2) == {
        "0": [40001, 40002], "3": [40003, 40004]}
    for bad in ({"0": 40001}, {"0": [40001]}, {"0": [40001, 40001]}, {"0": [40001, True]}, {"0": [40001, 0]},
                {"0": [40001, "40002"]}, {"64": [40001, 40002]}, {"-1": [40001, 40002]}, [40001, 40002]):
        with pytest.raises(perftest.ProtocolError):
            perftest_messages.rail_ports({"ports": bad}, 2)


def test_the_results_of_a_rail_are_one_checked_result_per_run():
    ports = {"0": [40001, 40002]}
    results = perftest_messages.rail_results({"results": {"0": [_run(1.0), {"error": "x"}], "5": "ignored"}},
                                             ports, 2)
    assert list(results) == [0] and results[0][1] == {"error": "x"}
    assert results[0][0]["average_gbps"] == 1.0 and "stream_gbps" not in results[0][0]
    for bad in ({"0": _run(1.0)}, {"0": [_run(1.0)]}, {"0": [_run(1.0), _run(float("nan"))]},
                {"0": [_run(1.0), {"average_gbps": "fast"}]}):
        with pytest.raises(perftest.ProtocolError):
            perftest_messages.rail_results({"results": bad}, ports, 2)
    # a peer cannot slip its own per-run figures in beside a run's summary
    assert "stream_gbps" not in perftest_messages.checked_result({**_run(1.0), "stream_gbps": [500.0]})


def test_free_ports_are_distinct():
    ports = perftest.free_ports(64)
    assert len(set(ports)) == 64 and all(0 < port < 65536 for port in ports)
