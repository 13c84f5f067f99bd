import pytest

from probes import gemm, membw
from probes.sizing import MIB, MemoryBudget, MemoryRefusal, choose_size

GIB = 1024 * MIB


def test_usable_memory_is_free_less_headroom_then_capped():
    budget = MemoryBudget.from_mib_cap(free_bytes=10 * GIB, max_gpu_mem_mib=None)
    assert budget.usable_bytes == 10 * GIB - 512 * MIB  # 5 % of 10 GiB is above the 256 MiB floor
    capped = MemoryBudget.from_mib_cap(free_bytes=10 * GIB, max_gpu_mem_mib=2048)
    assert capped.usable_bytes == 2 * GIB
    nearly_full = MemoryBudget.from_mib_cap(free_bytes=200 * MIB, max_gpu_mem_mib=None)
    assert nearly_full.usable_bytes == 0


def test_gemm_takes_the_largest_size_that_fits_a_paused_job_s_leftovers():
    # A paused job holds all but 2 GiB of an 80 GiB GPU: 8192^2 bf16 (3 x 128 MiB + workspace) fits.
    roomy = MemoryBudget.from_mib_cap(free_bytes=2 * GIB, max_gpu_mem_mib=None)
    assert choose_size(gemm.GPU_SIZES, lambda s: gemm.gpu_bytes_needed(s, "bf16"), roomy, "gemm") == 8192
    # A 100 MiB cap leaves room only for 2048^2 (3 x 8 MiB + 64 MiB workspace = 88 MiB).
    tight = MemoryBudget.from_mib_cap(free_bytes=2 * GIB, max_gpu_mem_mib=100)
    assert choose_size(gemm.GPU_SIZES, lambda s: gemm.gpu_bytes_needed(s, "bf16"), tight, "gemm") == 2048
    # fp32 needs twice the bytes: 6144^2 x 4 x 3 = 432 MiB + 64 MiB fits 600 MiB, 8192 does not.
    fp32 = MemoryBudget.from_mib_cap(free_bytes=2 * GIB, max_gpu_mem_mib=600)
    assert choose_size(gemm.GPU_SIZES, lambda s: gemm.gpu_bytes_needed(s, "fp32"), fp32, "gemm") == 6144


def test_a_probe_refuses_with_the_figures_rather_than_allocate_past_the_cap():
    budget = MemoryBudget.from_mib_cap(free_bytes=40 * GIB, max_gpu_mem_mib=50)
    with pytest.raises(MemoryRefusal) as refusal:
        choose_size(gemm.GPU_SIZES, lambda s: gemm.gpu_bytes_needed(s, "bf16"), budget, "gemm")
    message = str(refusal.value)
    assert "gemm needs at least 88 MiB" in message
    assert "50 MiB usable" in message and "--max-gpu-mem" in message


def test_membw_buffers_shrink_with_free_memory_and_refuse_below_the_smallest():
    def pick(free_mib: int) -> int:
        budget = MemoryBudget.from_mib_cap(free_bytes=free_mib * MIB, max_gpu_mem_mib=None)
        return choose_size(membw.GPU_BUFFER_MIB, membw.gpu_bytes_needed, budget, "membw")

    assert pick(80 * 1024) == 1024
    assert pick(1024) == 256  # 1024 - 256 headroom = 768 usable: two 256 MiB buffers
    with pytest.raises(MemoryRefusal, match="membw needs at least 256 MiB"):
        pick(400)
