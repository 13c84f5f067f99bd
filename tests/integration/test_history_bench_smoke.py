"""bench/detection_history.py at its --smoke size, so it cannot rot: a GPU and a node losing 3 % a
sweep over 5 simulated sweeps into real stores are flagged, and no flat part is."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_history_benchmark_flags_both_sliding_parts_and_no_flat_one():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "detection_history.py"), "--smoke"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("history ")]
    parts = {row[1]: row for row in rows if row[1] in ("gpu", "node")}
    assert set(parts) == {"gpu", "node"}
    for row in parts.values():  # history PART 5sw CV slow% kind precision recall faults shift exit hdrain s
        assert row[5] != "none" and row[7] == "1.000" and row[11] == "0", row
    healthy = next(line for line in done.stdout.splitlines() if line.startswith("history healthy"))
    assert "failed 0/" in healthy and "flat nodes with either 0/" in healthy, healthy
