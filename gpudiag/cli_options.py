"""What the commands share: the ``--store`` option, where the store is by default, the SSH and
judging options, and the hint under a table that left columns out."""

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


def ssh_options(function: click.decorators.FC) -> click.decorators.FC:
    """How commands that reach nodes over SSH take its settings (sweep, preflight, triage):
    parameters ssh_config, identities, user, known_hosts, accept_new_host_keys, connect_timeout."""
    decorators = [
        click.option("--ssh-config", default=None, metavar="FILE", help="OpenSSH client configuration to use."),
        click.option("-i", "--identity", "identities", multiple=True, metavar="FILE", help="Private key (repeatable)."),
        click.option("-l", "--user", default=None, help="Remote user, where the hosts and the SSH config name none."),
        click.option("--known-hosts", default=None, metavar="FILE",
                     help="known_hosts file to check host keys against."),
        click.option("--accept-new-host-keys", is_flag=True,
                     help="Trust and record host keys seen for the first time (changed keys are always refused)."),
        click.option("--connect-timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
                     metavar="S", help="TCP connect timeout, where the SSH config sets none."),
    ]
    for decorator in reversed(decorators):
        function = decorator(function)
    return function


def judging_options(function: click.decorators.FC) -> click.decorators.FC:
    """What commands that judge one job's or one node's figures take (preflight, triage): the
    stored baseline, the thresholds file and whether suspects are re-tested (parameters
    baseline_name, thresholds_path, no_retest)."""
    decorators = [
        click.option("--baseline", "baseline_name", default=None, metavar="NAME",
                     help="Stored baseline to judge against (default: 'default', if stored)."),
        click.option("--thresholds", "thresholds_path", default=None, metavar="FILE",
                     help="Detection thresholds overriding the shipped defaults (JSON with units)."),
        click.option("--no-retest", is_flag=True,
                     help="Report suspects without re-testing them: each stays unconfirmed and unchecked (exit 3)."),
    ]
    for decorator in reversed(decorators):
        function = decorator(function)
    return function


def store_location(store_path: str | None) -> str:
    """``--store``'s path, else the default store's (gpudiag.store.default_store_path)."""
    return store_path or str(default_store_path(os.environ))
