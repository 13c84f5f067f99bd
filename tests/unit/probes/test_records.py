import io
import json
import math

import pytest

from probes.records import Record, coefficient_of_variation, failed, measured, skipped, write_records


def test_measured_takes_the_median_and_the_cv_of_its_samples():
    record = measured("gemm", "cuda:0", "tflops", "TFLOP/s", [700.0, 740.0, 720.0, 760.0])
    assert record.value == 730.0
    assert record.samples == 4
    mean = 730.0
    expected_cv = math.sqrt(sum((v - mean) ** 2 for v in [700, 740, 720, 760]) / 4) / mean
    assert record.cv == pytest.approx(expected_cv)


def test_cv_of_identical_or_single_samples_is_zero():
    assert coefficient_of_variation([5.0, 5.0, 5.0]) == 0.0
    assert coefficient_of_variation([5.0]) == 0.0


def test_a_record_that_is_not_ok_carries_no_value_and_says_why():
    with pytest.raises(ValueError, match="no value"):
        Record("gemm", "cuda:0", "tflops", 1.0, "TFLOP/s", status="error", reason="boom")
    with pytest.raises(ValueError, match="reason"):
        Record("gemm", "cuda:0", "tflops", None, None, status="skipped")
    with pytest.raises(ValueError, match="status"):
        Record("gemm", "cuda:0", "tflops", None, None, status="passed", reason="x")


def test_records_are_written_one_json_line_each_with_the_contract_fields():
    stream = io.StringIO()
    write_records([measured("membw", "cpu", "bandwidth", "GB/s", [10.0, 12.0], params={"buffer_mib": 256}),
                   skipped("p2p", "host", "bandwidth", "needs at least 2 GPUs"),
                   failed("gemm", "cuda:1", "tflops", "out of GPU memory")], stream)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    first, second, third = (json.loads(line) for line in lines)
    assert set(first) >= {"probe", "device", "gpu_uuid", "metric", "value", "unit", "samples", "cv",
                          "status", "reason"}
    assert first["value"] == 11.0 and first["params"] == {"buffer_mib": 256}
    assert second["status"] == "skipped" and second["value"] is None and "2 GPUs" in second["reason"]
    assert third["status"] == "error"


def test_a_non_finite_value_is_written_as_null_not_as_invalid_json():
    stream = io.StringIO()
    write_records([Record("gemm", "cpu", "tflops", float("inf"), "TFLOP/s", cv=float("nan"))], stream)
    data = json.loads(stream.getvalue())
    assert data["value"] is None and data["cv"] is None
