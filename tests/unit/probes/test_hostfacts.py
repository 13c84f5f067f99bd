from pathlib import Path
from types import SimpleNamespace

import pytest

from probes import hostfacts
from probes.context import ProbeContext
from probes.devices import CudaDevice


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


# ------------------------------------------------------------------------------ GPU counts


def _pci_device(root: Path, address: str, vendor: str, pci_class: str | None) -> None:
    device = root / "bus" / "pci" / "devices" / address
    device.mkdir(parents=True)
    (device / "vendor").write_text(vendor + "\n")
    if pci_class is not None:
        (device / "class").write_text(pci_class + "\n")


def test_pci_gpu_count_counts_nvidia_display_and_3d_controllers_only(tmp_path):
    _pci_device(tmp_path, "0000:18:00.0", "0x10de", "0x030200")  # H100 SXM: 3D controller
    _pci_device(tmp_path, "0000:2a:00.0", "0x10DE", "0x030200")  # upper-case hex still counts
    _pci_device(tmp_path, "0000:3a:00.0", "0x10de", "0x030000")  # a VGA-class NVIDIA GPU
    _pci_device(tmp_path, "0000:3a:00.1", "0x10de", "0x040300")  # its HDMI audio function
    _pci_device(tmp_path, "0000:05:00.0", "0x10de", "0x068000")  # an NVSwitch bridge
    _pci_device(tmp_path, "0000:1b:00.0", "0x15b3", "0x020700")  # a ConnectX NIC
    _pci_device(tmp_path, "0000:9a:00.0", "0x10de", None)  # no class file readable
    assert hostfacts.count_pci_gpus(tmp_path) == 3


def test_pci_gpu_count_is_none_without_sysfs(tmp_path):
    assert hostfacts.count_pci_gpus(tmp_path / "no-sys") is None
    (tmp_path / "bus" / "pci" / "devices").mkdir(parents=True)
    assert hostfacts.count_pci_gpus(tmp_path) == 0


class _FakeNvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class _FakePynvml:
    """Just enough of pynvml for counting: init (or its failure) and nvmlDeviceGetCount."""

    NVMLError = _FakeNvmlError
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_UNKNOWN = 999
    NVML_ERROR_GPU_IS_LOST = 15

    def __init__(self, count: int | None, init_error: int | None = None, lost: frozenset[int] = frozenset()) -> None:
        self.count = count
        self.init_error = init_error
        self.lost = lost
        self.open_sessions = 0

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise _FakeNvmlError(self.init_error)
        self.open_sessions += 1

    def nvmlShutdown(self) -> None:
        self.open_sessions -= 1

    def nvmlDeviceGetCount(self) -> int:
        if self.count is None:
            raise _FakeNvmlError(self.NVML_ERROR_UNKNOWN)
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index in self.lost:
            raise _FakeNvmlError(self.NVML_ERROR_GPU_IS_LOST)
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle:08d}-0000-0000-0000-000000000000"

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(busId=f"00000000:{0x18 + 0x10 * handle:02X}:00.0".encode())


def test_nvml_gpu_count_through_the_nvml_layer():
    fake = _FakePynvml(count=7)
    assert hostfacts.count_nvml_gpus(fake) == 7
    assert fake.open_sessions == 0  # NVML shut down again
    assert hostfacts.count_nvml_gpus(_FakePynvml(count=None)) is None
    assert hostfacts.count_nvml_gpus(_FakePynvml(count=8, init_error=9)) is None


def test_facts_carry_the_pci_and_nvml_gpu_counts(tmp_path):
    _pci_device(tmp_path, "0000:18:00.0", "0x10de", "0x030200")
    _pci_device(tmp_path, "0000:2a:00.0", "0x10de", "0x030200")
    (record,) = list(hostfacts.run(ProbeContext(), sysfs_root=tmp_path, nvml_module=_FakePynvml(count=1)))
    assert (record.details["pci_gpu_count"], record.details["nvml_gpu_count"]) == (2, 1)
    keys = list(record.details)
    assert keys.index("driver_version") < keys.index("pci_gpu_count") < keys.index("nvml_gpu_count") < keys.index(
        "torch_version")


