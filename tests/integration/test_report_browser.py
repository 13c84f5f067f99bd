"""The HTML report of a simulated sweep with planted faults, in a real headless browser (Debian's
chromium, driven by selenium through Debian's chromedriver; nothing is downloaded).

The sweep is ``gpudiag sweep --simulate`` of 12 nodes: a slow GPU, a throttled GPU, a GPU whose
PCIe trained at x8, a GPU with an NVLink down, a slow NIC and an unreachable node. The rendered DOM
must show every planted fault's cell in the fault colour, every finding, the device grid within
the first screen, evidence one click away, healthy hosts' link rows not red, and at 390 px (a phone)
no horizontal overflow of the page and no finding cell cut off. Screenshots at 1,400 and 390 px and
the report are saved into $GPUDIAG_TEST_ARTIFACTS when set, else the test's tmp_path; the test
prints where.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpudiag.report import render_report, write_report
from gpudiag.report.heatmap import FAULT_COLOUR

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from headless import missing_browser, start_browser  # noqa: E402

# Where no headless Chromium can start (chromium, Debian's chromium-driver or selenium missing), why.
MISSING_BROWSER = missing_browser()
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(MISSING_BROWSER is not None, reason=f"no headless Chromium: {MISSING_BROWSER}")]

SWEEP_TIMEOUT_S = 120
WIDE, PHONE = (1400, 1000), (390, 844)
MODEL = "NVIDIA H100 80GB HBM3"
# (kind, host, GPU) of every planted fault that names a GPU: its grid cell takes the fault colour.
GPU_FAULTS = [("slow_gpu", "node03", 3), ("throttled", "node05", 0), ("degraded_pcie", "node07", 5),
              ("nvlink_down", "node09", 2)]
SLOW_NIC_HOST, UNREACHABLE_HOST = "node11", "node12"
FLEET = {"nodes": 12, "name_format": "node{:02d}", "gpus_per_node": 8, "gpu_model": MODEL, "seed": 7,
         "noise": {"gemm_cv": 0.01, "membw_cv": 0.01, "link_cv": 0.02},
         "faults": [{"kind": "slow_gpu", "host": "node03", "gpu": 3, "factor": 0.85},
                    {"kind": "throttled", "host": "node05", "gpu": 0, "reason": "hw_thermal", "factor": 0.7},
                    {"kind": "degraded_pcie", "host": "node07", "gpu": 5, "width": 8},
                    {"kind": "nvlink_down", "host": "node09", "gpu": 2, "link": 4},
                    {"kind": "slow_nic", "host": SLOW_NIC_HOST, "factor": 0.6},
                    {"kind": "unreachable", "host": UNREACHABLE_HOST}]}

# The grid as the browser lays it out: each row's host, the host cell's colour, and per column
# header its cell's text and computed background colour.
GRID_SCRIPT = """
const table = document.getElementById('gpu-heatmap');
const headers = [...table.tHead.rows[0].cells].map(c => c.textContent.trim());
return [...table.tBodies[0].rows].map(row => ({
  host: row.cells[0].textContent.trim(), host_colour: getComputedStyle(row.cells[0]).backgroundColor,
  cells: Object.fromEntries([...row.cells].slice(1).map((c, i) => [headers[i + 1],
         {text: c.textContent.trim(), colour: getComputedStyle(c).backgroundColor}]))}));
"""
# Every findings cell outside the viewport's width, or laid out with no width (a dropped column).
CUT_OFF_SCRIPT = """
const width = document.documentElement.clientWidth;
return [...document.querySelectorAll('#findings-table td')].filter(td => {
  const box = td.getBoundingClientRect();
  return box.width === 0 || box.left < 0 || box.right > width + 0.5;
}).map(td => td.dataset.label + ': ' + td.textContent.slice(0, 40));
"""


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """$GPUDIAG_TEST_ARTIFACTS (created) or a fresh temporary folder."""
    folder = os.environ.get("GPUDIAG_TEST_ARTIFACTS")
    path = Path(folder) if folder else tmp_path_factory.mktemp("report-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The sweep document of the simulated fleet, as ``gpudiag sweep --simulate`` writes it."""
    folder = tmp_path_factory.mktemp("sweep")
    (folder / "fleet.json").write_text(json.dumps(FLEET))
    command = [sys.executable, "-m", "gpudiag", "sweep", "--simulate", str(folder / "fleet.json"), "-q",
               "--store", str(folder / "gpudiag.db"), "--json", str(folder / "sweep.json"), "--links", "full"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=SWEEP_TIMEOUT_S, check=False)
    assert done.returncode == 1, done.stderr[-2000:]  # fail findings
    return json.loads((folder / "sweep.json").read_text())


@pytest.fixture(scope="module")
def report(sweep: dict[str, Any], artifacts: Path) -> Path:
    path = artifacts / "report.html"
    write_report(render_report(sweep, "html"), path)
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = start_browser(WIDE)
    try:
        yield driver
    finally:
        driver.quit()


def view(driver: Any, report: Path, size: tuple[int, int], *, phone: bool = False) -> None:
    """Load ``report`` with a viewport of ``size`` CSS pixels (a phone's: mobile, honouring the
    viewport meta tag)."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": phone})
    driver.get(report.as_uri())


def rgb(colour: str) -> str:
    """``rgb(142, 27, 16)`` for ``#8e1b10``: how the browser reports a computed colour."""
    red, green, blue = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgb({red}, {green}, {blue})"


