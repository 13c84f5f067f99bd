import pytest

from probes.gemm import GemmShape, cpu_size_for, gpu_bytes_needed
from probes.rates import copy_bandwidth_gbps, gemm_flops, tflops, transfer_gbps


def test_gemm_flop_count_is_two_per_multiply_add():
    assert gemm_flops(2, 3, 4) == 48
    assert GemmShape(8192, 8192, 8192).flops == 2 * 8192**3


def test_tflops_of_an_8192_bf16_gemm_in_1_5_ms():
    assert tflops(GemmShape(8192, 8192, 8192).flops, 1.5e-3) == pytest.approx(733.0, rel=1e-3)


def test_a_copy_counts_bytes_read_and_written():
    one_gib = 1 << 30
    assert copy_bandwidth_gbps(one_gib, 1.0) == pytest.approx(2 * one_gib / 1e9)
    assert transfer_gbps(one_gib, 1.0) == pytest.approx(one_gib / 1e9)
    assert copy_bandwidth_gbps(one_gib, 0.5) == pytest.approx(2 * transfer_gbps(one_gib, 0.5))


def test_gpu_gemm_memory_is_three_matrices_plus_workspace():
    assert gpu_bytes_needed(8192, "bf16") == 3 * 8192 * 8192 * 2 + 64 * (1 << 20)
    assert gpu_bytes_needed(4096, "tf32") == 3 * 4096 * 4096 * 4 + 64 * (1 << 20)


def test_cpu_gemm_size_scales_with_the_cube_root_of_time():
    # 8x the time target from 256 -> twice the edge.
    assert cpu_size_for(0.05 / 8, 256, target_s=0.05) == 512
    assert cpu_size_for(1e-9, 256) == 4096  # capped
    assert cpu_size_for(10.0, 256) == 64  # at least 64
    assert cpu_size_for(0.0, 256) == 4096
