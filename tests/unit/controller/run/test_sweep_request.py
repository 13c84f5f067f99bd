"""A run reads its request as it was built (gpudiag.run.sweep): what it decides itself, the first
pass's options (the facts probe always in, the connection's fan-out) and the screen's stride,
is worked out once beside the request and kept with the sweep in the store."""

from __future__ import annotations

import json
from pathlib import Path

from gpudiag.pause import FocusRequest
from gpudiag.run.fanout import SweepOptions
from gpudiag.run.hostprobe import ProbeOptions
from gpudiag.run.request import Judging, LinkOptions, Reach, SweepRequest
from gpudiag.run.sweep import run_sweep
from gpudiag.sim import FleetFile
from gpudiag.store.store import Store


def test_the_first_pass_and_the_screen_stride_are_chosen_by_the_run_and_stored_with_the_sweep(tmp_path: Path):
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": 6, "name_format": "n{}"}))
    store = tmp_path / "gpudiag.db"
    request = SweepRequest(hosts_argument=None, sweep=SweepOptions(ProbeOptions(names=("gemm",), duration_s=0.1),
                                                                   fanout=3),
                           reach=Reach(stand_in=FleetFile(str(fleet))), judging=Judging(store_path=str(store)),
                           links=LinkOptions(mode="screen"))
    # A --suspects sweep screens its hosts (suspect, references, …) with their neighbours, where
    # another would move one stride on from the last stored sweep's.
    focused = SweepRequest(hosts_argument=None, sweep=request.sweep, reach=request.reach, judging=request.judging,
                           links=request.links, focus=FocusRequest("n4", 1))
    swept = [run_sweep(asked).sweep_id for asked in (request, focused)]
    with Store.open(store) as opened:
        options = {sweep["sweep_id"]: sweep["options"] for sweep in opened.list_sweeps()}
    assert [options[sweep_id]["screen_stride"] for sweep_id in swept] == [1, 1]  # unfocused, the second's is 2
    assert all(options[sweep_id]["probes"] == ["facts", "gemm"] for sweep_id in swept)
    assert all(options[sweep_id]["fanout"] == 3 for sweep_id in swept)
    assert request.sweep.probe.names == ("gemm",) and request.links.screen_stride is None
