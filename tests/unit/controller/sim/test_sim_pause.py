"""A simulated node held by a paused job (the ``paused_job`` fault): gpudiag/sim/pause.py refuses
and caps as probes/pauseroom.py does, word for word (the figures of both are the one
probes/catalog.json: tests/unit/controller/bundle/test_catalog.py), and the node's probes are sized or refused as on
a real node, with ``--pause`` and without."""

from __future__ import annotations

import pytest
from simfleet import GPUS, one, run_node, small_fleet

from gpudiag.errors import InputError
from gpudiag.records import DTYPES
from gpudiag.run.hostprobe import ProbeOptions
from gpudiag.sim import SimulatedConnector, parse_fleet
from gpudiag.sim import pause as sim_pause
from gpudiag.sim.state import GpuState
from probes import pauseroom

TOTAL_MIB = 81559
FREE_MIB = (0, 600, 896, 1000, 1100, 1200, 2000, 5559, 40000, TOTAL_MIB)


def _connector(*faults: dict) -> SimulatedConnector:
    return SimulatedConnector(parse_fleet(small_fleet(*faults), "fleet.json"))


def _rooms(free_mib: int, mode: str, processes: int) -> tuple[pauseroom.GpuRoom, sim_pause.Room]:
    gpu = GpuState(index=0, gpu_uuid="GPU-0", serial="1", pci_bus_id="00000000:18:00.0", nvml_index=0, cuda_index=0)
    return (pauseroom.GpuRoom(0, "GPU-0", "cuda:0", free_mib, TOTAL_MIB, mode, processes),
            sim_pause.Room(gpu, free_mib, TOTAL_MIB, mode, processes))


# ------------------------------------------------------------------------------ the same rules


@pytest.mark.parametrize(("mode", "processes"), [("default", 1), ("exclusive_process", 1), ("exclusive_process", 0),
                                                 ("exclusive_thread", 2), ("prohibited", 0)])
def test_refusals_and_caps_match_word_for_word(mode, processes):
    for free_mib in FREE_MIB:
        real, simulated = _rooms(free_mib, mode, processes)
        for probe in pauseroom.GPU_PROBES:
            for dtype in DTYPES:
                assert sim_pause.refusal(simulated, probe, dtype) == pauseroom.refusal(real, probe, dtype)
        for cap in (None, 100, 4096):
            assert sim_pause.child_cap_mib(free_mib, cap) == pauseroom.child_cap_mib(real, cap)


# ------------------------------------------------------------------------------ a paused node


def test_with_pause_each_gpus_probes_are_sized_under_what_the_job_left():
    connector = _connector({"kind": "paused_job", "host": "node001", "used_mib": 76000})
    results = run_node(connector, "node001", ProbeOptions(pause=True))
    total = connector.fleet.node_state("node001").gpu_memory_mib
    for index in range(GPUS):
        gemm = one(results, "gemm", "tflops", f"cuda:{index}")
        figures = gemm.details["pause"]
        assert gemm.status == "ok" and figures == {
            "max_gpu_mem_mib": pauseroom.child_cap_mib(_rooms(total - 76000, "default", 1)[0], None),
            "gpus_visible": 1, "nvml_index": index, "free_mib": total - 76000, "total_mib": total,
            "compute_mode": "default", "compute_processes": 1}
        assert 3 * gemm.params["m"] ** 2 * 2 < figures["max_gpu_mem_mib"] << 20
        assert gemm.params["mode"] == "sequential"
    assert {r.status for r in results if r.probe == "p2p"} == {"ok"}
    assert next(r for r in results if r.probe == "p2p").details["pause"]["gpus_visible"] == GPUS


def test_with_pause_a_full_gpu_and_an_exclusive_one_are_skipped_with_the_reason():
    connector = _connector({"kind": "paused_job", "host": "node001", "used_mib": 81000, "gpu": 2},
                           {"kind": "paused_job", "host": "node001", "used_mib": 20000, "gpu": 5, "exclusive": True})
    results = run_node(connector, "node001", ProbeOptions(pause=True))
    total = connector.fleet.node_state("node001").gpu_memory_mib
    for probe, metric in (("gemm", "tflops"), ("membw", "bandwidth"), ("smclock", "sm_clock")):
        full, busy = one(results, probe, metric, "cuda:2"), one(results, probe, metric, "cuda:5")
        assert (full.status, busy.status) == ("skipped", "skipped")
        assert full.reason.startswith(f"pause: {total - 81000} MiB free of {total} MiB")
        assert "compute mode exclusive_process with 1 compute process" in busy.reason
        assert one(results, probe, metric, "cuda:0").status == "ok"
    p2p = [r for r in results if r.probe == "p2p"]
    assert {(r.device, r.status) for r in p2p if r.status != "ok"} == {("cuda:2", "skipped"), ("cuda:5", "skipped")}
    assert not {r.params.get("src") for r in p2p if r.status == "ok"} & {"cuda:2", "cuda:5"}


def test_without_pause_the_job_makes_the_probes_fail_as_on_a_real_node():
    connector = _connector({"kind": "paused_job", "host": "node001", "used_mib": 81000, "gpu": 2},
                           {"kind": "paused_job", "host": "node001", "used_mib": 20000, "gpu": 5, "exclusive": True})
    results = run_node(connector, "node001")
    full, busy = one(results, "gemm", "tflops", "cuda:2"), one(results, "gemm", "tflops", "cuda:5")
    assert full.status == "error" and full.reason.startswith("refused: gemm needs at least")
    assert busy.status == "error" and "busy or unavailable" in busy.reason
    assert "pause" not in one(results, "gemm", "tflops", "cuda:0").details


def test_a_short_deadline_leaves_the_children_no_time():
    connector = _connector({"kind": "paused_job", "host": "node001", "used_mib": 1000})
    results = run_node(connector, "node001", ProbeOptions(names=("gemm",), pause=True, deadline_s=10.0))
    assert {(r.status, "deadline" in (r.reason or "")) for r in results} == {("skipped", True)}


def test_a_paused_job_holding_more_than_the_gpu_has_is_an_input_error():
    with pytest.raises(InputError, match=r"faults\[0\]\.used_mib"):
        parse_fleet(small_fleet({"kind": "paused_job", "host": "node001", "used_mib": 10**7}), "fleet.json")
