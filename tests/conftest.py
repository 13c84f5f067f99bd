"""Shared test settings: the tiers' markers, and the ``gpu`` marker skips where torch sees no CUDA device."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import settings

# How many cases the hypothesis fuzz of hostile node records (tests/unit/controller/test_fuzz_records.py) runs:
# "suite", the test command's (derandomized, so CI is stable), or "thorough", the full fuzz:
# python -m pytest --hypothesis-profile=thorough tests/unit/controller/test_fuzz_records.py
settings.register_profile("suite", max_examples=40, deadline=None, derandomize=True, database=None)
settings.register_profile("thorough", max_examples=550, deadline=None, derandomize=True, database=None)
settings.load_profile("suite")

# tests/ is no package: its shared helpers (html_tables.py) are imported by name
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


INTEGRATION = Path(__file__).parent / "integration"
# The skip reasons of tests/integration's requires_slurm and requires_netns, by which their tests
# are marked; a test that starts the cluster or namespaces through a fixture is marked by its name.
TIER_MARKERS = {"slurm": "slurm test cluster:", "netns": "network namespaces:"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tiers as markers: ``integration`` (real sshd hosts, Slurm, namespaces), ``slurm`` and
    ``netns`` within it; ``gpu`` tests are skipped where torch sees no CUDA device."""
    for item in items:
        if Path(str(item.fspath)).is_relative_to(INTEGRATION):
            item.add_marker(pytest.mark.integration)
        reasons = [str(mark.kwargs.get("reason", "")) for mark in item.iter_markers("skipif")]
        fixtures = getattr(item, "fixturenames", ())
        for name, reason in TIER_MARKERS.items():
            if any(text.startswith(reason) for text in reasons) or any(name in fixture for fixture in fixtures):
                item.add_marker(getattr(pytest.mark, name))
    if _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU; none is visible to torch here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _private_data_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test writes to the user's own store: the default store path points into a temp dir."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))


@pytest.fixture(autouse=True)
def _private_node_locks(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test takes this machine's node locks (gpudiag.slurm.nodelock), nor another test's: tests
    that check localhost at once would keep each other out."""
    monkeypatch.setenv("GPUDIAG_LOCK_DIR", str(tmp_path_factory.mktemp("node-locks")))
