"""The probe catalogue, defined once in probes/catalog.json: the bundle reads it beside its own
modules (probes/catalog.py), the controller as data through where the bundle lies
(gpudiag/bundle/catalog.py), and every name of the probes, the dtypes and the sizing figures on
either side comes from it. A missing or malformed file is a one-line error naming it, on both."""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpudiag import records
from gpudiag.bundle import BundleMissing, catalog_path, locate_bundle
from gpudiag.bundle import catalog as controller
from gpudiag.errors import InstallationError
from gpudiag.pause import sizing
from gpudiag.schema.tables import PROBES
from gpudiag.sim import pause as sim_pause
from probes import catalog as bundle
from probes import catalogfile as bundle_reader
from probes import context, gemm, hostfacts, membw, p2p, pause, pauseroom, pcie, runner, smclock, xid
from probes import sizing as bundle_sizing

NAMES = ("facts", "telemetry", "xid", "gemm", "membw", "p2p", "pcie", "smclock")


def _data() -> dict[str, Any]:
    return json.loads(bundle.CATALOG_FILE.read_text(encoding="utf-8"))


def _fields(catalog: object) -> dict[str, Any]:
    return dataclasses.asdict(catalog)  # type: ignore[call-overload]


# ------------------------------------------------------------------------------ one file, both sides


def test_both_sides_read_the_one_file_and_read_it_alike():
    assert catalog_path().resolve() == bundle.CATALOG_FILE
    assert _fields(controller.catalog()) == _fields(bundle.CATALOG)
    assert controller.catalog() is controller.catalog()  # read once
    # ... with one reader: the controller loads the bundle's own (by path; it imports no probes.*)
    assert Path(controller._reader().__file__).resolve() == Path(bundle_reader.__file__).resolve()
    assert controller._reader().__name__ == "gpudiag.bundle._catalogfile"


def test_the_names_keep_their_values_and_come_from_the_catalogue():
    assert records.PROBE_NAMES == runner.PROBE_NAMES == bundle.PROBE_NAMES == NAMES
    assert records.DEFAULT_PROBE_NAMES == runner.DEFAULT_PROBE_NAMES == tuple(n for n in NAMES if n != "xid")
    assert records.DTYPES == context.DTYPES == ("bf16", "fp16", "tf32", "fp32")
    assert PROBES == (*NAMES, "net")  # the record kinds: the probes, and the pair tests'
    assert [spec.name for spec in runner.PROBES] == list(NAMES)


def test_each_probe_runs_under_its_catalogue_metric():
    assert {spec.name: spec.metric for spec in runner.PROBES} == records.HEADLINE_METRICS
    modules = {"facts": hostfacts, "xid": xid, "gemm": gemm, "membw": membw, "p2p": p2p, "pcie": pcie,
               "smclock": smclock}
    for name, module in modules.items():  # the metric each probe's own records name
        assert module.METRIC == records.HEADLINE_METRICS[name], name
    assert pause.PROBE_METRICS == {name: records.HEADLINE_METRICS[name] for name in pauseroom.GPU_PROBES}


def test_the_sizing_figures_on_both_sides_are_the_catalogues():
    assert gemm.GPU_SIZES == sizing.GEMM_SIZES and gemm.DTYPE_BYTES == sizing.DTYPE_BYTES
    assert gemm.CUBLAS_WORKSPACE_BYTES == sizing.GEMM_WORKSPACE_MIB * sizing.MIB
    assert membw.GPU_BUFFER_MIB == sizing.MEMBW_BUFFER_MIB
    assert p2p.BUFFER_MIB == sizing.P2P_BUFFER_MIB and pcie.BUFFER_MIB == sizing.PCIE_BUFFER_MIB
    assert smclock.ALLOCATOR_SEGMENT_MIB == sizing.SMCLOCK_SEGMENT_MIB
    assert (bundle_sizing.HEADROOM_MIN_BYTES, bundle_sizing.HEADROOM_FRACTION) == (
        sizing.HEADROOM_MIN_BYTES, sizing.HEADROOM_FRACTION)
    assert pauseroom.CONTEXT_RESERVE_MIB == sim_pause.CONTEXT_RESERVE_MIB == sizing.CONTEXT_RESERVE_MIB
    assert pause.PER_GPU_PROBES == sim_pause.PER_GPU_PROBES == sizing.PER_GPU_PROBES
    assert set(pauseroom.GPU_PROBES) == set(sim_pause.GPU_PROBES) == set(sizing.GPU_PROBES)
    timing = pause.ChildTiming()
    assert (timing.margin_s, timing.min_share_s) == (sim_pause.CHILD_MARGIN_S, sim_pause.MIN_SHARE_S)
    for dtype in records.DTYPES:
        for probe in pauseroom.GPU_PROBES:
            assert sim_pause.smallest_need_mib(probe, dtype) == pauseroom.smallest_need_mib(probe, dtype)


def test_a_changed_catalogue_is_read_alike_by_both(tmp_path: Path):
    data = _data()
    data["dtypes"].append("fp8")
    data["sizing"]["dtype_bytes"]["fp8"] = 1
    data["sizing"]["gemm_sizes"] = [16384, 8192]
    data["pause"]["context_reserve_mib"] = 700
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    read = controller.read_catalog(path)
    assert _fields(read) == _fields(bundle.read_catalog(path))
    assert read.dtypes[-1] == "fp8" and read.sizing.gemm_sizes == (16384, 8192)


