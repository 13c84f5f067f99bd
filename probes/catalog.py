"""The probe catalogue, ``catalog.json`` beside this module: read and checked once, at import.

That one file says which probes there are (in run order, each with its headline metric and
whether it runs when no probe is named), the GEMM dtypes, how large a probe's buffers may be
(probes/sizing.py) and how a probe is sized beside a paused job (probes/pauseroom.py,
probes/pause.py). Its reader is probes/catalogfile.py, which the controller loads by path to read
the same file (gpudiag/bundle/catalog.py), so the two sides share the file and its checks. A
missing or malformed file is a ``CatalogError`` whose one-line message names the file.
"""

from __future__ import annotations

from pathlib import Path

from .catalogfile import Catalog, CatalogError, PauseFigures, ProbeEntry, Sizing, read_catalog

__all__ = ["Catalog", "CatalogError", "PauseFigures", "ProbeEntry", "Sizing", "read_catalog"]

CATALOG_FILE = Path(__file__).resolve().with_name("catalog.json")
CATALOG = read_catalog(CATALOG_FILE)
PROBE_NAMES = CATALOG.probe_names
# What runs when no probe is named.
DEFAULT_PROBE_NAMES = CATALOG.default_probe_names
DTYPES = CATALOG.dtypes
SIZING = CATALOG.sizing
PAUSE = CATALOG.pause