# ------------------------------------------------------------------------------ which GPU is which


def _device(index: int, uuid: str | None, bus: str | None) -> CudaDevice:
    return CudaDevice(index=index, name="NVIDIA H100 80GB HBM3", gpu_uuid=uuid, total_memory_bytes=80 << 30,
                      pci_bus_id=bus, multiprocessor_count=132, compute_capability=(9, 0))


def test_after_a_lost_gpu_each_cuda_device_maps_to_its_nvml_index_uuid_and_bus_id():
    fake = _FakePynvml(count=8, lost=frozenset({3}))
    inventory = hostfacts.nvml_inventory(fake)
    assert inventory is not None and len(inventory) == 8 and inventory[3] == (None, None)
    # CUDA numbers the seven GPUs it can use 0..6: NVML's 4..7 moved down one.
    devices = [_device(cuda, inventory[nvml][0], None) for cuda, nvml in enumerate((0, 1, 2, 4, 5, 6, 7))]
    mapped = hostfacts.map_gpus(devices, inventory)
    assert [(m["cuda_index"], m["nvml_index"]) for m in mapped] == [(0, 0), (1, 1), (2, 2), (3, 4), (4, 5), (5, 6),
                                                                     (6, 7)]
    assert mapped[4]["gpu_uuid"] == inventory[5][0] and mapped[4]["pci_bus_id"] == inventory[5][1]


def test_a_device_without_a_uuid_is_found_by_its_bus_id_and_an_unknown_one_has_no_nvml_index():
    inventory = hostfacts.nvml_inventory(_FakePynvml(count=2))
    assert inventory is not None
    devices = [_device(0, None, inventory[1][1].lower()), _device(1, "GPU-elsewhere", "00000000:EE:00.0")]
    mapped = hostfacts.map_gpus(devices, inventory)
    assert (mapped[0]["nvml_index"], mapped[0]["gpu_uuid"]) == (1, inventory[1][0])
    assert mapped[1]["nvml_index"] is None and mapped[1]["gpu_uuid"] == "GPU-elsewhere"
    assert hostfacts.map_gpus(devices, None)[0]["nvml_index"] is None  # no NVML: nothing guessed


def _product_name(root: Path, raw: bytes) -> Path:
    folder = root / "class" / "dmi" / "id"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "product_name").write_bytes(raw)
    return root


def test_the_platform_is_the_dmi_product_name_cleaned_and_bounded(tmp_path):
    assert hostfacts.read_platform(_product_name(tmp_path, b"PowerEdge XE9680\n")) == "PowerEdge XE9680"
    assert hostfacts.read_platform(_product_name(tmp_path, b"  HGX\x1b[31m  H100\t4-GPU \n")) == "HGX [31m H100 4-GPU"
    assert len(hostfacts.read_platform(_product_name(tmp_path, b"X" * 100_000)) or "") == hostfacts.PLATFORM_CHARS
    assert hostfacts.read_platform(_product_name(tmp_path, b"To be filled by O.E.M.\n")) is None
    assert hostfacts.read_platform(tmp_path / "no-sys") is None


def test_facts_carry_the_platform_and_the_gpu_map(tmp_path):
    _pci_device(tmp_path, "0000:18:00.0", "0x10de", "0x030200")
    _product_name(tmp_path, b"Simulated HGX 4-GPU\n")
    (record,) = list(hostfacts.run(ProbeContext(), sysfs_root=tmp_path, nvml_module=_FakePynvml(count=1)))
    assert record.details["platform"] == "Simulated HGX 4-GPU"
    assert isinstance(record.details["gpus"], list)  # one entry per CUDA device torch sees here (none without a GPU)
