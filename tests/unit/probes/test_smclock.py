"""The smclock probe: decoding per-block timings into per-SM clocks and rates, and run()."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import pytest

from probes import runner, smclock
from probes.context import ProbeContext
from probes.devices import CudaDevice
from probes.kernels import KernelImage
from probes.smclock import BlockTiming, SmRate

REPO_ROOT = Path(__file__).resolve().parents[3]
KERNEL_DIR = str(REPO_ROOT / "cuda_kernels")
MS = 1_000_000  # ns


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def _block(smid: int, clock_mhz: float, start_ns: int, elapsed_ns: int, smid_end: int | None = None,
           result_bits: int = 0x41000000) -> BlockTiming:
    cycles = round(clock_mhz * elapsed_ns / 1000)
    return BlockTiming(smid, smid if smid_end is None else smid_end, cycles, start_ns,
                       start_ns + elapsed_ns, result_bits, 144)


def test_decode_records_reads_eight_words_per_block_as_unsigned() -> None:
    words = [3, 3, 19_800_000, 1_000, 10_001_000, 0x41000000, 144, 0,
             -1, 7, 5, 0, 10, 0, 144, 0]
    first, second = smclock.decode_records(words, blocks=2)
    assert first == BlockTiming(3, 3, 19_800_000, 1_000, 10_001_000, 0x41000000, 144)
    assert first.elapsed_ns == 10 * MS and not first.migrated
    assert second.smid == 2**64 - 1 and second.migrated


def test_decode_records_rejects_a_short_buffer() -> None:
    with pytest.raises(ValueError):
        smclock.decode_records([0] * 15, blocks=2)


def test_flops_per_block_counts_two_flops_per_fma() -> None:
    assert smclock.flops_per_block(1) == 16 * 8 * 2 * 512


def test_per_sm_clock_is_cycles_over_nanoseconds() -> None:
    rates = smclock.per_sm_rates([_block(0, 1980.0, 0, 10 * MS)], block_flops=1e9)
    assert rates[0].clock_mhz == pytest.approx(1980.0)
    assert rates[0].fma_gflops == pytest.approx(100.0)  # 1e9 FLOP in 10 ms


def test_an_sm_twenty_percent_slower_is_named_slowest() -> None:
    # Same cycles on every SM; SM 5 needs 1.25× the time, i.e. runs at 80 % of the clock.
    blocks = [_block(smid, 1980.0, 0, 10 * MS) for smid in range(8) if smid != 5]
    blocks.append(BlockTiming(5, 5, round(1980.0 * 10 * MS / 1000), 0, 12_500_000, 0, 144))
    summary = smclock.summarize(smclock.per_sm_rates(blocks, block_flops=1e9))
    assert summary.sm_count == 8
    assert summary.slowest_clock_sm_ids[0] == 5 and summary.slowest_fma_sm_ids[0] == 5
    assert summary.min_clock_mhz == pytest.approx(1584.0)
    assert summary.median_clock_mhz == pytest.approx(1980.0)
    assert summary.fma_min_ratio == pytest.approx(0.8)
    assert summary.spread_pct == pytest.approx(20.0)


def test_several_concurrent_blocks_on_one_sm_add_up_their_rate() -> None:
    blocks = [_block(3, 1500.0, 0, 10 * MS), _block(3, 1500.0, 0, 10 * MS), _block(4, 1500.0, 0, 10 * MS)]
    by_sm = {rate.smid: rate for rate in smclock.per_sm_rates(blocks, block_flops=1e9)}
    assert by_sm[3].blocks == 2 and by_sm[3].clock_mhz == pytest.approx(1500.0)
    assert by_sm[3].fma_gflops == pytest.approx(2 * by_sm[4].fma_gflops)


def test_sequential_blocks_on_one_sm_share_their_span() -> None:
    blocks = [_block(0, 1500.0, 0, 10 * MS), _block(0, 1500.0, 10 * MS, 10 * MS)]
    (rate,) = smclock.per_sm_rates(blocks, block_flops=1e9)
    assert rate.blocks == 2 and rate.fma_gflops == pytest.approx(100.0)


def test_migrated_and_empty_blocks_are_dropped() -> None:
    blocks = [_block(0, 1500.0, 0, 10 * MS, smid_end=9), _block(1, 1500.0, 5, 0), _block(2, 1500.0, 0, MS)]
    assert [rate.smid for rate in smclock.per_sm_rates(blocks, block_flops=1e9)] == [2]


def test_median_over_samples_takes_each_sms_median() -> None:
    samples = [[SmRate(0, 1900.0, 90.0, 1), SmRate(1, 1800.0, 80.0, 1)],
               [SmRate(0, 2000.0, 100.0, 1)],
               [SmRate(0, 1950.0, 95.0, 1), SmRate(1, 1850.0, 85.0, 1)]]
    merged = smclock.median_over_samples(samples)
    assert merged == [SmRate(0, 1950.0, 95.0, 3), SmRate(1, 1825.0, 82.5, 2)]


def test_the_clock_lies_between_the_slowest_and_the_fastest_sm() -> None:
    # Each SM's median over three launches is 1980 MHz, but one SM dips in the first launch and the
    # other in the second: the median of the per-launch medians (1490) would lie under every SM.
    # Seen on an H100, at a smaller scale: 1979.998 MHz against a slowest SM of 1980.0.
    launches = [[_block(0, 1000.0, 0, 10 * MS), _block(1, 1980.0, 0, 10 * MS)],
                [_block(0, 1980.0, 0, 10 * MS), _block(1, 1000.0, 0, 10 * MS)],
                [_block(0, 1980.0, 0, 10 * MS), _block(1, 1980.0, 0, 10 * MS)]]
    device = CudaDevice(0, "NVIDIA H100 80GB HBM3", "GPU-1", 80 << 30, None, 2, (9, 0))
    image = KernelImage(b"", "cubin", "sm_90", "test")
    clock, ratio = smclock._records(device, launches, iterations=1000, image=image, shared_bytes=0)
    assert clock.metric == "sm_clock" and ratio.metric == "sm_fma_rate_min_ratio"
    assert clock.details["min_mhz"] <= clock.value <= clock.details["max_mhz"]
    assert clock.value == 1980.0 and clock.samples == 3 and clock.cv > 0


def test_summarize_refuses_no_sms() -> None:
    with pytest.raises(ValueError):
        smclock.summarize([])


def test_an_sm_computing_different_bits_is_named() -> None:
    blocks = [_block(smid, 1500.0, 0, MS) for smid in range(4)]
    blocks.append(_block(7, 1500.0, 0, MS, result_bits=0x40FFFFFF))
    assert smclock.mismatched_result_sm_ids(blocks) == [7]
    assert smclock.mismatched_result_sm_ids(blocks[:4]) == []


def test_iterations_scale_the_calibration_to_the_target_time() -> None:
    assert smclock.iterations_for(0.02, 256, 100_000) == 51_200
    assert smclock.iterations_for(0.02, 256, 0) == smclock.iterations_for(0.02, 256, 1000)
    assert smclock.iterations_for(100.0, 1, 1000) == smclock.MAX_ITERATIONS


def test_sample_count_is_bounded() -> None:
    assert smclock.sample_count(0.01, 0.02) == smclock.MIN_SAMPLES
    assert smclock.sample_count(0.2, 0.02) == 10
    assert smclock.sample_count(100.0, 0.02) == smclock.MAX_SAMPLES


def test_kernel_source_defaults_to_the_bundle() -> None:
    assert smclock.kernel_source_path(None) == str(REPO_ROOT / "cuda_kernels" / "sm_clock.cu")
    assert Path(smclock.kernel_source_path(KERNEL_DIR)).is_file()


def test_kernel_layout_constants_match_the_source() -> None:
    source = Path(smclock.kernel_source_path(KERNEL_DIR)).read_text()
    assert f"#define GPUDIAG_CHAINS {smclock.CHAINS_PER_THREAD} " in source
    assert f"#define GPUDIAG_UNROLL {smclock.UNROLL} " in source
    assert f"#define GPUDIAG_RECORD_WORDS {smclock.RECORD_WORDS} " in source
    assert f'extern "C" __global__ void {smclock.KERNEL_NAME}(' in source


@pytest.mark.skipif(_cuda_available(), reason="checks the GPU-less path")
def test_run_without_a_gpu_is_skipped_with_a_reason() -> None:
    stream = io.StringIO()
    specs = runner.selected(["smclock"])
    runner.run_probes(specs, ProbeContext(kernel_dir=KERNEL_DIR, duration_s=0.5), runner.RecordWriter(stream))
    (record,) = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert record["probe"] == "smclock" and record["device"] == "host" and record["metric"] == "sm_clock"
    assert record["status"] == "skipped" and record["value"] is None
    assert "no CUDA device" in record["reason"] or "torch" in record["reason"]


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA GPU")
def test_run_on_a_gpu_measures_every_sm() -> None:
    import torch

    records = list(smclock.run(ProbeContext(kernel_dir=KERNEL_DIR, duration_s=0.5)))
    clocks = [record for record in records if record.metric == "sm_clock"]
    assert len(clocks) == torch.cuda.device_count()
    for record in clocks:
        # CUDA builds of torch bring libnvrtc, so a GPU machine with torch can compile.
        assert record.status == "ok", record.reason
        sm_count = torch.cuda.get_device_properties(int(record.device.split(":")[1])).multi_processor_count
        details = record.details
        assert details["sms_seen"] == details["sms_expected"] == sm_count
        # PTX does not promise contiguous %smid values, only that they lie below %nsmid.
        assert len(set(details["sm_ids"])) == sm_count
        assert max(details["sm_ids"]) < details["smid_limit"]
        if details["smid_limit"] == sm_count:
            assert details["sm_ids"] == list(range(sm_count))
        assert 200 <= details["min_mhz"] <= record.value <= details["max_mhz"] <= 3000
        assert record.samples >= smclock.MIN_SAMPLES
        assert details["migrated_blocks"] == 0 and details["mismatched_result_sm_ids"] == []
    ratios = [record for record in records if record.metric == "sm_fma_rate_min_ratio"]
    assert all(record.status == "ok" and 0 < record.value <= 1.0 for record in ratios)
