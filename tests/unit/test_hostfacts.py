from pathlib import Path

import pytest

from probes import hostfacts
from probes.context import ProbeContext


def test_cpu_model_from_x86_and_arm_cpuinfo():
    x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core Processor\n"
    assert hostfacts.parse_cpu_model(x86) == "AMD EPYC 9654 96-Core Processor"
    arm = "processor\t: 0\nBogoMIPS\t: 2000.00\nCPU part\t: 0xd4f\n\nModel\t\t: NVIDIA Grace\n"
    assert hostfacts.parse_cpu_model(arm) == "NVIDIA Grace"
    assert hostfacts.parse_cpu_model("") is None


def test_meminfo_fields_in_mib():
    meminfo = "MemTotal:       2113502620 kB\nMemFree:        1939152200 kB\nMemAvailable:   2050381712 kB\n"
    assert hostfacts.parse_meminfo_mib(meminfo, "MemTotal") == 2113502620 // 1024
    assert hostfacts.parse_meminfo_mib(meminfo, "MemAvailable") == 2050381712 // 1024
    assert hostfacts.parse_meminfo_mib(meminfo, "SwapTotal") is None


def test_driver_version_from_the_kernel_module_banner():
    banner = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n"
              "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)\n")
    assert hostfacts.parse_driver_version(banner) == "535.183.01"
    open_module = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build\n"
    assert hostfacts.parse_driver_version(open_module) == "570.133.20"
    assert hostfacts.parse_driver_version("") is None


def test_os_release_pretty_name():
    assert hostfacts.parse_os_release('NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n') == "Ubuntu 22.04.4 LTS"


@pytest.mark.skipif(not Path("/proc/meminfo").exists(), reason="needs Linux /proc")
def test_facts_of_this_machine_are_complete():
    (record,) = list(hostfacts.run(ProbeContext()))
    facts = record.details
    assert record.status == "ok" and record.metric == "gpu_count" and record.value == facts["gpu_count"]
    assert facts["cpu_count"] >= 1 and facts["memory_total_mib"] > 0 and facts["hostname"]
    assert facts["python_version"].count(".") == 2
    assert facts["torch_version"]  # the test environment has torch
