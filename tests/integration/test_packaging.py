"""The wheel carries the probe bundle (probes/ and cuda_kernels/) inside gpudiag/bundle/."""

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
    # every package of the controller ships (pyproject lists them one by one)
    packages = {str(init.parent.relative_to(REPO)) for init in (REPO / "gpudiag").rglob("__init__.py")
                if "bundle" not in init.parts}
    assert {package for package in packages if f"{package}/__init__.py" not in names} == set()
    assert not any(name.startswith("probes/") for name in names)
    assert not any(name.startswith("tests/") for name in names)
