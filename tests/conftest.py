"""Shared test settings: the ``gpu`` marker skips where torch sees no CUDA device."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import settings

# How many cases the hypothesis fuzz of hostile node records (tests/unit/test_fuzz_records.py) runs:
# "suite", the test command's (derandomized, so CI is stable), or "thorough", the full fuzz:
# python -m pytest --hypothesis-profile=thorough tests/unit/test_fuzz_records.py
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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
