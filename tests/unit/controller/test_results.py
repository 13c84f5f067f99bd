"""Reading the bundle's stdout back: records kept, stray lines skipped and reported, broken records errors."""

import json
import sys
from pathlib import Path

import pytest

from gpudiag.bundle import locate_bundle
from gpudiag.errors import ProbeOutputError
from gpudiag.records import STRAY_LINE_CHARS, STRAY_LINES_KEPT, parse_probe_output, read_probe_output
from gpudiag.run.hostprobe import ProbeOptions, probe_host
from gpudiag.transport.local import LocalSession
from probes.records import measured, skipped

# What libraries print on stdout of a Python that imports torch: a site hook's print(), a warning
# routed to stdout (warnings.showwarning replaced by logging), a progress line.
TORCH_WARNING = ("/usr/lib/python3/dist-packages/torch/_subclasses/functional_tensor.py:368: UserWarning: "
                 "Failed to initialize NumPy: No module named 'numpy' (Triggered internally at "
                 "/__w/pytorch/pytorch/torch/csrc/utils/tensor_numpy.cpp:84.)")
SITE_HOOK = "sitecustomize: proxy settings loaded from /etc/profile.d/proxy.sh"


def _line(record) -> str:
    return json.dumps(record.to_dict())


GEMM = _line(measured("gemm", "cuda:0", "tflops", "TFLOP/s", [700.0, 720.0], gpu_uuid="GPU-1",
                      params={"dtype": "bf16"}))
P2P = _line(skipped("p2p", "host", "bandwidth", "needs at least 2 GPUs"))


def test_the_controller_reads_back_what_the_bundle_writes():
    text = "\n".join([GEMM, "", P2P]) + "\n"
    results = parse_probe_output(text, "node001")
    assert [r.probe for r in results] == ["gemm", "p2p"]
    assert results[0].value == 710.0 and results[0].gpu_uuid == "GPU-1" and results[0].ok
    assert results[0].params == {"dtype": "bf16"}
    assert results[1].status == "skipped" and not results[1].ok
    assert read_probe_output(text, "node001").stray is None


def test_stray_lines_are_skipped_and_reported_with_the_records_kept():
    text = "\n".join([SITE_HOOK, GEMM, TORCH_WARNING, "  cpu = _conversion_method_template()", P2P, ""])
    output = read_probe_output(text, "node007")
    assert [r.probe for r in output.results] == ["gemm", "p2p"]
    assert output.results[0].value == 710.0
    assert output.stray is not None
    assert (output.stray.count, output.stray.first_at) == (3, "node007 line 1")
    assert output.stray.lines == (SITE_HOOK, TORCH_WARNING[:STRAY_LINE_CHARS], "cpu = _conversion_method_template()")
    assert output.stray.to_dict() == {"count": 3, "lines": list(output.stray.lines)}
    assert output.stray.describe() == f"3 lines that are not records, the first: {SITE_HOOK!r}"
    assert [r.probe for r in parse_probe_output(text, "node007")] == ["gemm", "p2p"]


def test_a_print_that_lost_its_newline_is_split_from_the_record_it_ran_into():
    text = f"Loading weights... done{GEMM}\n{P2P}   [progress 100%]\n"
    output = read_probe_output(text, "node003")
    assert [r.probe for r in output.results] == ["gemm", "p2p"]
    assert output.stray is not None and output.stray.lines == ("Loading weights... done", "[progress 100%]")


def test_many_stray_lines_are_counted_and_only_the_first_few_kept():
    noise = [f"step {n}: {'x' * 300}" for n in range(12)]
    output = read_probe_output("\n".join([*noise, P2P]), "node001")
    assert output.stray is not None and output.stray.count == 12
    assert len(output.stray.lines) == STRAY_LINES_KEPT
    assert all(len(line) == STRAY_LINE_CHARS for line in output.stray.lines)


@pytest.mark.parametrize("line", ["Segmentation fault (core dumped)", "[1, 2]", "{'probe': 'gemm'}",
                                  '{"level": "warning", "msg": "NCCL_IB_HCA unset"}'])
def test_output_with_no_record_at_all_is_still_an_error(line):
    assert read_probe_output(line + "\n", "node007").results == ()
    with pytest.raises(ProbeOutputError, match=r"^node007 line 1: not a JSON record: .*\(no record\)$"):
        parse_probe_output(line + "\n", "node007")


def test_a_record_that_breaks_off_is_an_error_record_for_it_alone():
    cut = GEMM[:70]
    output = read_probe_output("\n".join([P2P, cut, GEMM]), "node005")
    assert [(r.probe, r.status) for r in output.results] == [("p2p", "skipped"), ("gemm", "error"), ("gemm", "ok")]
    broken = output.results[1]
    assert (broken.device, broken.value) == ("cuda:0", None)
    assert broken.reason is not None and broken.reason.startswith("node005 line 2: a record that breaks off: ")
    assert output.stray is None


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"probe": "gemm", "device": "cpu", "metric": "tflops", "value": "fast", "status": "ok"}',
         "field 'value' must be a finite number"),
        ('{"probe": "gemm", "device": "cpu", "metric": "tflops", "value": null, "status": "error"}',
         "must give a reason"),
        ('{"probe": "gemm", "device": "cpu", "metric": "tflops", "value": 1, "status": "great"}',
         "field 'status' must be one of"),
        ('{"probe": "gemm", "metric": "tflops", "value": 1, "status": "ok"}', "field 'device'"),
        ('{"probe": "", "device": "cpu", "metric": "tflops", "value": 1, "status": "ok"}', "field 'probe'"),
    ],
)
def test_a_complete_record_that_breaks_the_schema_is_rejected_with_its_line(line, message):
    with pytest.raises(ProbeOutputError, match=message) as error:
        parse_probe_output(P2P + "\n" + line + "\n", "node007")
    assert str(error.value).startswith("node007 line 2")


def _python_that_prints_first(tmp_path: Path, line: str) -> str:
    """A node Python whose site hook prints ``line`` on stdout before the bundle runs."""
    wrapper = tmp_path / "python"
    wrapper.write_text(f"#!/bin/sh\necho '{line}'\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def test_a_node_whose_python_prints_keeps_its_records_and_reports_the_line(tmp_path: Path):
    options = ProbeOptions(names=("facts",), python=_python_that_prints_first(tmp_path, SITE_HOOK), deadline_s=60)
    node = probe_host(LocalSession(locate_bundle().root), options, source="localhost")
    assert node.complete and [r.probe for r in node.results] == ["facts"]
    assert node.stray is not None and (node.stray.count, node.stray.lines) == (1, (SITE_HOOK,))


def test_a_node_that_prints_only_garbage_is_a_probe_output_error(tmp_path: Path):
    garbage = tmp_path / "python"
    garbage.write_text("#!/bin/sh\necho 'Illegal instruction (core dumped)'\nexit 0\n")
    garbage.chmod(0o755)
    with pytest.raises(ProbeOutputError, match=r"^localhost line 1: not a JSON record: 'Illegal instruction"):
        probe_host(LocalSession(locate_bundle().root), ProbeOptions(python=str(garbage)), source="localhost")
