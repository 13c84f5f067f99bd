"""Live progress between the node probes and the report: the re-test runs count their hosts and
each pair round its pairs ("screen round 2 of 3: 45/128 pairs"), plainly in a log and as a bar
on a terminal; a fast sequence of rounds does not flood a log."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from rich.console import Console

from gpudiag.cli.progress import BarProgress
from gpudiag.run.fanout import SweepOptions
from gpudiag.run.hostprobe import ProbeOptions
from gpudiag.run.progress import PlainProgress
from gpudiag.run.request import LinkOptions, Reach, SweepRequest
from gpudiag.run.runtime import Runtime
from gpudiag.run.sweep import run_sweep
from gpudiag.sim.standin import FleetFile

FLEET = {"nodes": 8, "seed": 5, "noise": {"gemm_cv": 0.01, "membw_cv": 0.01, "link_cv": 0.02},
         "faults": [{"kind": "slow_gpu", "host": "node003", "gpu": 1, "factor": 0.8},
                    {"kind": "slow_nic", "host": "node006", "factor": 0.6}]}


def _sweep(tmp_path: Path, progress) -> None:
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps(FLEET))
    request = SweepRequest(hosts_argument=None, reach=Reach(stand_in=FleetFile(str(fleet))),
                           sweep=SweepOptions(ProbeOptions(names=("facts", "gemm"), duration_s=0.1)),
                           links=LinkOptions(mode="screen"))
    run_sweep(request, Runtime(progress=progress))


def _counts(lines: list[str], pattern: str) -> list[tuple[int, int]]:
    return [(int(m.group(1)), int(m.group(2))) for line in lines if (m := re.search(pattern, line))]


def test_a_log_counts_the_re_test_hosts_and_each_rounds_pairs_as_they_finish(tmp_path: Path):
    stream = io.StringIO()
    _sweep(tmp_path, PlainProgress(stream, interval_s=0))
    lines = stream.getvalue().splitlines()
    retest = _counts(lines, r"re-test run 1 of 1: (\d+)/(\d+) hosts")
    assert retest[0][0] == 0 and retest[-1][0] == retest[-1][1] >= 1
    assert [done for done, _ in retest] == list(range(len(retest)))  # one line per host, in order
    screen = _counts(lines, r"screen round 1 of (\d+): \d+/(\d+) pairs")
    assert screen and all(rounds >= 2 and pairs == 4 for rounds, pairs in screen)  # 8 nodes: 4 pairs a round
    finished = _counts(lines, r"screen round \d+ of \d+: (\d+)/(\d+) pairs")
    assert (4, 4) in finished
    assert any(re.search(r"confirm round 1 of \d+: 0/\d+ pairs", line) for line in lines)  # the slow NIC's


def test_a_log_of_fast_rounds_says_a_line_at_most_every_interval(tmp_path: Path):
    stream = io.StringIO()
    _sweep(tmp_path, PlainProgress(stream, interval_s=3600))
    lines = stream.getvalue().splitlines()
    assert not any("round" in line or "re-test run" in line for line in lines), lines
    assert any(line.startswith("gpudiag: pair tests between nodes (screen)") for line in lines)


def test_a_terminal_shows_each_stage_as_its_own_bar(tmp_path: Path):
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120, color_system=None)
    progress = BarProgress(console)
    _sweep(tmp_path, progress)
    text = screen.getvalue()
    assert re.search(r"re-test run 1 of 1 \(hosts\).*\b(\d+)/\1\b", text)
    assert re.search(r"screen round 1 of \d+ \(pairs\).*\b4/4\b", text)
