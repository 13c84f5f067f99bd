"""Thresholds that scale with the noise, on measurement documents built here: a host's samples'
CV widens the spread that judges it, a noisy fleet widens the SKU's, a lone P2P dip is a warning,
and the sibling thresholds are checked as data."""

import json
import random
from pathlib import Path

import pytest

from gpudiag.analysis import analyse
from gpudiag.analysis.thresholds import default_thresholds, load_thresholds
from gpudiag.errors import InputError

H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_memory_mib": 81559, "driver_version": "550.54.15",
        "cuda_version": "12.4", "torch_version": "2.4.0", "gpu_count": 8, "cpu_count": 224,
        "cpu_count_usable": 224, "load_average_1m": 1.5, "memory_total_mib": 2063840,
        "memory_available_mib": 1900000}
GEMM_PARAMS = {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "mode": "concurrent"}


def _gemm(gpu: int, value: float, cv: float) -> dict:
    return {"probe": "gemm", "device": f"cuda:{gpu}", "gpu_uuid": f"GPU-{gpu}", "metric": "tflops", "value": value,
            "unit": "TFLOP/s", "samples": 20, "cv": cv, "status": "ok", "params": GEMM_PARAMS, "details": {}}


def _host(name: str, values: list[float], cv: float = 0.004, extra=()) -> dict:
    return {"host": name, "status": "ok", "error": None, "duration_s": 1.0, "facts": dict(H100),
            "results": [_gemm(i, v, cv) for i, v in enumerate(values)] + list(extra)}


def _copy(hosts: list[dict]) -> list[dict]:
    return json.loads(json.dumps(hosts))


def _fleet(count: int, spread: float, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    return [_host(f"node{i:03d}", [740 * rng.gauss(1, spread) for _ in range(8)]) for i in range(count)]


@pytest.mark.parametrize(("host_cv", "flagged"), [(0.004, True), (0.04, False), (0.5, True)])
def test_a_hosts_own_sample_cv_widens_the_spread_that_judges_it_up_to_the_cap(host_cv: float, flagged: bool):
    hosts = _fleet(32, 0.005)
    dip = 0.70 if host_cv == 0.5 else 0.91  # a 9 % dip; past the 5 % cap, a 30 % one still fails
    hosts[7] = _host("node007", [740.0] * 7 + [740 * dip], cv=host_cv)
    findings = analyse(hosts, default_thresholds(), retest_hosts=_copy([hosts[7]])).findings
    assert [(f.kind, f.host, f.gpu) for f in findings] == ([("slow_gpu", "node007", 7)] if flagged else [])


def test_a_noisy_fleet_widens_the_sku_spread_so_its_own_noise_is_no_finding():
    # 16 hosts at 4 % spread: the SKU's fixed 3 % would flag every dip past 9 % of the figure.
    hosts = _fleet(16, 0.04, seed=3)
    findings = analyse(hosts, default_thresholds(), retest_hosts=_copy(hosts)).findings
    assert not [f for f in findings if f.reference_source == "sku"]


def _pair(src: int, dst: int, value: float) -> dict:
    return {"probe": "p2p", "device": f"cuda:{src}", "gpu_uuid": f"GPU-{src}", "metric": "bandwidth", "value": value,
            "unit": "GB/s", "status": "ok", "details": {},
            "params": {"direction": "unidirectional", "src": f"cuda:{src}", "dst": f"cuda:{dst}", "buffer_mib": 256}}


def _p2p_fleet(slow: dict[tuple[int, int], float]) -> list[dict]:
    hosts = []
    for h in range(12):
        rng = random.Random(h)
        pairs = [_pair(s, d, 370 * rng.gauss(1, 0.005) * (slow.get((s, d), 1) if h == 2 else 1))
                 for s in range(8) for d in range(8) if s != d]
        hosts.append(_host(f"node{h:02d}", [740.0] * 8, extra=pairs))
    return hosts


@pytest.mark.parametrize(("slow", "severity"), [({(0, 6): 0.88, (6, 0): 0.88}, "fail"), ({(0, 6): 0.88}, "warn")])
def test_a_slow_p2p_pair_fails_only_when_its_other_direction_agrees(slow: dict, severity: str):
    hosts = _p2p_fleet(slow)
    (link,) = analyse(hosts, default_thresholds(), retest_hosts=_copy([hosts[2]])).findings
    assert (link.kind, link.host, link.gpu, link.peer_gpu, link.severity) == ("slow_link", "node02", 0, 6, severity)
    assert ("one figure alone" in link.evidence) == (severity == "warn")


@pytest.mark.parametrize("name", ["sibling_min_gpus", "small_fleet_min_hosts"])
def test_a_count_of_peers_below_3_is_refused_naming_the_file(tmp_path: Path, name: str):
    path = tmp_path / "thresholds.json"
    path.write_text(json.dumps({"schema": "gpudiag.thresholds/1", name: {"value": 2, "unit": "count"}}))
    with pytest.raises(InputError, match=f"thresholds.json: {name} must be at least 3"):
        load_thresholds(str(path))
    assert default_thresholds().sibling_min_gpus == 4 and default_thresholds().sample_cv_cap_pct == 5.0
