"""The bundle's probe catalogue (probes/catalog.json), read by the controller with the bundle's
own reader.

The reader is the bundle's probes/catalogfile.py: standard library alone, nothing of the bundle
imported, nothing read at import. The controller loads that one file by its path, from where
the bundle lies (it never imports the bundle as a package), so the file and its checks are
defined once for both sides. The catalogue is read and checked once (``catalog()``), and its
names are defined from it in one place each: gpudiag/records.py (the probes, their headline
metrics and the dtypes) and gpudiag/pause/sizing.py (the memory sizing figures, beside a paused
job and not); gpudiag/schema/tables.py adds ``net`` to the probes for the record kinds. A
missing or malformed file, or a reader that cannot be loaded, is an InstallationError whose
one-line message names the file.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import InstallationError
from . import BundleMissing, catalog_path

# The bundle's reader, beside catalog.json, and the name it is loaded under (not ``probes.*``:
# the controller keeps the bundle's package apart).
READER_FILE = "catalogfile.py"
_READER_MODULE = "gpudiag.bundle._catalogfile"


@functools.cache
def catalog() -> Any:
    """The installed bundle's catalogue (the bundle's ``Catalog``), read and checked once.
    Raises InstallationError."""
    return read_catalog(_installed_catalog())


def read_catalog(path: Path) -> Any:
    """The catalogue at ``path``, checked by the installed bundle's reader. Raises
    InstallationError naming ``path``, in one line."""
    reader = _reader()
    try:
        return reader.read_catalog(path)
    except reader.CatalogError as error:
        raise InstallationError(str(error)) from None


@functools.cache
def _reader() -> ModuleType:
    source = _installed_catalog().with_name(READER_FILE)
    spec = importlib.util.spec_from_file_location(_READER_MODULE, source)
    if spec is None or spec.loader is None:
        raise InstallationError(f"{source}: the bundle's catalogue reader cannot be loaded; reinstall gpudiag")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_READER_MODULE] = module  # its dataclasses look their module up while they are made
    try:
        spec.loader.exec_module(module)
    except (OSError, SyntaxError, ImportError) as error:
        del sys.modules[_READER_MODULE]
        raise InstallationError(f"{source}: the bundle's catalogue reader cannot be loaded ({error}); "
                                "reinstall gpudiag") from error
    return module


def _installed_catalog() -> Path:
    try:
        return catalog_path()
    except BundleMissing as missing:
        raise InstallationError(str(missing)) from missing
