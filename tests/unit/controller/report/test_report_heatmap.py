"""The HTML report's device grid: each GPU's (and the host CPU's) worst figure across GEMM, memory
bandwidth, PCIe both ways, P2P and SM clock, against the fleet median of its own key."""

from __future__ import annotations

import re
from typing import Any

from html_tables import HtmlTables

from gpudiag.report import render_report
from gpudiag.report.heatmap import FAULT_STYLE, OTHER_ROWS_SHOWN, heat_colour, html_heatmap

GPU_MODEL, CPU_MODEL = "NVIDIA H100 80GB HBM3", "Intel(R) Xeon(R) Platinum 8480C"
# (probe, metric, unit, params, healthy value) of each GPU figure, as the probes print them.
GPU_RECORDS = [("gemm", "tflops", "TFLOP/s", {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192}, 740.0),
               ("membw", "bandwidth", "GB/s", {"memory": "device", "buffer_mib": 1024}, 2950.0),
               ("pcie", "bandwidth", "GB/s", {"direction": "h2d", "buffer_mib": 256}, 55.0),
               ("pcie", "bandwidth", "GB/s", {"direction": "d2h", "buffer_mib": 256}, 53.0),
               ("smclock", "sm_clock", "MHz", {"threads_per_block": 512}, 1980.0)]
P2P_GBPS = 722.0


def record(probe: str, device: str, metric: str, unit: str, params: dict[str, Any], value: float) -> dict[str, Any]:
    return {"probe": probe, "device": device, "metric": metric, "value": value, "unit": unit, "samples": 20,
            "cv": 0.003, "status": "ok", "reason": None, "params": params, "details": {}}


def gpu_host(name: str, *, h2d: dict[int, float] | None = None, p2p_down: int | None = None,
             gemm: dict[int, float] | None = None) -> dict[str, Any]:
    """An 8-GPU host: every figure at its healthy value but the H2D and GEMM overrides by GPU; a
    compact ``p2p`` matrix (bidirectional, upper triangle) with every pair of ``p2p_down`` at 92 %."""
    results = []
    for gpu in range(8):
        for probe, metric, unit, params, value in GPU_RECORDS:
            if probe == "pcie" and params["direction"] == "h2d":
                value = (h2d or {}).get(gpu, value)
            if probe == "gemm":
                value = (gemm or {}).get(gpu, value)
            results.append(record(probe, f"cuda:{gpu}", metric, unit, params, value + 0.01 * gpu))
    values = [[(P2P_GBPS * (0.92 if p2p_down in (i, j) else 1.0) if j > i else None) for j in range(8)]
              for i in range(8)]
    matrix = {"metric": "bandwidth", "unit": "GB/s", "direction": "bidirectional", "buffer_mib": 256,
              "devices": [f"cuda:{gpu}" for gpu in range(8)], "values": values}
    return {"host": name, "status": "ok", "error": None, "duration_s": 10.0,
            "facts": {"gpu_model": GPU_MODEL, "gpu_count": 8}, "results": results, "p2p": [matrix]}


def cpu_host(name: str, gemm_tflops: float, membw_gbps: float) -> dict[str, Any]:
    """A host with no GPU: the CPU GEMM and host memory bandwidth the probes measure on ``cpu``."""
    results = [record("gemm", "cpu", "tflops", "TFLOP/s", {"dtype": "fp32", "m": 2048, "n": 2048, "k": 2048,
                                                            "mode": "cpu"}, gemm_tflops),
               record("membw", "cpu", "bandwidth", "GB/s", {"memory": "host", "buffer_mib": 256}, membw_gbps)]
    return {"host": name, "status": "ok", "error": None, "duration_s": 10.0,
            "facts": {"cpu_model": CPU_MODEL, "cpu_count": 224, "gpu_count": 0}, "results": results}


def grid(text: str) -> dict[str, list[str]]:
    parser = HtmlTables()
    parser.feed(text)
    table = parser.tables["gpu-heatmap"]
    return {"": table[0][1:], **{row[0]: row[1:] for row in table[1:]}}


def test_a_gpu_whose_pcie_trained_at_x8_is_red_on_h2d_though_its_gemm_is_fine():
    hosts = [gpu_host(f"node{n}") for n in range(1, 6)] + [gpu_host("node6", h2d={5: 27.5})]
    text = html_heatmap({"hosts": hosts, "findings": []})
    rows = grid(text)
    assert rows["node6"][5] == "50 % H2D" and rows["node6"][8] == "50 % H2D"
    assert all(not cell.endswith("H2D") or cell.startswith(("99", "100")) for cell in rows["node1"][:8])
    cell = re.search(r'<td style="background:([^"]*)" title="node6 GPU 5: H2D 27.[56] GB/s \(50.\d %\), ', text)
    assert cell is not None and cell.group(1).startswith("hsl(0,")


