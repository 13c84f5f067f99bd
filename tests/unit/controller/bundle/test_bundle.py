import shutil
from pathlib import Path

from gpudiag.bundle import Bundle, locate_bundle
from gpudiag.links.remote import PairTestOptions
from gpudiag.run import hostprobe
from probes import runner
from probes.net import main as net_main


def test_the_bundle_holds_the_probes_and_the_kernel_sources():
    bundle = locate_bundle()
    names = {path.as_posix() for path in bundle.files}
    assert "probes/__main__.py" in names and "probes/gemm.py" in names
    assert "probes/catalog.json" in names  # the probe catalogue, which the bundle reads beside its modules
    assert any(name.startswith("cuda_kernels/") and name.endswith(".cu") for name in names)
    assert not any("__pycache__" in name for name in names)


def test_the_content_hash_changes_with_any_shipped_byte(tmp_path: Path):
    original = locate_bundle()
    for part in ("probes", "cuda_kernels"):
        shutil.copytree(original.root / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    copy = Bundle(root=tmp_path, files=original.files)
    assert copy.content_hash == original.content_hash
    target = tmp_path / "probes" / "gemm.py"
    target.write_text(target.read_text() + "\n# changed\n")
    changed = Bundle(root=tmp_path, files=original.files)  # a new bundle reads the files anew
    assert changed.content_hash != original.content_hash


def test_bundle_command_passes_the_options_through():
    options = hostprobe.ProbeOptions(names=("gemm",), duration_s=30, max_gpu_mem_mib=2048, dtype="fp16",
                                     sequential=True, deadline_s=120, python="/opt/py/bin/python3", pause=True)
    argv = options.bundle_argv()
    assert argv[:4] == ["/opt/py/bin/python3", "-m", "probes", "gemm"]
    arguments = runner.parse_arguments(argv[3:])
    assert arguments.names == ["gemm"] and arguments.duration == 30 and arguments.max_gpu_mem == 2048
    assert arguments.dtype == "fp16" and arguments.sequential and arguments.deadline == 120 and arguments.pause
    assert options.timeout_s > 120


def test_pair_commands_in_host_memory_are_read_so_by_the_nodes():
    options = PairTestOptions(backend="auto", host_memory=True)
    _, server = net_main.parse_arguments(options.server_argv()[3:])
    _, client = net_main.parse_arguments(options.client_argv("perftest", "10.0.0.2", 4000)[3:])
    assert server.host_memory and client.host_memory and not (server.gpu_direct or client.gpu_direct)
    assert "--host-memory" not in PairTestOptions().server_argv()
