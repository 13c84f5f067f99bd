"""Benchmark of the HTML report at fleet scale: its size and how long headless Chromium takes to
load it.

For each size, a whole simulated sweep (``gpudiag sweep --simulate`` of the demo fleet's 8-GPU H100
nodes and its planted faults, every probe, a link screen, the compact JSON) runs in a child
process; the report is rendered from its document in this process (timed), written, and loaded
LOADS times in headless Chromium through selenium and Debian's chromedriver (nothing is
downloaded). The load time is the browser's own: the navigation's ``loadEventEnd`` (parse, style,
layout of the whole page), the median of the loads. Targets at 1,000 nodes: <= 5 MB and <= 2 s.
Without chromium, chromedriver or selenium the load is reported as skipped, with the reason.

Usage: python bench/html_report.py [--nodes 1000 4096] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from headless import missing_browser, start_browser  # noqa: E402

from gpudiag.report import render_report, write_report  # noqa: E402

LOADS = 3
SMOKE_NODES = 50
TARGET_BYTES, TARGET_LOAD_S, TARGET_NODES = 5_000_000, 2.0, 1000
WINDOW = (1400, 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 4096], help="fleet sizes (8-GPU nodes)")
    parser.add_argument("--smoke", action="store_true", help=f"one {SMOKE_NODES}-node fleet: seconds")
    arguments = parser.parse_args()
    sizes = [SMOKE_NODES] if arguments.smoke else arguments.nodes
    reason = missing_browser()
    browser = start_browser(WINDOW) if reason is None else None
    try:
        for nodes in sizes:
            measure(nodes, browser, reason)
    finally:
        if browser is not None:
            browser.quit()
    print(f"targets at {TARGET_NODES:,} nodes: <= {TARGET_BYTES / 1e6:.0f} MB and <= {TARGET_LOAD_S:.0f} s to load")


def measure(nodes: int, browser: Any, reason: str | None) -> None:
    """Sweep ``nodes`` simulated nodes, render the report and load it: print the figures."""
    with tempfile.TemporaryDirectory(prefix="gpudiag-html-") as folder:
        path = Path(folder)
        sweep_s = simulated_sweep(path, nodes)
        document = json.loads((path / "sweep.json").read_text())
        started = time.perf_counter()
        text = render_report(document, "html")
        render_s = time.perf_counter() - started
        report = path / "report.html"
        write_report(text, report)
        size = report.stat().st_size
        cells = text.count("<td")
        print(f"html report of {nodes:,} nodes ({len(document['findings'])} findings): "
              f"{size / 1e6:.2f} MB ({size / nodes / 1000:.1f} KB a node, {cells:,} cells), "
              f"rendered in {render_s:.2f} s (the sweep: {sweep_s:.1f} s)")
        if browser is None:
            print(f"  load in headless Chromium: skipped ({reason})")
            return
        loads = [load_s(browser, report) for _ in range(LOADS)]
        browser_s = [load for load, _ in loads]
        print(f"  load in headless Chromium: {statistics.median(browser_s):.2f} s (median of {LOADS}: "
              f"{', '.join(f'{s:.2f}' for s in browser_s)} s, navigation start to loadEventEnd; "
              f"{statistics.median(wall for _, wall in loads):.2f} s as the driver waits for it)")


def simulated_sweep(path: Path, nodes: int) -> float:
    """``gpudiag sweep --simulate`` of the demo fleet at ``nodes`` nodes, its faults on the nodes it
    has, into ``path/sweep.json``: the wall time in seconds."""
    fleet = json.loads((ROOT / "gpudiag" / "data" / "demo_fleet.json").read_text())
    fleet["nodes"] = nodes
    names = {fleet["name_format"].format(number) for number in range(1, nodes + 1)}
    fleet["faults"] = [fault for fault in fleet["faults"]
                       if all(fault[end] in names for end in ("host", "a", "b") if end in fault)]
    (path / "fleet.json").write_text(json.dumps(fleet))
    command = [sys.executable, "-m", "gpudiag", "sweep", "--simulate", str(path / "fleet.json"), "-q",
               "--store", str(path / "gpudiag.db"), "--json", str(path / "sweep.json"), "--links", "screen"]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode not in (0, 1, 3):
        raise SystemExit(f"the {nodes}-node sweep exited {done.returncode}: {done.stderr[-2000:]}")
    return time.perf_counter() - started


def load_s(browser: Any, report: Path) -> tuple[float, float]:
    """(seconds from navigation start to the end of the load event, seconds the driver's ``get``
    took) of loading ``report`` afresh."""
    browser.get("about:blank")
    started = time.perf_counter()
    browser.get(report.as_uri())
    wall_s = time.perf_counter() - started
    end_ms = browser.execute_script("return performance.getEntriesByType('navigation')[0].loadEventEnd;")
    return float(end_ms) / 1000, wall_s


if __name__ == "__main__":
    main()
