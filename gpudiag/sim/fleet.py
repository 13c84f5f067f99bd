"""The simulated fleet: each node's state drawn from the fleet file's faults, and the network
between nodes. Nothing outside gpudiag/sim/ sees the fault list: the sweep and the analysis see
only the records, and must find the faults from them.

The model, per record (healthy figures from gpudiag/data/sku.json, scaled by the faults):

- ``slow_gpu`` (factor): that GPU's GEMM TFLOP/s × factor. No telemetry shows why: clocks,
  throttle reasons and every other figure stay healthy.
- ``throttled`` (reason, factor, optional share, optional full_load_only): the NVML clocks-event
  bit of ``reason`` is active in ``share`` (default 1) of the loaded NVML samples (GEMM and PCIe
  evidence, counted in ``clocks_event_reason_samples``), which run at the SM clock × factor; with
  share 1 it is active at idle (telemetry) too. GEMM, the smclock probe's clock and power scale
  by the mean clock factor 1 − share × (1 − factor), memory copies by its square root; thermal
  reasons run hot. A brief blip is e.g. share 0.07 with factor 1.0. ``full_load_only``: it acts
  only while every GPU is loaded at once (GEMM and memory copies without ``--sequential``); at
  idle, in a sequential run and in the one-GPU-at-a-time PCIe and smclock probes the GPU is healthy.
- ``degraded_pcie`` (width): telemetry and loaded evidence show that width (lanes) of 16;
  PCIe h2d/d2h × width/16.
- ``nvlink_down`` (link): that link's state is ``down`` and ``nvlink_links_up`` is one less;
  every p2p pair with that GPU at either end × links_up/links_total (NVSwitch spreads a pair
  over all of a GPU's links).
- ``slow_p2p`` (gpu, peer_gpu, factor): every p2p figure of that pair of GPUs (each one-way
  figure and both ways) × factor; each GPU's other pairs stay healthy.
- ``pcie_replays`` (count): the GPU's PCIe replay counter reads ``count``; nothing else changes
  (a link that retries still trains at full width and copies at nearly full speed).
- ``nvlink_errors`` (link, counter ``crc``, ``replay`` or ``recovery``, count): that counter of
  that link reads ``count``; the link stays up and its pairs keep their speed.
- ``gpu_lost`` (gpu): NVML still counts the GPU but reports it lost: telemetry prints the one
  ``error`` identity record probes/telemetry.py prints when nvmlDeviceGetHandleByIndex fails with
  NVML_ERROR_GPU_IS_LOST. Torch cannot see it: the facts' ``gpu_count`` is one less, ``gpu_uuids``
  leave it out, and the torch probes number the other GPUs ``cuda:0..`` in order (CUDA
  renumbers), each keeping its UUID. ``pci_gpu_count`` and ``nvml_gpu_count`` still count it.
- ``gpu_missing`` (gpu): gone from the PCI bus: absent from NVML (telemetry lists the others as
  ``gpu:0..``), from torch and from ``pci_gpu_count`` and ``nvml_gpu_count``.
- ``probe_error`` (probe, optional gpu, reason, from_call): on the node's calls numbered from
  ``from_call`` on (0: the first pass, 1: the re-test; default 0), that probe's records for that
  GPU (every GPU without ``gpu``) are ``error`` records saying ``reason`` (default: an illegal
  memory access, Xid 13), shaped as the real probe prints a failure. p2p: the pairs with that GPU
  at either end, or without ``gpu`` the probe's one host-level record.
- ``slow_node`` (factor: a host starved of CPU and memory bandwidth): PCIe h2d/d2h × factor
  (pinned copies are bound by host memory), GEMM on every GPU × factor ** 0.25 (kernel launches
  come late), facts show fewer usable CPUs, a high load average and less available memory.
- ``slow_nic`` (factor, optional rail) and ``slow_link`` (a, b, factor, optional rail): only the
  pairwise network measurements, through :meth:`SimulatedFleet.link_gbps`. A pair runs at its
  slower end: the lower of each end's rail rate × its NIC's factor, judged against the lower line
  rate (gpudiag.sim.pairs), so a slow NIC on a fast node may not show with a slower model.
- ``xid`` (gpu, code, optional count, message, recovery_action): the kernel log holds that Xid
  ``count`` times (default 1) for the GPU's PCI bus id, read only by the ``xid`` probe; with
  ``recovery_action`` NVML reports that pending action for the GPU. Nothing else changes: a planted
  Xid 79 does not also take the GPU off the bus (``gpu_lost`` does that).
- ``kernel_log_unreadable`` (optional reason): the ``xid`` probe cannot read the kernel log.
- ``ecc`` (gpu, uncorrectable, aggregate, remapped_rows, correctable_rows, pending,
  remap_failed): the telemetry probe's ECC and row-remapping readings (gpudiag/sim/memerrors.py).
- ``paused_job`` (used_mib, optional gpu, optional exclusive): a job paused for mitigation holds
  ``used_mib`` of that GPU's memory (every GPU's without ``gpu``), so NVML reports that much used
  and every probe sizes itself to the rest (gpudiag/sim/pause.py mirrors ``--pause``); with
  ``exclusive`` the GPU is in exclusive-process compute mode with the job's process on it, so a
  probe's CUDA context is refused (CUDA error: busy or unavailable) and ``--pause`` leaves it alone.
- ``nic_port`` (rail, state, width, rate_gbps, counter and count): that rail's NIC port in the
  telemetry probe's ``nic_port`` records (gpudiag/sim/nicports.py); the pair tests are unchanged.
- ``slow_uplink``, ``uplink_down``, ``slow_switch``: the switched fabric between the nodes, in a
  fleet file with a ``fabric`` section (gpudiag/sim/fabric.py): each pair test then measures its
  streams over their paths.
- ``unreachable``: connecting raises ``Unreachable``. ``hang``: the bundle never finishes; ``run``
  reports a timeout at once.
- ``impostor`` (as): the node's facts give that host's hostname and its GPUs that host's UUIDs.
  ``cloned_gpus`` (as): its GPUs carry that host's UUIDs, under its own hostname.

Noise: each measurement's run level is drawn around the true figure with the fleet file's CV
(``gemm_cv`` for GEMM, ``membw_cv`` for memory, PCIe and NVLink copies, ``link_cv`` for the
network); the samples of one run scatter a third as much. Every record draws from its own
``random.Random`` seeded by fleet seed, host, call number on that host and the record's label,
so the same fleet file gives byte-identical output whatever the thread scheduling, and a re-test
(the next call on that host) gets fresh noise on the same persistent faults.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from ..analysis.sku import Sku, SkuTable, load_skus
from .fabric import FabricNetwork
from .faults import DEFAULT_PROBE_ERROR, NVLINK_COUNTER_KEYS, THROTTLE_REASON_BITS, Fault
from .fleetfile import Fleet
from .nicports import port_faults
from .state import Draw, GpuState, NodeState, ProbeFailure, Throttle, XidLog, gpu_identity, number_gpus


class SimulatedFleet:
    """The fleet's nodes as states (what the records are drawn from) and its network links.

    ``spec`` is the checked fleet file.
    """

    def __init__(self, fleet: Fleet, skus: SkuTable | None = None) -> None:
        self.spec = fleet  # the fleet file; only this module reads its faults
        table = skus or load_skus()
        self._node_specs = {spec.host: spec for spec in fleet.node_specs}
        self._skus = {host: table.skus[spec.gpu_model] for host, spec in self._node_specs.items()}
        self._unreachable = frozenset(f.host for f in fleet.faults if f.kind == "unreachable")
        self._hung = frozenset(f.host for f in fleet.faults if f.kind == "hang")
        self._faults_by_host: dict[str, list[Fault]] = {}
        for fault in fleet.faults:
            self._faults_by_host.setdefault(fault.host, []).append(fault)
        self._states = {host: self._node_state(host) for host in fleet.hosts}
        self.fabric = (FabricNetwork(fleet.fabric, fleet.topology, fleet.fabric_faults, fleet.seed)
                       if fleet.fabric is not None and fleet.topology is not None else None)

    @property
    def hosts(self) -> tuple[str, ...]:
        return self.spec.hosts

    def __contains__(self, host: object) -> bool:
        return host in self._states

    def is_unreachable(self, host: str) -> bool:
        return host in self._unreachable

    def is_hung(self, host: str) -> bool:
        return host in self._hung

    def sku(self, host: str) -> Sku:
        """The SKU figures of ``host``'s GPU model. Raises KeyError for a host not in the fleet."""
        return self._skus[host]

    def node_state(self, host: str, call: int = 0) -> NodeState:
        """The state of one node on call ``call`` there (0: the first). Raises KeyError for a
        host not in the fleet."""
        state = self._states[host]
        failures = tuple(ProbeFailure(f.probe or "", f.gpu, f.reason or DEFAULT_PROBE_ERROR)
                         for f in self._faults_by_host.get(host, ()) if f.kind == "probe_error" and call >= f.from_call)
        return replace(state, probe_failures=failures) if failures else state

    def draw(self, host: str, call: int) -> Draw:
        """The random sources of call ``call`` on ``host``: one per record label."""
        seed = self.spec.seed
        return lambda label: random.Random(f"{seed}:{host}:{call}:{label}")

    def link_rng(self, a: str, b: str, rail: int, attempt: int) -> random.Random:
        """A random source for one measurement of the pair (either order) on ``rail``."""
        first, second = sorted((a, b))
        return random.Random(f"{self.spec.seed}:link:{first}:{second}:{rail}:{attempt}")

    def link_gbps(self, a: str, b: str, rail: int, rng: random.Random) -> float:
        """One pairwise network measurement between ``a`` and ``b`` on ``rail`` (Gbit/s).

        The slower end's achieved rate — each end's per-rail rate × its own NIC's factor — × the
        link's factor, with ``link_cv`` noise: as on a real fabric, a 400 Gbit/s NIC at 80 % still
        fills a 200 Gbit/s partner's line. Raises ValueError for an unknown host, the same host
        twice, or a rail either node lacks.
        """
        for host in (a, b):
            if host not in self._states:
                raise ValueError(f"{host!r} is not a node of the simulated fleet {self.spec.source}")
        if a == b:
            raise ValueError("a link needs two different nodes")
        rails = min(self._skus[a].network.rails, self._skus[b].network.rails)
        if not 0 <= rail < rails:
            raise ValueError(f"rail {rail} is out of range 0..{rails - 1}")
        ends_gbps = min(self._skus[host].network.rail_gbps * self._nic_factor(host, rail) for host in (a, b))
        return ends_gbps * self._link_factor(a, b, rail) * rng.gauss(1.0, self.spec.noise.link_cv)

    def _nic_factor(self, host: str, rail: int) -> float:
        factors = [f.factor for f in self._faults_by_host.get(host, ())
                   if f.kind == "slow_nic" and f.rail in (None, rail)]
        return min(factors, default=1.0)

    def _link_factor(self, a: str, b: str, rail: int) -> float:
        factors = [f.factor for f in self.spec.faults
                   if f.kind == "slow_link" and {f.host, f.peer} == {a, b} and f.rail in (None, rail)]
        return min(factors, default=1.0)

    def _node_state(self, host: str) -> NodeState:
        spec = self._node_specs[host]
        faults = self._faults_by_host.get(host, [])
        missing = {f.gpu for f in faults if f.kind == "gpu_missing"}
        # an impostor's GPUs (and a cloned image's) carry the identities of the host it poses as
        posing = next((f.peer for f in faults if f.kind == "impostor"), None)
        cloned = next((f.peer for f in faults if f.kind in ("impostor", "cloned_gpus")), None)
        on_bus = [_apply_gpu_faults(gpu_identity(self.spec.seed, cloned or host, index),
                                    [f for f in faults if f.gpu == index or (f.kind == "paused_job" and f.gpu is None)])
                  for index in range(spec.gpus_per_node) if index not in missing]
        host_factor = min((f.factor for f in faults if f.kind == "slow_node"), default=1.0)
        xids = tuple(XidLog(gpu_identity(self.spec.seed, host, f.gpu or 0).pci_bus_id, f.code or 0, f.count,
                            f.message or "") for f in faults if f.kind == "xid")
        unreadable = next((f.reason for f in faults if f.kind == "kernel_log_unreadable"), None)
        return NodeState(host=host, sku=self._skus[host], gpus=number_gpus(on_bus),
                         gpu_memory_mib=spec.gpu_memory_mib, driver=spec.driver, cuda=spec.cuda, torch=spec.torch,
                         noise=self.spec.noise, host_factor=host_factor, nvml_link_slots=spec.nvml_link_slots,
                         xids=xids, kernel_log_unreadable=unreadable, platform=spec.platform,
                         nic_ports=port_faults(faults), hostname=posing or host)


