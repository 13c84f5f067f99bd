"""Where the node-side probe bundle lies, and its content hash.

In a source checkout the bundle is the repository's ``probes/`` and ``cuda_kernels/``; in an
installed wheel it is this package's ``probes/`` and ``cuda_kernels/`` subfolders. Either way
the bundle root is the folder that holds both, and ``python -m probes`` runs from it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

BUNDLE_PARTS = ("probes", "cuda_kernels")
_SHIPPED_SUFFIXES = (".py", ".cu", ".cuh", ".json")
# The probe catalogue in probes/, which the bundle and the controller both read (bundle/catalog.py).
CATALOG_FILE = "catalog.json"


class BundleMissing(RuntimeError):
    """The probe bundle is not where the installation should have put it."""


@dataclass(frozen=True)
class Bundle:
    """The bundle root folder and the files that are shipped from it, relative to it."""

    root: Path
    files: tuple[Path, ...]

    @functools.cached_property
    def contents(self) -> dict[Path, bytes]:
        """Every shipped file's bytes, read once however many hosts it is copied to."""
        return {relative: (self.root / relative).read_bytes() for relative in self.files}

    @functools.cached_property
    def content_hash(self) -> str:
        """SHA-256 over every shipped file's relative path and bytes, in sorted order (hex)."""
        digest = hashlib.sha256()
        for relative, data in self.contents.items():
            digest.update(relative.as_posix().encode() + b"\0")
            digest.update(data + b"\0")
        return digest.hexdigest()


def locate_bundle() -> Bundle:
    """The installed or checked-out bundle. Raises BundleMissing when it cannot be found."""
    probes_dir = _probes_dir()
    root = probes_dir.parent
    missing = [part for part in BUNDLE_PARTS if not (root / part).is_dir()]
    if missing:
        raise BundleMissing(f"the probe bundle at {root} lacks {', '.join(missing)}/; reinstall gpudiag")
    return Bundle(root=root, files=_shipped_files(root))


def catalog_path() -> Path:
    """Where the bundle's probe catalogue lies (probes/catalog.json), found without importing the
    bundle. Raises BundleMissing when the bundle is not installed."""
    return _probes_dir() / CATALOG_FILE


def _probes_dir() -> Path:
    # find_spec reads where the package lies without importing the probes themselves.
    spec = importlib.util.find_spec("gpudiag.bundle.probes")
    if spec is None or not spec.submodule_search_locations:
        raise BundleMissing("gpudiag.bundle.probes is not installed; reinstall gpudiag")
    return Path(next(iter(spec.submodule_search_locations)))


def _shipped_files(root: Path) -> tuple[Path, ...]:
    files = [path.relative_to(root)
             for part in BUNDLE_PARTS
             for path in (root / part).rglob("*")
             if path.is_file() and path.suffix in _SHIPPED_SUFFIXES and "__pycache__" not in path.parts]
    return tuple(sorted(files))