def test_the_bundle_ships_the_catalogue():
    assert Path("probes/catalog.json") in locate_bundle().files


# ------------------------------------------------------------------------------ a broken catalogue


def _set(path: str, value: Any) -> Any:
    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = data
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if value is _DROP:
            del target[last]
        elif isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return change


_DROP = object()
BROKEN = {
    "no probes": (_set("probes", []), "probes: must be a non-empty list"),
    "a probe twice": (_set("probes.3.name", "facts"), "probes: 'facts' is listed twice"),
    "a probe's flag a word": (_set("probes.0.by_default", "yes"), "probes[0].by_default: must be true or false"),
    "none by default": (lambda d: [p.update(by_default=False) for p in d["probes"]], "none runs by default"),
    "a name not a word": (_set("probes.1.name", "tele metry"), "probes[1].name: must be a lower-case word"),
    "no dtypes": (_set("dtypes", _DROP), "the catalogue: lacks dtypes"),
    "a dtype twice": (_set("dtypes", ["bf16", "bf16"]), "dtypes: 'bf16' is listed twice"),
    "an unknown key": (_set("pause.spare_mib", 1), "pause: has unknown spare_mib"),
    "a dtype without bytes": (_set("sizing.dtype_bytes.fp32", _DROP), "sizing.dtype_bytes: lacks fp32"),
    "sizes smallest first": (_set("sizing.gemm_sizes", [2048, 4096]), "sizing.gemm_sizes: must be largest first"),
    "a size of zero": (_set("sizing.p2p_buffer_mib", [64, 0]), "sizing.p2p_buffer_mib[1]: must be a whole number"),
    "a count true": (_set("sizing.smclock_segment_mib", True), "sizing.smclock_segment_mib: must be a whole number"),
    "a fraction of 1.5": (_set("sizing.headroom_fraction", 1.5), "sizing.headroom_fraction: must be below 1"),
    "a negative margin": (_set("pause.child_margin_s", -1), "pause.child_margin_s: must be a finite number"),
    "a GPU probe unknown": (_set("pause.per_gpu_probes", ["gemm", "nvlink"]), "'nvlink' is not a probe"),
    "not an object": (lambda d: d.clear(), "the catalogue: lacks probes"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_malformed_catalogue_is_one_line_naming_the_file_on_both_sides(tmp_path: Path, case: str):
    change, problem = BROKEN[case]
    data = copy.deepcopy(_data())
    change(data)
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InstallationError) as on_controller:
        controller.read_catalog(path)
    with pytest.raises(bundle.CatalogError) as on_node:
        bundle.read_catalog(path)
    for error in (on_controller.value, on_node.value):
        assert str(error).startswith(f"{path}: malformed probe catalogue: ") and problem in str(error)
        assert "\n" not in str(error)


@pytest.mark.parametrize(("text", "problem"), [
    ('{"probes": [', "{path}:1:13: the probe catalogue is not valid JSON: Expecting value"),
    ('{"dtypes": [], "dtypes": []}', "the key 'dtypes' appears twice in one object"),
    ('{"pause": {"child_margin_s": NaN}}', "must be a finite number"),
])
def test_a_garbled_catalogue_is_one_line_naming_the_file_on_both_sides(tmp_path: Path, text: str, problem: str):
    path = tmp_path / "catalog.json"
    path.write_text(text if "NaN" not in text else _nan_catalogue(), encoding="utf-8")
    expected = problem.replace("{path}", str(path))
    for read, error_type in ((controller.read_catalog, InstallationError), (bundle.read_catalog, bundle.CatalogError)):
        with pytest.raises(error_type) as raised:
            read(path)
        assert str(raised.value).startswith(str(path)) and expected in str(raised.value)
        assert "\n" not in str(raised.value)


def _nan_catalogue() -> str:
    return bundle.CATALOG_FILE.read_text(encoding="utf-8").replace('"child_margin_s": 10.0', '"child_margin_s": NaN')


def test_a_missing_catalogue_is_one_line_naming_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "catalog.json"
    with pytest.raises(InstallationError, match=f"^{path}: cannot read the probe catalogue: No such file"):
        controller.read_catalog(path)
    with pytest.raises(bundle.CatalogError, match=f"^{path}: cannot read the probe catalogue: No such file"):
        bundle.read_catalog(path)

    def missing() -> Path:
        raise BundleMissing("gpudiag.bundle.probes is not installed; reinstall gpudiag")

    monkeypatch.setattr(controller, "catalog_path", missing)
    with pytest.raises(InstallationError, match="not installed; reinstall gpudiag"):
        controller.catalog.__wrapped__()


def test_a_bundle_without_its_catalogue_says_so_on_its_last_line(tmp_path: Path):
    root = locate_bundle().root
    for part in ("probes", "cuda_kernels"):
        shutil.copytree(root / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "probes" / "catalog.json").unlink()
    done = subprocess.run([sys.executable, "-m", "probes", "--help"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("probes.catalogfile.CatalogError: ") and str(tmp_path / "probes" / "catalog.json") in last
