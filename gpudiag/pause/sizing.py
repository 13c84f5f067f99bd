"""How much GPU memory a probe may take, beside a paused job or not: the figures of the bundle's
probes/catalog.json (read by gpudiag/bundle/catalog.py), the same file the bundle's own sizing
reads (probes/sizing.py, probes/pauseroom.py, probes/pause.py). The simulated fleet sizes its
probes with these (gpudiag/sim/probes.py, gpudiag/sim/pause.py).

A probe takes what is free less the headroom (at least HEADROOM_MIN_BYTES, or HEADROOM_FRACTION
of the free memory), never more than ``--max-gpu-mem``, choosing the largest of its sizes that
fits. Beside a paused job (``--pause``) a CUDA context's CONTEXT_RESERVE_MIB is also set aside,
each GPU's PER_GPU_PROBES run in a child process of their own and p2p in one over every GPU with
room for it; the children share the deadline less CHILD_MARGIN_S, and a share under MIN_SHARE_S
starts no child.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..bundle.catalog import catalog

MIB = 1 << 20

_SIZING = catalog().sizing
HEADROOM_MIN_BYTES = _SIZING.headroom_min_mib * MIB
HEADROOM_FRACTION = _SIZING.headroom_fraction
# The bytes of one element of each GEMM dtype.
DTYPE_BYTES: Mapping[str, int] = _SIZING.dtype_bytes
# Each probe's sizes, largest first: GEMM's square sizes (and cuBLAS's workspace beside its three
# matrices), the copy buffers of membw, p2p and pcie, and the allocator's segment smclock takes.
GEMM_SIZES = _SIZING.gemm_sizes
GEMM_WORKSPACE_MIB = _SIZING.gemm_workspace_mib
MEMBW_BUFFER_MIB = _SIZING.membw_buffer_mib
P2P_BUFFER_MIB = _SIZING.p2p_buffer_mib
PCIE_BUFFER_MIB = _SIZING.pcie_buffer_mib
SMCLOCK_SEGMENT_MIB = _SIZING.smclock_segment_mib

_PAUSE = catalog().pause
CONTEXT_RESERVE_MIB = _PAUSE.context_reserve_mib
# The probes each GPU's child runs, in run order; p2p runs in a child of its own, last.
PER_GPU_PROBES = _PAUSE.per_gpu_probes
GPU_PROBES = (*PER_GPU_PROBES, "p2p")
CHILD_MARGIN_S = _PAUSE.child_margin_s
MIN_SHARE_S = _PAUSE.min_share_s
