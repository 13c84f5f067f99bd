"""The telemetry probe as the runner calls it, with the real pynvml of this machine."""

from __future__ import annotations

from probes import telemetry
from probes.context import ProbeContext
from probes.nvml import NvmlUnavailable, open_nvml
from probes.records import OK, SKIPPED


def _nvml_works() -> bool:
    try:
        with open_nvml():
            return True
    except NvmlUnavailable:
        return False


def test_real_run_says_why_when_there_is_no_nvml():
    records = list(telemetry.run(ProbeContext()))
    if _nvml_works():  # a machine with a driver: every GPU identifies itself
        assert [record.metric for record in records].count("identity") >= 1
        assert all(record.gpu_uuid for record in records if record.status == OK)
        return
    nvml_and_smi = [record for record in records if record.device == "host" and record.metric == "nvml"]
    if nvml_and_smi:  # neither NVML nor a working nvidia-smi (this CI machine)
        assert len(records) == 1
        record = records[0]
        assert (record.probe, record.status, record.value) == ("telemetry", SKIPPED, None)
        assert "NVML" in record.reason
        assert "nvidia-smi" in record.reason


def test_every_record_serialises_to_the_contract_shape():
    for record in telemetry.run(ProbeContext()):
        assert set(record.to_dict()) == {"probe", "device", "gpu_uuid", "metric", "value", "unit", "samples", "cv",
                                         "status", "reason", "params", "details"}
        assert record.probe == "telemetry"
