"""The arithmetic that turns counts and seconds into rates. Decimal units: 1 GB = 1e9 bytes."""

from __future__ import annotations


def gemm_flops(m: int, n: int, k: int) -> int:
    """Floating-point operations of an (m x k) @ (k x n) product: a multiply and an add per term."""
    return 2 * m * n * k


def tflops(flops: int, seconds: float) -> float:
    """TFLOP/s for ``flops`` operations in ``seconds``."""
    return flops / seconds / 1e12


def transfer_gbps(bytes_moved: int, seconds: float) -> float:
    """GB/s for ``bytes_moved`` bytes carried from one place to another in ``seconds``."""
    return bytes_moved / seconds / 1e9


def copy_bandwidth_gbps(buffer_bytes: int, seconds: float) -> float:
    """GB/s of one in-memory copy of ``buffer_bytes``: the copy reads and writes every byte."""
    return transfer_gbps(2 * buffer_bytes, seconds)
