"""Staging the probe bundle for Slurm steps (gpudiag.slurm.staging): a copy is used only where no one else could
have written it, and holds exactly this bundle's bytes. Folders another user owns are made with chown, so those
tests need root."""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudiag.bundle import Bundle
from gpudiag.slurm.staging import UnsafeBundleFolder, bundle_folder_name, stage_bundle

requires_root = pytest.mark.skipif(os.geteuid() != 0, reason="making a file another user owns needs root (chown)")
NOBODY = pwd.getpwnam("nobody").pw_uid


@pytest.fixture
def bundle(tmp_path: Path) -> Bundle:
    source = tmp_path / "source"
    (source / "probes").mkdir(parents=True)
    (source / "probes" / "__main__.py").write_text("print('the real probes')\n")
    (source / "cuda_kernels").mkdir()
    (source / "cuda_kernels" / "k.cu").write_text("__global__ void k() {}\n")
    return Bundle(root=source, files=(Path("cuda_kernels/k.cu"), Path("probes/__main__.py")))


@pytest.fixture
def umask_002() -> Iterator[None]:
    """A umask that makes group-writable files (common where a team shares a group)."""
    old = os.umask(0o002)
    yield
    os.umask(old)


def _modes(folder: Path) -> dict[str, int]:
    return {str(path.relative_to(folder)): stat.S_IMODE(path.lstat().st_mode) for path in [folder, *folder.rglob("*")]}


def _planted(bundle: Bundle, folder: Path) -> Path:
    """A complete-looking copy of ``bundle`` in ``folder`` whose probes are someone else's."""
    final = folder / bundle_folder_name(bundle)
    (final / "probes").mkdir(parents=True)
    (final / "cuda_kernels").mkdir()
    (final / "probes" / "__main__.py").write_text("import os; os.system('touch /tmp/owned')\n")
    (final / "cuda_kernels" / "k.cu").write_bytes(bundle.contents[Path("cuda_kernels/k.cu")])
    (final / ".complete").write_text(bundle.content_hash + "\n")
    return final


def test_a_bundle_is_staged_once_whole_and_writable_by_no_one_else_whatever_the_umask(
        bundle: Bundle, tmp_path: Path, umask_002: None) -> None:
    folder = tmp_path / "made" / "here"
    final = stage_bundle(bundle, folder)
    assert final == folder / bundle_folder_name(bundle)
    assert (final / "probes" / "__main__.py").read_text() == "print('the real probes')\n"
    assert (final / ".complete").read_text() == bundle.content_hash + "\n"
    modes = _modes(final)
    assert modes == {".": 0o755, "probes": 0o755, "cuda_kernels": 0o755, "probes/__main__.py": 0o644,
                     "cuda_kernels/k.cu": 0o644, ".complete": 0o644}
    assert stat.S_IMODE(folder.stat().st_mode) == stat.S_IMODE((tmp_path / "made").stat().st_mode) == 0o755
    assert stage_bundle(bundle, folder) == final  # used again as it is
    assert sorted(path.name for path in folder.iterdir()) == [final.name]  # no staging folder left behind


@requires_root
def test_a_bundle_folder_another_user_made_is_refused_never_used(bundle: Bundle, tmp_path: Path) -> None:
    final = _planted(bundle, tmp_path / "bundles")
    os.chown(final, NOBODY, -1)
    with pytest.raises(UnsafeBundleFolder) as refused:
        stage_bundle(bundle, tmp_path / "bundles")
    message = str(refused.value)
    assert f"{final} is owned by nobody (uid {NOBODY}), not by you" in message
    assert f"remove {final}" in message and "--slurm-bundle-dir" in message and "\n" not in message
    assert (final / "probes" / "__main__.py").read_text().startswith("import os")  # refused, never replaced


@pytest.mark.parametrize("where", [".", "probes", "probes/__main__.py"])
def test_a_bundle_copy_writable_by_others_is_refused(bundle: Bundle, tmp_path: Path, where: str) -> None:
    final = stage_bundle(bundle, tmp_path / "bundles")
    (final / where).chmod(0o777 if (final / where).is_dir() else 0o666)
    with pytest.raises(UnsafeBundleFolder, match=r"is writable by its group and everyone \(mode 0(777|666)\)"):
        stage_bundle(bundle, tmp_path / "bundles")


@requires_root
def test_a_file_another_user_owns_inside_our_copy_is_refused(bundle: Bundle, tmp_path: Path) -> None:
    final = stage_bundle(bundle, tmp_path / "bundles")
    (final / "probes" / "__pycache__").mkdir()
    planted = final / "probes" / "__pycache__" / "__main__.cpython-311.pyc"
    planted.write_bytes(b"not ours")
    os.chown(planted, NOBODY, -1)
    with pytest.raises(UnsafeBundleFolder, match="__main__.cpython-311.pyc is owned by nobody"):
        stage_bundle(bundle, tmp_path / "bundles")


def test_a_link_or_other_bytes_in_our_copy_are_refused(bundle: Bundle, tmp_path: Path) -> None:
    final = stage_bundle(bundle, tmp_path / "bundles")
    (final / "probes" / "__main__.py").write_text("print('edited')\n")
    with pytest.raises(UnsafeBundleFolder, match=r"probes/__main__.py is not this gpudiag's"):
        stage_bundle(bundle, tmp_path / "bundles")
    (final / "probes" / "__main__.py").unlink()
    (final / "probes" / "__main__.py").symlink_to(bundle.root / "probes" / "__main__.py")
    with pytest.raises(UnsafeBundleFolder, match="is a symbolic link"):
        stage_bundle(bundle, tmp_path / "bundles")


def test_an_incomplete_copy_is_refused(bundle: Bundle, tmp_path: Path) -> None:
    final = tmp_path / "bundles" / bundle_folder_name(bundle)
    final.mkdir(parents=True)
    with pytest.raises(UnsafeBundleFolder, match=r".complete cannot be read"):
        stage_bundle(bundle, tmp_path / "bundles")


@requires_root
def test_a_staging_folder_not_ours_alone_is_refused(bundle: Bundle, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafeBundleFolder) as refused:
        stage_bundle(bundle, shared)
    assert f"the bundle staging folder {shared}: {shared} is writable by its group and everyone" in str(refused.value)
    assert "--slurm-bundle-dir" in str(refused.value)
    assert list(shared.iterdir()) == []  # nothing staged there
    shared.chmod(0o755)
    os.chown(shared, NOBODY, -1)
    with pytest.raises(UnsafeBundleFolder, match="is owned by nobody"):
        stage_bundle(bundle, shared)


def test_a_folder_above_that_others_may_write_is_refused_unless_sticky(bundle: Bundle, tmp_path: Path) -> None:
    above = tmp_path / "scratch"
    above.mkdir()
    above.chmod(0o777)
    with pytest.raises(UnsafeBundleFolder, match=rf"{above} above it is writable by its group and everyone "
                                                 r"without the sticky bit"):
        stage_bundle(bundle, above / "mine")
    above.chmod(0o1777)  # as /tmp: no one may rename what is ours there
    assert stage_bundle(bundle, above / "mine").is_dir()
