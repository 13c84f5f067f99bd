"""Further nodes of a paused job for the node probes (gpudiag.run.nodepeers), within the run's budget:
where the first pass leaves no time for another as long, none is probed, and the sweep says why."""

from __future__ import annotations

import json
from pathlib import Path

from gpudiag.findings import Basis, Finding, Kind, Severity
from gpudiag.hosts import HostSpec
from gpudiag.pause import Focus, FocusRequest
from gpudiag.run.budget import FINISH_RESERVE_S
from gpudiag.run.fanout import SweepOptions
from gpudiag.run.hostprobe import ProbeOptions
from gpudiag.run.nodepeers import node_peer_bound, undecided, widened
from gpudiag.run.progress import QuietProgress
from gpudiag.run.request import LinkOptions, Reach, SweepRequest
from gpudiag.run.runtime import Runtime
from gpudiag.run.sweep import run_sweep
from gpudiag.sim.standin import FleetFile

BUDGET_S = 100.0


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _FirstPassTakesTheBudget(QuietProgress):
    """Moves the run's clock to a second before the budget's end once the first pass is analysed."""

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock
        self.phases: list[str] = []

    def phase(self, text: str) -> None:
        self.phases.append(text)
        if text.startswith("analysing") and len(self.phases) == 1:
            self.clock.now = BUDGET_S - FINISH_RESERVE_S - 1.0


def _slow_references(tmp_path: Path) -> SweepRequest:
    fleet = tmp_path / "fleet.json"
    faults = [{"kind": "slow_gpu", "host": host, "gpu": gpu, "factor": 0.85}
              for host in ("node004", "node013") for gpu in range(8)]
    fleet.write_text(json.dumps({"nodes": 16, "seed": 2, "faults": faults}))
    return SweepRequest(hosts_argument=None, reach=Reach(stand_in=FleetFile(str(fleet))),
                        sweep=SweepOptions(ProbeOptions(names=("facts", "gemm"), duration_s=0.1, pause=True)),
                        links=LinkOptions(mode="none"), focus=FocusRequest("node005"), budget_s=BUDGET_S)


def test_with_no_time_left_for_another_pass_no_further_node_is_probed_and_the_sweep_says_so(tmp_path: Path):
    clock = _Clock()
    progress = _FirstPassTakesTheBudget(clock)
    result = run_sweep(_slow_references(tmp_path), Runtime(progress=progress, clock=clock))
    peers = result.focus["node_peers"]
    assert peers["hosts"] == [] and peers["max_hosts"] == 4
    assert set(peers["not_probed"]) == {"node009", "node006", "node014", "node002"}
    assert all(why.startswith("budget: not finished within the --budget 100 s") for why in peers["not_probed"].values())
    assert {host.host for host in result.hosts} == {"node004", "node005", "node013"}
    assert not any(text.startswith("probing") for text in progress.phases)
    assert any(warning.startswith("further nodes probed: none (of at most 4)") for warning in result.warnings)
    # the group finding stands, said as it was: nothing was hidden for want of time
    assert any(f.kind == Kind.FLEET_SHIFT for f in result.findings)


def test_only_a_group_finding_on_the_probed_hosts_asks_for_further_nodes():
    focus = Focus(("n5",), ("n4", "n13"), tuple(HostSpec(f"n{i}", f"n{i}") for i in (9, 6, 14, 2, 8)))
    shift = Finding(kind=Kind.FLEET_SHIFT, severity=Severity.FAIL, host="n[4,13]", metric="gemm.tflops",
                    basis=Basis.SINGLE_RUN, evidence="", action="inspect", action_detail="")
    node = Finding(kind=Kind.SLOW_NODE, severity=Severity.FAIL, host="n4", metric="gemm.tflops",
                   basis=Basis.RETEST, evidence="", action="drain", action_detail="")
    assert undecided([shift, node], focus) == [shift]
    assert undecided([node], focus) == [] and undecided([shift], None) == []
    assert undecided([shift], Focus(("n5",), ("n4", "n13"))) == []  # no further node to probe
    assert node_peer_bound(focus) == 4
    wider = widened(focus, focus.others[:2])
    assert wider.references == ("n4", "n13", "n9", "n6") and [h.label for h in wider.others] == ["n14", "n2", "n8"]
