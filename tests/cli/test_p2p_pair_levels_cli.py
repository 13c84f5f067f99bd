"""A GPU pair's P2P path 8 % slow at 3 % noise, through ``gpudiag sweep --simulate``: each pair's
key rests on one value a host, and its level from 16 hosts is off by as much as six re-test runs'
noise; the board's pairs share one level where they agree (gpudiag.analysis.pairlevels)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from gpudiag.cli.main import main


def _sweep(folder: Path, seed: int, faults: list[dict]) -> dict:
    fleet, out = folder / f"fleet{seed}.json", folder / f"sweep{seed}.json"
    fleet.write_text(json.dumps({"nodes": 16, "name_format": "node{:03d}", "seed": seed,
                                 "noise": {"gemm_cv": 0.03, "membw_cv": 0.03, "link_cv": 0.06}, "faults": faults,
                                 "overrides": [{"hosts": "node[001-016]", "gpu_model": "NVIDIA H200"}]}))
    CliRunner().invoke(main, ["sweep", "--simulate", str(fleet), "--probes", "facts,p2p", "--links", "none",
                              "--no-store", "-q", "--json", str(out)], catch_exceptions=False)
    return json.loads(out.read_text())


def test_a_gpu_pair_8_pct_slow_at_3_pct_noise_is_found_and_a_healthy_board_names_nothing(tmp_path):
    found, named_elsewhere = 0, []
    for seed in range(1, 17):
        slow = {"kind": "slow_p2p", "host": "node005", "gpu": 1, "peer_gpu": 6, "factor": 0.92}
        document = _sweep(tmp_path, seed, [slow])
        flagged = [f for f in document["findings"] if f["severity"] in ("warn", "fail")]
        found += any(f["kind"] == "slow_link" and f["host"] == "node005" and {f["gpu"], f["peer_gpu"]} == {1, 6}
                     for f in flagged)
        named_elsewhere += [(seed, f["kind"], f["host"]) for f in flagged if f["host"] != "node005"]
    assert found >= 13, found  # 11 of 16 with each pair's level its own
    assert not named_elsewhere, named_elsewhere
    for seed in range(11, 15):
        assert not [f for f in _sweep(tmp_path, seed, [])["findings"] if f["severity"] in ("warn", "fail")]
