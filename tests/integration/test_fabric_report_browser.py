"""The HTML report of a simulated sweep with a slow uplink between a leaf and a spine (a finding of
no host, ``slow_fabric_link``) and a slow NIC, in a real headless browser (Debian's chromium through
selenium and chromedriver, as tests/integration/test_report_browser.py): the uplink's row names its
switches and shows what to do without a click, the device grid has a row per host and none for the
uplink, and at 390 px (a phone) nothing overflows or is cut off."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpudiag.report import render_report, write_report

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from headless import missing_browser, start_browser  # noqa: E402

MISSING_BROWSER = missing_browser()
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(MISSING_BROWSER is not None, reason=f"no headless Chromium: {MISSING_BROWSER}")]

SWEEP_TIMEOUT_S = 120
WIDE, PHONE = (1400, 1000), (390, 844)
FLEET = {"nodes": 64, "seed": 11, "noise": {"link_cv": 0.02}, "fabric": {"leaves": 8, "spines": 4},
         "faults": [{"kind": "slow_uplink", "a": "r2-leaf03", "b": "r2-spine04", "factor": 0.7},
                    {"kind": "slow_nic", "host": "node050", "factor": 0.7}]}
ROWS_SCRIPT = """
return [...document.querySelectorAll('#findings-table tbody tr')].map(r => {
  const detail = r.querySelector('p.action-detail');
  return {classes: r.className, kind: r.cells[2].textContent.trim(), where: r.cells[3].firstChild.textContent.trim(),
          detail: detail ? detail.textContent : null,
          detail_shown: detail ? detail.getBoundingClientRect().height > 0 : false,
          height: r.getBoundingClientRect().height};
});
"""
CUT_OFF_SCRIPT = """
const width = document.documentElement.clientWidth;
return [...document.querySelectorAll('#findings-table td')].filter(td => {
  const box = td.getBoundingClientRect();
  return box.width === 0 || box.left < 0 || box.right > width + 0.5;
}).map(td => td.dataset.label + ': ' + td.textContent.slice(0, 40));
"""


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("fabric-sweep")
    (folder / "fleet.json").write_text(json.dumps(FLEET))
    command = [sys.executable, "-m", "gpudiag", "sweep", "--simulate", str(folder / "fleet.json"), "-q", "--no-store",
               "--probes", "gemm,membw", "--duration", "0.2", "--json", str(folder / "sweep.json")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=SWEEP_TIMEOUT_S, check=False)
    assert done.returncode == 1, done.stderr[-2000:]
    return json.loads((folder / "sweep.json").read_text())


@pytest.fixture(scope="module")
def report(sweep: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fabric-report") / "report.html"
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
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": phone})
    driver.get(report.as_uri())


def test_the_uplinks_row_names_its_switches_and_shows_its_action_without_a_click(browser: Any, report: Path,
                                                                                 sweep: dict[str, Any]):
    view(browser, report, WIDE)
    rows = browser.execute_script(ROWS_SCRIPT)
    uplink = next(finding for finding in sweep["findings"] if finding["host"] is None)
    switches = uplink["fabric_link"]["switches"]
    fabric = next(row for row in rows if row["kind"] == "slow_fabric_link")
    assert fabric["where"].startswith("rail 2 ") and all(name in fabric["where"] for name in switches), fabric
    assert "no-host" in fabric["classes"].split()
    assert fabric["detail"] == uplink["action_detail"] and fabric["detail_shown"], fabric
    assert fabric["height"] < 120, fabric
    nic = next(row for row in rows if row["kind"] == "slow_nic")
    slow_nic = next(finding for finding in sweep["findings"] if finding["kind"] == "slow_nic")
    assert (nic["where"], nic["detail"]) == ("node050", slow_nic["action_detail"]) and nic["detail_shown"], nic


def test_the_device_grid_has_a_row_per_host_and_none_for_the_uplink(browser: Any, report: Path):
    view(browser, report, WIDE)
    hosts = browser.execute_script("""return [...document.querySelectorAll('#gpu-heatmap tbody tr')].map(
        r => [r.cells[0].textContent.trim(), r.cells[r.cells.length - 1].textContent.trim()]);""")
    assert hosts[0] == ["node050", "slow_nic"]
    assert all(name.startswith("node") for name, _ in hosts) and not [kinds for _, kinds in hosts[1:] if kinds]


def test_on_a_phone_the_uplinks_card_is_whole(browser: Any, report: Path):
    view(browser, report, PHONE, phone=True)
    widths = browser.execute_script(
        "return [document.documentElement.scrollWidth, window.innerWidth];")
    assert widths[0] <= widths[1], widths
    assert browser.execute_script(CUT_OFF_SCRIPT) == []
    fabric = next(row for row in browser.execute_script(ROWS_SCRIPT) if row["kind"] == "slow_fabric_link")
    assert fabric["detail_shown"], fabric