def _apply_gpu_faults(gpu: GpuState, faults: Sequence[Fault]) -> GpuState:
    for fault in faults:
        if fault.kind == "slow_gpu":
            gpu = replace(gpu, compute_factor=gpu.compute_factor * fault.factor)
        elif fault.kind == "throttled":
            throttle = Throttle(bit=THROTTLE_REASON_BITS[fault.reason or ""], factor=fault.factor,
                                share=fault.share, full_load_only=fault.full_load_only)
            gpu = replace(gpu, throttles=(*gpu.throttles, throttle))
        elif fault.kind == "degraded_pcie":
            gpu = replace(gpu, pcie_width=fault.width or gpu.pcie_width)
        elif fault.kind == "nvlink_down":
            gpu = replace(gpu, nvlinks_down=gpu.nvlinks_down | {fault.link})
        elif fault.kind == "slow_p2p" and fault.peer_gpu is not None:
            gpu = replace(gpu, p2p_factors=(*gpu.p2p_factors, (fault.peer_gpu, fault.factor)))
        elif fault.kind == "pcie_replays":
            gpu = replace(gpu, pcie_replays=fault.count)
        elif fault.kind == "nvlink_errors" and fault.link is not None:
            counter = (fault.link, NVLINK_COUNTER_KEYS[fault.counter or ""], fault.count)
            gpu = replace(gpu, nvlink_errors=(*gpu.nvlink_errors, counter))
        elif fault.kind == "gpu_lost":
            gpu = replace(gpu, lost=True)
        elif fault.kind == "xid" and fault.recovery_action is not None:
            gpu = replace(gpu, recovery_action=fault.recovery_action)
        elif fault.kind == "paused_job":
            gpu = replace(gpu, job_mib=fault.used_mib, exclusive=fault.exclusive)
        elif fault.kind == "ecc" and fault.memory_errors is not None:
            gpu = replace(gpu, memory_errors=fault.memory_errors)
    return gpu
