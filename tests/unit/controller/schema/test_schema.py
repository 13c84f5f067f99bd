"""The boundary schema (gpudiag.schema): text cleaned, fields typed and bounded, each record
checked against its probe's table, strict JSON out — and the schema covers what the bundle prints."""

from __future__ import annotations

import json
import math

import pytest

from gpudiag.errors import ProbeOutputError
from gpudiag.records import read_probe_output
from gpudiag.schema.fields import MAX_DEPTH, FieldError, Json, ListOf, Number, Shape, Text
from gpudiag.schema.jsonout import dumps, finite
from gpudiag.schema.recordcheck import check_record
from gpudiag.schema.tables import FACTS, METRICS
from gpudiag.schema.text import ELLIPSIS, clean_text, is_clean, one_line

HOSTILE = "\x1b[2J\x1b]0;owned\x07\x1b[31mred\x1b[0m \u202egnp.exe\u2066x\u2069 a\tb\r\nFAKE\x00\x9b2Jc\ud800"


def record(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {"probe": "gemm", "device": "cuda:0", "gpu_uuid": "GPU-1", "metric": "tflops",
                               "value": 700.0, "unit": "TFLOP/s", "samples": 20, "cv": 0.01, "status": "ok",
                               "reason": None, "params": {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192},
                               "details": {"sm_clock_mhz_median": 1980}}
    base.update(fields)
    return base


def line(**fields: object) -> str:
    return json.dumps(record(**fields), allow_nan=True)


# ------------------------------------------------------------------------------------- text


def test_control_characters_escape_sequences_and_bidi_overrides_are_taken_out():
    cleaned = clean_text(HOSTILE)
    assert cleaned == "red gnp.exex a\tb  FAKEc"
    assert is_clean(cleaned) and not is_clean(HOSTILE)
    assert all(ch == "\t" or ch.isprintable() for ch in cleaned)


def test_printable_text_ascii_or_not_is_kept_and_long_text_is_cut():
    text = "Intel(R) Xeon(R) Platinum 8480C · 2 × H100 — ok"
    assert clean_text(text) == text
    assert clean_text("x" * 50, 10) == "x" * 9 + ELLIPSIS
    assert one_line("  first\nsecond\x1b]0;t\x07  ") == "first second"


# ------------------------------------------------------------------------------------- kinds


def test_a_wrong_type_and_a_value_out_of_range_are_told_apart():
    count = Number(whole=True, high=64)
    with pytest.raises(FieldError) as wrong:
        count.check("two", "cpu_count")
    assert not wrong.value.out_of_range and "field 'cpu_count' must be an integer from 0 to 64" in str(wrong.value)
    for value in (-1, 65, 2**70):
        with pytest.raises(FieldError) as far:
            count.check(value, "n")
        assert far.value.out_of_range
    for value in (math.nan, math.inf, True, [1], 3.5):
        with pytest.raises(FieldError) as bad:
            count.check(value, "n")
        assert not bad.value.out_of_range


def test_a_nested_error_names_its_whole_path():
    shape = Shape({"links": ListOf(Shape({"state": Text()}))})
    expected = r"field 'details.links\[2\].state' must be a string or null, got an integer 3"
    with pytest.raises(FieldError, match=expected):
        shape.check({"links": [{"state": "up"}, {}, {"state": 3}]}, "details")


def test_any_json_is_cleaned_bounded_and_finite():
    checked = Json().check({"k\x1b[2J": ["\x1b]0;t\x07x", 1, 2.5, None, True]}, "details")
    assert checked == {"k": ["x", 1, 2.5, None, True]}
    deep: object = 1
    for _ in range(MAX_DEPTH + 2):
        deep = [deep]
    for value in (deep, [1.0, math.inf], {"a": [math.nan]}, [2**80]):
        with pytest.raises(FieldError):
            Json().check(value, "details")


# ------------------------------------------------------------------------------------- records


def test_a_well_formed_record_passes_unchanged():
    checked = check_record(record(), "node001 line 1")
    assert checked["value"] == 700.0 and checked["params"]["m"] == 8192 and checked["status"] == "ok"


@pytest.mark.parametrize(("fields", "message"), [
    ({"details": {"sm_clock_mhz_median": "fast"}}, "field 'details.sm_clock_mhz_median' must be a number"),
    ({"params": {"dtype": "bf16", "m": [8192]}}, "field 'params.m' must be an integer"),
    ({"params": {"extra": {"a": 1}}}, "field 'params.extra' must be a string, a number"),
    ({"details": ["not", "a", "mapping"]}, "field 'details' must be an object"),
    ({"metric": "tflops2"}, "field 'metric' must be a metric of gemm"),
    ({"probe": "rootkit"}, "field 'probe' must be one of"),
    ({"device": "cuda:0\x1b[2J"}, "field 'device' must be a name"),
    ({"status": "skipped", "value": 3.0, "reason": "x"}, "field 'value' must be null"),
])
def test_a_record_of_the_wrong_type_is_the_hosts_probe_error_naming_host_line_and_field(fields, message):
    text = "\n".join([line(), line(**fields)])
    with pytest.raises(ProbeOutputError, match=message) as error:
        read_probe_output(text, "node007")
    assert str(error.value).startswith("node007 line 2: ")


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_anywhere_are_refused(token):
    text = line().replace('"sm_clock_mhz_median": 1980', f'"sm_clock_mhz_median": {token}')
    with pytest.raises(ProbeOutputError, match=f"node001 line 1: {token} is no JSON number"):
        read_probe_output(text, "node001")


@pytest.mark.parametrize(("fields", "why"), [
    ({"value": -5.0}, "value -5 TFLOP/s is outside what any GPU or host can measure"),
    ({"value": 1e308}, "value 1e+308 TFLOP/s is outside"),
    ({"value": 10**18}, "value 1e+18 TFLOP/s is outside"),
    ({"value": 2**70}, "field 'value' must be a finite number or null, got an integer 1180591620717411303424"),
    ({"value": None}, "an ok record without a value measured nothing"),
    ({"cv": -0.5}, "field 'cv' must be a number from 0"),
    ({"details": {"pcie_width_max": 1e308}}, "field 'details.pcie_width_max' must be a number from 0 to 1024"),
    ({"details": {"nvml_samples": -1}}, "field 'details.nvml_samples' must be an integer from 0"),
])
def test_a_value_out_of_range_is_an_error_record_in_its_place(fields, why):
    [result] = read_probe_output(line(**fields), "node001").results
    assert (result.probe, result.device, result.metric, result.status, result.value) == (
        "gemm", "cuda:0", "tflops", "error", None)
    assert result.reason.startswith("node001 line 1: gemm.tflops: ") and why in result.reason


def test_every_string_of_a_record_is_cleaned_and_bounded():
    [result] = read_probe_output(line(status="error", value=None, reason=HOSTILE + "r" * 5000,
                                      details={"note": HOSTILE, HOSTILE: 1}), "node001").results
    assert "\x1b" not in result.reason and len(result.reason) == 2000
    assert all(is_clean(text) for text in (*result.details, *map(str, result.details.values())))


def test_the_facts_record_is_typed_field_by_field():
    facts = {"hostname": "n1", "cpu_count": 64, "gpu_count": 8, "gpu_model": "NVIDIA H100 80GB HBM3"}
    ok = json.dumps({"probe": "facts", "device": "host", "metric": "gpu_count", "value": 8, "status": "ok",
                     "details": facts})
    assert read_probe_output(ok, "n1").results[0].details["cpu_count"] == 64
    bad = ok.replace('"cpu_count": 64', '"cpu_count": "two"')
    with pytest.raises(ProbeOutputError, match="field 'details.cpu_count' must be an integer from 1"):
        read_probe_output(bad, "n1")
    assert set(FACTS.fields) >= {"gpu_model", "gpu_count", "nvml_gpu_count", "pci_gpu_count", "driver_version",
                                 "cuda_version", "torch_version", "cpu_count", "cpu_count_usable",
                                 "load_average_1m", "memory_total_mib", "memory_available_mib"}


# ------------------------------------------------------------------------- the bundle's own output


def test_the_schema_lists_every_metric_the_probes_print():
    from probes import gemm, hostfacts, membw, p2p, pcie, smclock, telemetry, xid
    from probes.net import common as net

    printed = {"facts": {hostfacts.METRIC},
               "telemetry": {name for name, _ in telemetry.METRICS} | {"identity", "nvml", telemetry.nicports.METRIC},
               "xid": {xid.METRIC, xid.EVENT_METRIC, xid.RECOVERY_METRIC}, "gemm": {gemm.METRIC},
               "membw": {membw.METRIC}, "p2p": {p2p.METRIC}, "pcie": {pcie.METRIC},
               "smclock": {smclock.METRIC_CLOCK, smclock.METRIC_FMA_RATIO}, "net": {net.METRIC}}
    assert {probe: set(metrics) for probe, metrics in METRICS.items()} == printed


def test_the_real_bundle_on_this_machine_passes_its_schema(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[4]
    ran = subprocess.run([sys.executable, "-m", "probes", "--duration", "0.1"], cwd=root, capture_output=True,
                         text=True, timeout=300, check=False)
    output = read_probe_output(ran.stdout, "localhost")
    assert {r.probe for r in output.results} >= {"facts", "gemm", "membw"}
    assert [json.loads(text) for text in ran.stdout.splitlines()] == [r.to_dict() for r in output.results]


# ------------------------------------------------------------------------------------- JSON out


def test_strict_json_writes_a_non_finite_number_as_null():
    assert dumps({"a": [1.0, math.nan], "b": {"c": math.inf}}) == '{"a": [1.0, null], "b": {"c": null}}'
    assert finite((1.0, -math.inf)) == [1.0, None]
    assert dumps({"a": 1.5}, indent=1) == json.dumps({"a": 1.5}, indent=1)


@pytest.mark.parametrize(("text", "shown"), [
    ("a\u3164b\u115fc\u1160d\uffa0e", "abcde"),  # Hangul fillers draw as nothing
    ("x\u2800y\u034fz\ufe0fw\u00adv", "xyzwv"),  # blank Braille, grapheme joiner, variation selector, soft hyphen
    ("H100\u00a0GPU\u3000ok\u2009x", "H100 GPU ok x"),  # other spaces are a plain space
    ("node\u0435017", "node\\u0435017"),  # a Cyrillic е among Latin letters passes for an e: escaped
    ("\uff4e\uff4f\uff44\uff45 \U0001d427ode", "\\uff4e\\uff4f\\uff44\\uff45 \\U0001d427ode"),  # Latin in disguise
    ("Привет, мир", "Привет, мир"),  # a word in one script is kept
    ("périphérique e\u0301", "périphérique e\u0301"),  # accents, composed or not, are kept
])
def test_text_beyond_ascii_is_kept_only_where_it_is_visible_and_not_a_latin_look_alike(text: str, shown: str):
    assert clean_text(text) == shown
    assert is_clean(shown) and (text == shown or not is_clean(text))
