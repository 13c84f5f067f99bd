"""ib_write_bw's report parsed from the real captures in tests/data/perftest/ (see the fixtures
README), and the ib_write_bw command lines the perftest backend runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.net import perftest
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
