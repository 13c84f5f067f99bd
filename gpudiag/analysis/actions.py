"""What to do about each finding: the fixed verb a hook can branch on and the plain words beside
it, by the finding's cause (its kind, or a finer cause within one), in one table; a warning never
takes a node out of service."""

from __future__ import annotations

from ..findings import Action, Kind, Severity

# The cause of a finding (its kind, or a finer cause within one) -> (the verb for a fail, what to
# do in plain words). A warning of a cause whose verb takes the node out of service is ``watch``
# instead (see :func:`action`).
ACTIONS: dict[str, tuple[Action, str]] = {
    Kind.SLOW_GPU: (Action.DRAIN, "drain the node and run the vendor diagnostic on {gpu} (dcgmi diag -r 3{i}); "
                                  "replace it if it repeats"),
    "slow_gpu_pcie": (Action.INSPECT, "the PCIe link trains at full width and generation yet copies are slow: check "
                                      "the PCIe switch, AER/replay counters and the GPU's NUMA placement"),
    "slow_gpu_p2p": (Action.DRAIN, "drain the node and run the vendor diagnostic on the NVLinks of {gpu} (dcgmi diag "
                                   "-r 3{i}, nvidia-smi nvlink -s{i}); replace the GPU or baseboard part if it "
                                   "repeats"),
    Kind.THROTTLED: (Action.DRAIN, "check the cooling and power of {gpu} (nvidia-smi -q -d "
                                   "PERFORMANCE,TEMPERATURE,POWER{i}; fans, airflow, inlet temperature, power "
                                   "brake); drain if it persists"),
    "power_capped": (Action.INSPECT, "a software power cap holds the clocks down: check the power limit (nvidia-smi "
                                     "-q -d POWER{i}) against the board's default and the site's power policy, and "
                                     "restore it (nvidia-smi{i} -pl)"),
    Kind.DEGRADED_PCIE: (Action.DRAIN, "reseat {gpu} or its riser and check the slot trains at full width and "
                                       "generation (nvidia-smi -q -d PCIE{i})"),
    Kind.NVLINK_DOWN: (Action.RESET_GPU, "drain the node and reset {gpu} (nvidia-smi -r{i}); replace the "
                                         "NVLink/NVSwitch part if the link stays down"),
    Kind.NVLINK_ERRORS: (Action.INSPECT, "this NVLink logs errors far above its peers': read its counters "
                                         "(nvidia-smi nvlink -e{i}) and the fabric manager log, re-check at the next "
                                         "sweep, and drain and reset {gpu} (replace the NVLink/NVSwitch part) if "
                                         "they keep growing"),
    "pcie_replays": (Action.INSPECT, "the PCIe link of {gpu} retries corrupted packets far more than its peers': "
                                     "check the kernel log for AER errors, reseat the GPU or its riser at the next "
                                     "drain, and watch whether the counter keeps growing (nvidia-smi -q -d PCIE{i})"),
    Kind.ECC: (Action.RESET_GPU, "drain the node and reset {gpu} to apply pending row remaps (nvidia-smi -r{i}); "
                                 "replace it if uncorrectable errors persist"),
    "ecc_remap_failed": (Action.DRAIN, "a row remap failed: drain the node and replace (RMA) {gpu}"),
    # A confirmed host-side slowdown costs every job on the node: it is kept out until checked.
    Kind.SLOW_NODE: (Action.DRAIN, "drain the node and check the host: CPU frequency governor, other processes, "
                                   "memory and NUMA placement"),
    "starved_node": (Action.DRAIN, "the host is starved (load, usable CPUs or free memory): drain it, and find what "
                                   "else runs there and the cgroup/CPU limits before it takes a job"),
    Kind.MISSING_GPU: (Action.REBOOT, "a GPU is missing (fallen off the bus): drain the node and reboot it; reseat "
                                      "or replace {gpu} if it does not come back (check the kernel log for Xid 79)"),
    Kind.SLOW_LINK: (Action.INSPECT, "one GPU pair is slow while both GPUs are fine with every other partner: check "
                                     "the NVSwitch/NVLink path between the two GPUs (nvidia-smi nvlink -e{i}, fabric "
                                     "manager logs)"),
    Kind.SLOW_NIC: (Action.DRAIN, "this node is slow with every partner on this rail: check the NIC's port (ibstat: "
                                  "rate and state, error counters), its cable and transceiver, and its PCIe link; "
                                  "reseat or replace it"),
    "slow_network_link": (Action.INSPECT, "this pair is slow while both nodes are fine with other partners: check "
                                          "the path between them (switch ports, cables, routing or adaptive-routing "
                                          "state)"),
    "nic_port_down": (Action.DRAIN, "this NIC port is not active while its peers are: check its cable and "
                                    "transceiver (ibstat, ibv_devinfo), the switch port and the subnet manager's "
                                    "view of it; reseat or replace the cable or the NIC"),
    "nic_port_rate": (Action.DRAIN, "this NIC port trained below its peers' rate or width: reseat or replace the "
                                    "cable or transceiver, check the switch port's speed settings, then re-check "
                                    "with ibstat"),
    "nic_port_errors": (Action.INSPECT, "this NIC port's error counters grow far faster than its peers': check the "
                                        "cable and transceiver (ibstat, perfquery, the switch's port counters) and "
                                        "replace the cable if they keep growing"),
    "nic_port_not_compared": (Action.INSPECT, "this port is not active and no port of its kind is up to compare "
                                              "with: if it should be cabled, check the cable, the switch port and "
                                              "the subnet manager; it is not a pass"),
    Kind.LINK_ERROR: (Action.INSPECT, "this pair could not be tested: check the data-plane address, firewall and "
                                      "that the probe's ports are reachable between the two nodes; it is not a pass"),
    "host_link_error": (Action.INSPECT, "this node could not be pair-tested with any partner while they could with "
                                        "others: check its data port (link state, carrier), its data-plane address "
                                        "and firewall; keep it out of jobs until it is tested"),
    Kind.FLEET_SHIFT: (Action.INSPECT, "a regression most of the fleet shares: compare driver, firmware, clocks and "
                                       "power policy with the baseline's sweeps; draining single nodes will not fix "
                                       "it"),
    Kind.SLOW_NETWORK: (Action.INSPECT, "every pair of this network runs alike and far below its line rate: the fabric "
                                        "(switch ports, cabling, routing, congestion control, firmware) or every one "
                                        "of its NICs (firmware, link settings) is at fault, not one node: check the "
                                        "ports' rates and error counters (ibstat, perfquery) and the switches; "
                                        "draining nodes will not fix it"),
    Kind.SOFTWARE_REGRESSION: (Action.INSPECT, "the same hardware runs faster on the other driver/CUDA/torch "
                                               "versions named: hold or roll back the upgrade and compare the "
                                               "versions' release notes; draining single nodes will not fix it"),
    "power_policy": (Action.INSPECT, "every GPU of the group runs under a software power cap that costs this speed: "
                                     "check the power limit (nvidia-smi -q -d POWER) against the board's default and "
                                     "the site's or job's power policy; draining single nodes will not fix it"),
    Kind.UNCHECKED: (Action.INSPECT, "this could not be measured or compared: it is not a pass; see the evidence"),
}
# Verbs that take a node out of service: a warning says ``watch`` instead.
SERVICE_VERBS = (Action.DRAIN, Action.RESET_GPU, Action.REBOOT)


