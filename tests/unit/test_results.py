import json

import pytest

from gpudiag.errors import ProbeOutputError
from gpudiag.results import parse_probe_output
from probes.records import measured, skipped


def _line(record) -> str:
    return json.dumps(record.to_dict())


def test_the_controller_reads_back_what_the_bundle_writes():
    text = "\n".join([_line(measured("gemm", "cuda:0", "tflops", "TFLOP/s", [700.0, 720.0],
                                     gpu_uuid="GPU-1", params={"dtype": "bf16"})),
                      "",
                      _line(skipped("p2p", "host", "bandwidth", "needs at least 2 GPUs"))]) + "\n"
    results = parse_probe_output(text, "node001")
    assert [r.probe for r in results] == ["gemm", "p2p"]
    assert results[0].value == 710.0 and results[0].gpu_uuid == "GPU-1" and results[0].ok
    assert results[0].params == {"dtype": "bf16"}
    assert results[1].status == "skipped" and not results[1].ok


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("Segmentation fault (core dumped)", "line 2: not a JSON record"),
        ("[1, 2]", "line 2: expected a JSON object"),
        ('{"probe": "gemm", "device": "cpu", "metric": "tflops", "value": "fast", "status": "ok"}',
         "field 'value' must be a finite number"),
        ('{"probe": "gemm", "device": "cpu", "metric": "tflops", "value": null, "status": "error"}',
         "must give a reason"),
        ('{"probe": "gemm", "device": "cpu", "metric": "tflops", "value": 1, "status": "great"}',
         "field 'status' must be one of"),
        ('{"device": "cpu", "metric": "tflops", "value": 1, "status": "ok"}', "field 'probe'"),
    ],
)
def test_anything_that_is_not_a_record_is_rejected_with_its_line(line, message):
    good = _line(skipped("p2p", "host", "bandwidth", "one GPU"))
    with pytest.raises(ProbeOutputError, match=message) as error:
        parse_probe_output(good + "\n" + line + "\n", "node007")
    assert str(error.value).startswith("node007 line 2")
