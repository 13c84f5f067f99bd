"""The bundle folder on a node over SSH is run from only when it is the remote user's alone: a
``~/.cache/gpudiag/bundle-<hash>`` that another user made, that anyone may write to, or that is a
symbolic link is refused, and its code never runs (real sshd hosts, gpudiag.transport.remotefolder)."""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from sshd_hosts import SshdFleet

from gpudiag.bundle import Bundle
from gpudiag.hosts import HostSpec
from gpudiag.transport.fleet import FleetConnector
from gpudiag.transport.ssh import BundleShipError, SshSettings
from gpudiag.transport.sshconfig import SshOptions, resolve_all

NOBODY = 65534


def _fake_bundle(tmp_path: Path, marker: Path) -> Bundle:
    """A bundle of our own content (a hash no other test shares) whose ``python -m probes`` writes
    ``marker``: proof that it ran."""
    root = tmp_path / "bundle"
    (root / "probes").mkdir(parents=True)
    (root / "cuda_kernels").mkdir()
    (root / "probes" / "__init__.py").write_text(f"# {uuid.uuid4().hex}\n")
    (root / "probes" / "__main__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (root / "cuda_kernels" / "none.cu").write_text("// no kernel\n")
    files = tuple(sorted(path.relative_to(root) for path in root.rglob("*") if path.is_file()))
    return Bundle(root=root, files=files)


def _plant(bundle: Bundle, marker: Path) -> Path:
    """What another user could leave under the bundle's predictable name: a complete-looking
    bundle whose probes write ``marker``."""
    folder = Path.home() / ".cache" / "gpudiag" / f"bundle-{bundle.content_hash[:16]}"
    (folder / "probes").mkdir(parents=True)
    (folder / "probes" / "__main__.py").write_text(f"open({str(marker)!r}, 'w').write('planted')\n")
    (folder / "probes" / "__init__.py").write_text("")
    (folder / ".complete").write_text(bundle.content_hash)
    return folder


def _make_world_writable(folder: Path) -> None:
    folder.chmod(0o777)


def _give_to_nobody(folder: Path) -> None:
    for path in (folder, *folder.rglob("*")):
        os.chown(path, NOBODY, NOBODY)


def _hide_behind_a_link(folder: Path) -> None:
    real = folder.with_name(folder.name + "-elsewhere")
    folder.rename(real)
    folder.symlink_to(real)


@pytest.mark.parametrize(("planting", "why"), [
    (_make_world_writable, "may be written by others (mode 0777)"),
    (_give_to_nobody, f"belongs to user id {NOBODY}, not to the remote user"),
    (_hide_behind_a_link, "is a symbolic link"),
], ids=["world-writable", "another-users", "symlink"])
def test_a_planted_bundle_folder_is_refused_and_never_run(make_sshd_fleet, tmp_path: Path,
                                                          planting: Callable[[Path], None], why: str):
    fleet: SshdFleet = make_sshd_fleet(1)
    (host,) = fleet.hosts
    marker = tmp_path / "ran"
    bundle = _fake_bundle(tmp_path, marker)
    folder = _plant(bundle, marker)
    planting(folder)
    known = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=known)
    options = SshOptions(config_file=str(config), known_hosts=str(known))
    spec = HostSpec(host.name)
    connector = FleetConnector(resolve_all([spec], options), options, SshSettings())
    session = connector.connect(spec)
    try:
        with pytest.raises(BundleShipError, match="will not run from there") as refused:
            session.prepare(bundle)
        assert why in str(refused.value) and str(folder) in str(refused.value)
        assert not marker.exists()
    finally:
        session.close()
        connector.close()
        for path in (folder, folder.with_name(folder.name + "-elsewhere")):
            if path.is_symlink():
                path.unlink()
            elif path.exists():
                shutil.rmtree(path)


def test_a_bundle_folder_of_our_own_is_used_and_runs(make_sshd_fleet, tmp_path: Path):
    fleet: SshdFleet = make_sshd_fleet(1)
    (host,) = fleet.hosts
    marker = tmp_path / "ran"
    bundle = _fake_bundle(tmp_path, marker)
    known = fleet.write_known_hosts(tmp_path / "known_hosts")
    config = fleet.write_ssh_config(tmp_path / "ssh_config", known_hosts_path=known)
    options = SshOptions(config_file=str(config), known_hosts=str(known))
    spec = HostSpec(host.name)
    connector = FleetConnector(resolve_all([spec], options), options, SshSettings())
    folder = Path.home() / ".cache" / "gpudiag" / f"bundle-{bundle.content_hash[:16]}"
    try:
        for _ in range(2):  # copied the first time, found (and checked) the second
            session = connector.connect(spec)
            try:
                session.prepare(bundle)
                assert session.run([sys.executable, "-m", "probes"], 30.0).exit_status == 0
            finally:
                session.close()
        assert marker.read_text() == "ran"
    finally:
        connector.close()
        shutil.rmtree(folder, ignore_errors=True)