def _gpu_words(gpu: int | None, peer_gpu: int | None) -> dict[str, str]:
    """The words of ACTIONS' ``{gpu}`` and ``{i}`` (a command's GPU option) for a GPU or a pair."""
    if gpu is None:
        return {"gpu": "this GPU", "i": ""}
    if peer_gpu is None:
        return {"gpu": f"GPU {gpu}", "i": f" -i {gpu}"}
    return {"gpu": f"GPU {gpu} and GPU {peer_gpu}", "i": f" -i {gpu}, and -i {peer_gpu}"}


def action(cause: str, severity: Severity, gpu: int | None = None,
           peer_gpu: int | None = None) -> tuple[Action, str]:
    """The (verb, detail) of a finding of ``cause`` at ``severity``: a warning never drains. The
    detail names the GPU by NVML's index ``gpu`` (and ``peer_gpu``, the other GPU of a pair), as
    nvidia-smi and dcgmi take it (``-i 5``); "this GPU" where the index is unknown."""
    verb, template = ACTIONS[cause]
    detail = template.format(**_gpu_words(gpu, peer_gpu))
    if severity == Severity.WARN and verb in SERVICE_VERBS:
        return Action.WATCH, f"re-check at the next sweep and act if it grows: {detail}"
    return verb, detail