def test_every_planted_fault_shows_in_the_fault_colour_and_every_finding_is_listed(browser: Any, report: Path,
                                                                                    sweep: dict[str, Any],
                                                                                    artifacts: Path):
    view(browser, report, WIDE)
    browser.save_screenshot(str(artifacts / "report-1400.png"))
    print(f"report and screenshots in {artifacts}")
    grid = {row["host"]: row for row in browser.execute_script(GRID_SCRIPT)}
    fault = rgb(FAULT_COLOUR)
    for kind, host, gpu in GPU_FAULTS:
        cell = grid[host]["cells"][f"GPU {gpu}"]
        assert cell["colour"] == fault, (kind, host, gpu, cell)
        assert kind in grid[host]["cells"]["findings"]["text"]
        assert grid[host]["host_colour"] == fault
    # The figures that reveal each fault are named in its cell: a PCIe link at x8 halves H2D.
    assert grid["node07"]["cells"]["GPU 5"]["text"].endswith("H2D")
    assert grid["node09"]["cells"]["GPU 2"]["text"].endswith("P2P")
    assert grid[SLOW_NIC_HOST]["host_colour"] == grid[UNREACHABLE_HOST]["host_colour"] == fault
    assert grid[UNREACHABLE_HOST]["cells"]["GPU 0"]["text"].startswith("unreachable")
    healthy = [row for host, row in grid.items() if host not in {h for _, h, _ in GPU_FAULTS}
               and host not in (SLOW_NIC_HOST, UNREACHABLE_HOST)]
    assert len(healthy) == 6
    for row in healthy:
        assert row["host_colour"] != fault and all(cell["colour"] != fault for cell in row["cells"].values()), row
    # Every finding of the document has its row: kind and where.
    rows = browser.execute_script("""return [...document.querySelectorAll('#findings-table tbody tr')].map(
        r => [r.cells[2].textContent.trim(), r.cells[3].firstChild.textContent.trim()]);""")
    expected = sorted((f["kind"], f["host"] if f.get("gpu") is None else f"{f['host']}:{f['gpu']}")
                      for f in sweep["findings"])
    assert sorted(map(tuple, rows)) == expected
    assert {kind for kind, _ in rows} >= {"slow_gpu", "throttled", "degraded_pcie", "nvlink_down", "slow_nic",
                                          "unchecked"}


def test_on_a_wide_screen_findings_are_compact_the_grid_is_on_the_first_screen_evidence_one_click_away(
        browser: Any, report: Path, sweep: dict[str, Any], tmp_path: Path):
    # With eight times the findings, the findings scroll in their box and the grid still shows.
    many = tmp_path / "many-findings.html"
    write_report(render_report({**sweep, "findings": sweep["findings"] * 8}, "html"), many)
    view(browser, many, WIDE)
    top = browser.execute_script("return document.getElementById('gpu-heatmap').getBoundingClientRect().top;")
    assert top < 0.85 * WIDE[1], top
    view(browser, report, WIDE)
    layout = browser.execute_script("""
        const rows = [...document.querySelectorAll('#findings-table tbody tr')];
        return {grid_top: document.getElementById('gpu-heatmap').getBoundingClientRect().top + scrollY,
                height: innerHeight, tallest_row: Math.max(...rows.map(r => r.getBoundingClientRect().height)),
                evidence_width: document.querySelector('#findings-table td.evidence').getBoundingClientRect().width};
    """)
    assert layout["grid_top"] < layout["height"], layout
    assert layout["tallest_row"] < 80 and layout["evidence_width"] >= 250, layout
    details = browser.find_element("css selector", "#findings-table td.evidence details")
    assert not details.get_attribute("open")
    evidence = details.find_element("css selector", "dl")
    assert not evidence.is_displayed()
    details.find_element("css selector", "summary").click()
    assert details.get_attribute("open") is not None and evidence.is_displayed()
    assert "evidence" in evidence.text and "action detail" in evidence.text


def test_a_healthy_host_does_not_read_slow_in_the_link_map_because_of_the_slow_nic(browser: Any, report: Path):
    view(browser, report, WIDE)
    rows = browser.execute_script("""return [...document.querySelectorAll('#link-hosts tbody tr')].map(
        r => [r.cells[0].textContent.trim(), r.cells[1].textContent.trim(), r.cells[5].textContent.trim()]);""")
    assert rows[0][:2] == [SLOW_NIC_HOST, "slow_nic fail"]
    others = [(host, float(share.rstrip(" %"))) for host, finding, share in rows if not finding]
    assert len(others) == 10 and min(share for _, share in others) > 90.0, others


def test_on_a_phone_the_page_does_not_overflow_and_no_finding_cell_is_cut_off(browser: Any, report: Path,
                                                                               artifacts: Path):
    view(browser, report, PHONE, phone=True)
    browser.save_screenshot(str(artifacts / "report-390.png"))
    widths = browser.execute_script(
        "return [document.documentElement.scrollWidth, window.innerWidth, document.documentElement.clientWidth];")
    assert widths[1] == PHONE[0]
    assert widths[0] <= widths[1], f"the page is {widths[0]} px wide in a {widths[1]} px window"
    assert browser.execute_script(CUT_OFF_SCRIPT) == []
    impact = browser.execute_script("""const box = document.getElementById('impact');
        return [box.scrollWidth, box.clientWidth, box.getBoundingClientRect().right];""")
    assert impact[0] <= impact[1] and impact[2] <= PHONE[0], impact
    assert (artifacts / "report-390.png").stat().st_size > 10_000
