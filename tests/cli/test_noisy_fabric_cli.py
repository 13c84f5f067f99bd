"""A noisy fabric through the real pipeline (``gpudiag sweep --simulate``, perftest pairs on 8
rails): at 12 % run-to-run link noise a fifth of the healthy pairs fall under the line rate's
90 % floor. The fleet's level and spread must then rest on every pair (gpudiag.links.groups):
cut at the floor, the level rose and the spread shrank, and healthy pairs became ``slow_link``
fails and a healthy host a ``slow_nic`` drain."""

import json
import tempfile
from pathlib import Path

from click.testing import CliRunner

from gpudiag.cli.main import main

FAST = ("--probes", "facts,telemetry", "--duration", "0.2", "--links", "screen")


def _sweep(tmp_path: Path, seed: int, faults: list[dict]) -> tuple[int, dict]:
    fleet = tmp_path / f"fleet{seed}.json"
    fleet.write_text(json.dumps({"nodes": 64, "seed": seed, "name_format": "node{:04d}",
                                 "noise": {"gemm_cv": 0.01, "membw_cv": 0.01, "link_cv": 0.12}, "faults": faults}))
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "out.json"
        result = CliRunner().invoke(main, ["sweep", "--simulate", str(fleet), "-q", "--json", str(out), "--no-store",
                                           *FAST], catch_exceptions=False)
        return result.exit_code, json.loads(out.read_text())


def test_a_healthy_fabric_at_twelve_percent_link_noise_blames_no_pair_and_drains_no_host(tmp_path: Path):
    for seed in (1, 3):  # each of these seeds had false slow_link fails with the floor's cut
        _, document = _sweep(tmp_path, seed, [])
        blamed = [(f["kind"], f["host"], f.get("peer"), f["severity"]) for f in document["findings"]
                  if f["kind"] in ("slow_link", "slow_nic")]
        assert blamed == [], (seed, blamed)
        # (a pair the confirm runs could not settle is ``unchecked``: kept from a job, not drained)
        assert [f for f in document["findings"] if f["action"] == "drain"] == [], seed


def test_a_half_rate_nic_on_that_fabric_is_still_found_and_drained_alone(tmp_path: Path):
    code, document = _sweep(tmp_path, 1, [{"kind": "slow_nic", "host": "node0021", "factor": 0.5}])
    nics = {(f["host"], f["severity"]) for f in document["findings"] if f["kind"] == "slow_nic"}
    assert nics == {("node0021", "fail")} and code == 1, document["findings"]
    assert document["impact"]["exclude"] == ["node0021"]


def test_a_healthy_16_node_fabric_at_four_percent_link_noise_is_a_pass(tmp_path: Path):
    # A rail's two dozen pairs crowded at its top by chance, with a tight spread above them: its
    # level came out high, and three healthy pairs were slow_link fails (exit 1), two unchecked.
    # The level is found again setting pairs aside by the family's spread (gpudiag.links.attribution).
    fleet = tmp_path / "fleet16.json"
    fleet.write_text(json.dumps({"nodes": 16, "seed": 1, "name_format": "node{:04d}",
                                 "noise": {"gemm_cv": 0.01, "membw_cv": 0.01, "link_cv": 0.04}, "faults": []}))
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "out.json"
        result = CliRunner().invoke(main, ["sweep", "--simulate", str(fleet), "-q", "--json", str(out), "--no-store",
                                           "--probes", "facts,gemm"], catch_exceptions=False)
        document = json.loads(out.read_text())
    assert document["findings"] == [] and result.exit_code == 0
