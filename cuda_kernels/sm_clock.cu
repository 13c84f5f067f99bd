// gpudiag sm_clock: the effective clock and FP32 FMA rate of every SM, one block per SM.
//
// torch can time a whole kernel, but it cannot say *which* SM ran it, so one SM running
// slower than the others (a fail-slow) is averaged away. Here every block records the SM it
// ran on (%smid), the SM cycles it spent (clock64) and the wall nanoseconds it spent
// (%globaltimer, one clock for the whole GPU) across a fixed chain of dependent FMAs:
//   effective SM clock (MHz)  = cycles / ns * 1000
//   per-block FMA rate (GFLOP/s) = flops / ns
//
// This file must compile both with `nvcc -cubin -arch=sm_XY` and through NVRTC, so it has no
// includes and no host code. The layout constants below are mirrored in probes/smclock.py.

#define GPUDIAG_CHAINS 8           // independent FMA chains per thread, so the pipe stays full
#define GPUDIAG_UNROLL 16          // dependent FMAs per chain per loop iteration
#define GPUDIAG_RECORD_WORDS 8     // 64-bit words written per block

// Record layout (one per block, GPUDIAG_RECORD_WORDS words):
//   0 smid at start   1 smid at end (differs if the block migrated; the host drops it)
//   2 SM cycles elapsed   3 globaltimer ns at start   4 globaltimer ns at end
//   5 bits of the FMA result (keeps the chains alive)
//   6 %nsmid: SM ids lie below it, but need not be contiguous   7 zero (reserved)

static __device__ __forceinline__ unsigned int gpudiag_smid()
{
    unsigned int smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    return smid;
}

static __device__ __forceinline__ unsigned int gpudiag_nsmid()
{
    unsigned int nsmid;
    asm volatile("mov.u32 %0, %%nsmid;" : "=r"(nsmid));
    return nsmid;
}

static __device__ __forceinline__ unsigned long long gpudiag_globaltimer_ns()
{
    unsigned long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    return ns;
}

// An FMA the compiler may neither fold nor reorder away: it is opaque PTX whose result feeds
// the next one, and the final value is stored.
static __device__ __forceinline__ float gpudiag_fma(float a, float b, float c)
{
    float d;
    asm volatile("fma.rn.f32 %0, %1, %2, %3;" : "=f"(d) : "f"(a), "f"(b), "f"(c));
    return d;
}

extern "C" __global__ void gpudiag_sm_clock(unsigned long long *records, int iterations,
                                            float seed)
{
    // Values stay finite for any iteration count: x -> x * 0.999 + 0.001 converges to 1.
    const float multiplier = 0.999f;
    const float addend = 0.001f;
    float acc[GPUDIAG_CHAINS];
#pragma unroll
    for (int chain = 0; chain < GPUDIAG_CHAINS; ++chain) {
        acc[chain] = seed + (float)(threadIdx.x * GPUDIAG_CHAINS + chain) * 1.0e-6f;
    }

    unsigned int smid_start = 0;
    long long cycles_start = 0;
    unsigned long long ns_start = 0;
    __syncthreads();  // every warp of the block starts together, so the span is the block's
    if (threadIdx.x == 0) {
        smid_start = gpudiag_smid();
        ns_start = gpudiag_globaltimer_ns();
        cycles_start = clock64();
    }

    // Not unrolled further: 128 FMAs per trip already hide the loop's own instructions, and a
    // small loop body behaves the same under every compiler version.
#pragma unroll 1
    for (int i = 0; i < iterations; ++i) {
#pragma unroll
        for (int step = 0; step < GPUDIAG_UNROLL; ++step) {
#pragma unroll
            for (int chain = 0; chain < GPUDIAG_CHAINS; ++chain) {
                acc[chain] = gpudiag_fma(acc[chain], multiplier, addend);
            }
        }
    }

    __syncthreads();  // the block is done only when its slowest warp is
    float sum = 0.0f;
#pragma unroll
    for (int chain = 0; chain < GPUDIAG_CHAINS; ++chain) {
        sum += acc[chain];
    }
    if (threadIdx.x == 0) {
        long long cycles_end = clock64();
        unsigned long long ns_end = gpudiag_globaltimer_ns();
        unsigned long long *record = records + (unsigned long long)blockIdx.x * GPUDIAG_RECORD_WORDS;
        record[0] = smid_start;
        record[1] = gpudiag_smid();
        record[2] = (unsigned long long)(cycles_end - cycles_start);
        record[3] = ns_start;
        record[4] = ns_end;
        record[5] = (unsigned long long)__float_as_uint(sum);
        record[6] = gpudiag_nsmid();
        record[7] = 0;
    } else if (sum == -1.0f) {
        // Never true (the chains converge to positive values), but the compiler cannot know,
        // so every thread's chains must really be computed.
        records[(unsigned long long)blockIdx.x * GPUDIAG_RECORD_WORDS + 7] = 1;
    }
}
