"""The wheel carries every module, and the probe bundle (probes/ and cuda_kernels/, linked from
gpudiag/bundle/) inside gpudiag/bundle/."""

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_wheel_ships_the_bundle_under_gpudiag_and_no_top_level_probes(tmp_path: Path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("gpudiag-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in ("gpudiag/cli/main.py", "gpudiag/bundle/probes/__main__.py", "gpudiag/bundle/probes/gemm.py",
                     "gpudiag/bundle/probes/catalog.json", "gpudiag/bundle/cuda_kernels/sm_clock.cu"):
        assert expected in names
    # every module of the controller and of the bundle ships (pyproject finds the packages itself)
    controller = {str(path.relative_to(REPO)) for path in (REPO / "gpudiag").rglob("*.py")
                  if "__pycache__" not in path.parts}
    bundle = {f"gpudiag/bundle/{path.relative_to(REPO)}" for path in (REPO / "probes").rglob("*.py")
              if "__pycache__" not in path.parts}
    assert len(bundle) > 30 and (controller | bundle) - names == set()
    assert not any(name.startswith("probes/") for name in names)
    assert not any(name.startswith("tests/") for name in names)