def test_a_gpu_with_an_nvlink_down_is_low_on_p2p_and_its_partners_are_not():
    hosts = [gpu_host(f"node{n}") for n in range(1, 6)] + [gpu_host("node6", p2p_down=2)]
    rows = grid(html_heatmap({"hosts": hosts, "findings": []}))
    assert rows["node6"][2] == "92 % P2P"
    # GPU 2's partners are slow with it alone: the median of their seven pairs is the healthy one.
    assert all(not cell.endswith("P2P") or cell == "100 % P2P" for i, cell in enumerate(rows["node6"][:8]) if i != 2)


def test_a_finding_gives_its_gpu_and_host_the_fault_colour_and_names_its_kind():
    hosts = [gpu_host(f"node{n}") for n in range(1, 7)]
    findings = [{"kind": "nvlink_errors", "severity": "warn", "host": "node4", "gpu": 6, "peer": None},
                {"kind": "slow_nic", "severity": "fail", "host": "node2", "gpu": None, "peer": None,
                 "deficit_pct": 40.0}]
    text = html_heatmap({"hosts": hosts, "findings": findings})
    rows = grid(text)
    assert list(rows)[1:3] == ["node2", "node4"]  # named hosts first, most costly first
    assert rows["node4"][9] == "nvlink_errors GPU 6" and rows["node2"][9] == "slow_nic"
    assert re.search(rf'<td class="fault" style="{FAULT_STYLE}" title="node4 GPU 6: [^"]*; finding: nvlink_errors">',
                     text)
    assert f'<th style="{FAULT_STYLE}">node2</th>' in text and "<th>node1</th>" in text


def test_a_cpu_only_sweep_shows_its_host_devices_gemm_and_memory_bandwidth():
    hosts = [cpu_host(f"cpu{n}", 1.80 + 0.01 * n, 20.0) for n in range(1, 4)]
    hosts.append(cpu_host("cpu4", 1.81, 12.0))
    document = {"sweep_id": "cpu", "hosts": hosts, "findings": []}
    text = render_report(document, "html")
    assert "No GEMM" not in text and "No GPU or host device figures" not in text
    rows = grid(text)
    assert rows[""] == ["host", "worst", "findings"]
    assert rows["cpu4"][0] == "60 % mem" and rows["cpu1"][0] == "100 % GEMM"
    assert re.search(r'title="cpu4 host: mem 12.0 GB/s \(60.0 %\), GEMM 1.81 TFLOP/s \(99.7 %\)"', text)
    assert f"{CPU_MODEL}: GEMM 1.8" in text and f"{CPU_MODEL}: mem 20.0 GB/s" in text


def test_figures_of_different_models_or_parameters_are_never_pooled():
    slow_model = [gpu_host(f"a100-{n}", gemm={gpu: 300.0 for gpu in range(8)}) for n in range(1, 4)]
    for host in slow_model:
        host["facts"]["gpu_model"] = "NVIDIA A100-SXM4-80GB"
    hosts = [gpu_host(f"h100-{n}") for n in range(1, 4)] + slow_model
    rows = grid(html_heatmap({"hosts": hosts, "findings": []}))
    # Each model against its own median: the A100s at 300 TFLOP/s are 100 % of theirs, not 41 % of the H100s'.
    assert all(float(cell.split()[0]) >= 99 for host in rows if host for cell in rows[host][:9])
    assert heat_colour(1.0).startswith("hsl(120,")


def test_a_large_fleet_shows_named_hosts_then_the_worst_others_and_folds_the_rest():
    hosts = [gpu_host(f"node{n:03d}", gemm={n % 8: 740.0 - n * 0.05}) for n in range(1, 201)]
    hosts[149] = gpu_host("node150", h2d={4: 40.0})  # 73 %: the worst host no finding names
    findings = [{"kind": "ecc", "severity": "fail", "host": "node007", "gpu": 1, "peer": None}]
    text = html_heatmap({"hosts": hosts, "findings": findings})
    shown = list(grid(text))[1:]
    assert len(shown) == 1 + OTHER_ROWS_SHOWN and shown[:2] == ["node007", "node150"]
    # Then by their worst device, lowest first: GEMM falls 0.05 TFLOP/s a host number.
    assert shown[2:5] == ["node200", "node199", "node198"]
    folded = re.search(r'<p class="legend" id="gpu-folded">(\d+) more hosts folded, none named by a finding; '
                       r"their worst devices ([\d.]+)–([\d.]+) % of the fleet median\.</p>", text)
    assert folded is not None and int(folded.group(1)) == 200 - 1 - OTHER_ROWS_SHOWN
    assert float(folded.group(3)) > float(folded.group(2)) > 96.0
    assert "node[001-006,008-149,151]" in text  # the folded hosts' names, one click away
