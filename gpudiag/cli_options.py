"""What the commands over the store share: the ``--store`` option, where the store is by
default, and the hint under a table that left columns out."""

from __future__ import annotations

import os

import click

from .store import default_store_path

# Where a table leaves out columns for want of room, its caption says so and how to see them.
WIDER_HINT = "a wider terminal (COLUMNS) shows them"


def store_option(function: click.decorators.FC) -> click.decorators.FC:
    """The ``--store PATH`` option (into the ``store_path`` parameter)."""
    return click.option("--store", "store_path", default=None, metavar="PATH",
                        help="SQLite store (default: $XDG_DATA_HOME/gpudiag/gpudiag.db).")(function)


def store_location(store_path: str | None) -> str:
    """``--store``'s path, else the default store's (gpudiag.store.default_store_path)."""
    return store_path or str(default_store_path(os.environ))
