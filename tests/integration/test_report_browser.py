"""The HTML report of a simulated sweep with planted faults, in a real headless browser (Debian's
chromium, driven by selenium through Debian's chromedriver; nothing is downloaded).

The sweep is ``gpudiag sweep --simulate`` of 12 nodes: a slow GPU, a throttled GPU, a GPU whose
PCIe trained at x8, a GPU with an NVLink down, a slow NIC and an unreachable node. The rendered DOM
must show every planted fault's cell in the fault colour, every finding, the device grid one link
away from the first screen, evidence one click away, healthy hosts' link rows not red, and at 390 px
(a phone) no horizontal overflow of the page and no finding cell cut off. At 390 and 1,400 px, for
the person on call: every finding's action detail shown without a click, no finding in a scroll box
of its own (each reached by scrolling the page), and the device grid's worst and findings columns on
screen (at 390 px before the devices, which may scroll sideways). Screenshots at 1,400 and 390 px
and the report are saved into $GPUDIAG_TEST_ARTIFACTS when set, else the test's tmp_path; the test
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
WIDE, PHONE = (1400, 800), (390, 844)
# The sweep's findings this many times over: a list longer than a screen at either width.
LONG_COPIES = 4
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
# Every ancestor of the findings table that scrolls its own content vertically (a box of its own,
# taller inside than out); the page's own scroll (document.scrollingElement) is not one.
INNER_SCROLLERS_SCRIPT = """
const found = [];
for (let node = document.getElementById('findings-table').parentElement; node && node !== document.scrollingElement;
     node = node.parentElement) {
  const overflow = getComputedStyle(node).overflowY;
  if ((overflow === 'auto' || overflow === 'scroll') && node.clientHeight < node.scrollHeight) {
    found.push(`${node.tagName}#${node.id}.${node.className} ${node.clientHeight} < ${node.scrollHeight}`);
  }
}
return found;
"""
# The last finding's row after the page (window.scrollTo) scrolls it to the middle of the viewport:
# its box, and whether the element at its centre is the row's own (nothing clips or covers it).
LAST_FINDING_SCRIPT = """
const rows = document.querySelectorAll('#findings-table tbody tr');
const last = rows[rows.length - 1];
window.scrollTo(0, last.getBoundingClientRect().top + window.scrollY - window.innerHeight / 2);
const box = last.getBoundingClientRect();
const hit = document.elementFromPoint((box.left + box.right) / 2, (box.top + box.bottom) / 2);
return {top: box.top, bottom: box.bottom, height: window.innerHeight, hit: last.contains(hit)};
"""
# The device grid's first row: the right edge of its worst and findings cells and the left edge of
# its first device cell (GPU 0), and the viewport's width.
GRID_EDGES_SCRIPT = """
const table = document.getElementById('gpu-heatmap');
const row = table.tBodies[0].rows[0];
const box = selector => row.querySelector(selector).getBoundingClientRect();
return {worst: box('td.worst').right, worst_left: box('td.worst').left, findings: box('td.kinds').right,
        first_device: row.cells[1].getBoundingClientRect().left, width: window.innerWidth};
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
def long_report(sweep: dict[str, Any], artifacts: Path) -> tuple[Path, list[dict[str, Any]]]:
    """A report of a long findings list, taller than any box a page would scroll them in: the sweep's
    findings LONG_COPIES times over, each copy's evidence its own (so none fold into another); and
    those findings."""
    findings = [{**finding, "evidence": f"{finding.get('evidence') or ''} (copy {copy})"}
                for copy in range(LONG_COPIES) for finding in sweep["findings"]]
    path = artifacts / "report-long.html"
    write_report(render_report({**sweep, "findings": findings}, "html"), path)
    return path, findings


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


def test_on_a_wide_screen_a_row_holds_its_action_detail_and_the_evidence_is_one_click_away(browser: Any,
                                                                                           report: Path):
    view(browser, report, WIDE)
    layout = browser.execute_script("""
        const rows = [...document.querySelectorAll('#findings-table tbody tr')];
        return {tallest_row: Math.max(...rows.map(r => r.getBoundingClientRect().height)),
                evidence_width: document.querySelector('#findings-table td.evidence').getBoundingClientRect().width};
    """)
    # A row holds its action detail (a few lines) and the evidence's one-line summary.
    assert layout["tallest_row"] < 160 and layout["evidence_width"] >= 250, layout
    details = browser.find_element("css selector", "#findings-table td.evidence details")
    assert not details.get_attribute("open")
    evidence = details.find_element("css selector", "dl")
    assert not evidence.is_displayed()
    details.find_element("css selector", "summary").click()
    assert details.get_attribute("open") is not None and evidence.is_displayed()
    # The details hold the evidence; the action detail is shown above them, not folded in.
    assert "evidence" in evidence.text and "action detail" not in evidence.text


@pytest.mark.parametrize(("size", "phone"), [(PHONE, True), (WIDE, False)], ids=["390px", "1400px"])
def test_what_to_do_is_shown_every_finding_is_in_the_page_scroll_and_the_grid_leads_with_worst_and_findings(
        browser: Any, long_report: tuple[Path, list[dict[str, Any]]], size: tuple[int, int], phone: bool):
    report, findings = long_report
    view(browser, report, size, phone=phone)
    # Every finding's action detail (what to do, the command) is on the page without a click.
    shown = browser.find_elements("css selector", "#findings-table tbody tr p.action-detail")
    expected = sorted(f["action_detail"] for f in findings if f.get("action_detail"))
    assert len(expected) == len(findings) and sorted(p.text for p in shown) == expected
    assert all(paragraph.is_displayed() for paragraph in shown)
    boxes = browser.execute_script("""return arguments[0].map(p => {const box = p.getBoundingClientRect();
        return [box.width, box.height, p.closest('details:not([open])') === null];});""", shown)
    assert all(width > 0 and height > 0 and outside for width, height, outside in boxes), boxes
    # No box of its own scrolls the findings: the page's scroll reaches the last of them.
    assert browser.execute_script(INNER_SCROLLERS_SCRIPT) == []
    last = browser.execute_script(LAST_FINDING_SCRIPT)
    assert 0 <= last["top"] and last["bottom"] <= last["height"] and last["hit"], last
    # The grid's worst and findings columns are on screen; on a phone they come before the devices.
    edges = browser.execute_script(GRID_EDGES_SCRIPT)
    assert edges["worst"] <= edges["width"] and edges["findings"] <= edges["width"], edges
    if phone:
        assert edges["findings"] <= edges["first_device"] and edges["worst_left"] >= 0, edges
    # However long the list, the contents under the title lead to the grid from the first screen.
    browser.execute_script("window.scrollTo(0, 0);")
    link = browser.find_element("css selector", '#contents a[href="#heatmap"]')
    assert link.is_displayed() and link.rect["y"] + link.rect["height"] <= size[1], link.rect
    link.click()
    grid_top = browser.execute_script("return document.getElementById('heatmap').getBoundingClientRect().top;")
    assert abs(grid_top) < 20, grid_top


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
