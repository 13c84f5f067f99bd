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
    for expected in ("gpudiag/cli.py", "gpudiag/bundle/probes/__main__.py", "gpudiag/bundle/probes/gemm.py",
                     "gpudiag/bundle/cuda_kernels/sm_clock.cu"):
        assert expected in names
    assert not any(name.startswith("probes/") for name in names)
    assert not any(name.startswith("tests/") for name in names)
