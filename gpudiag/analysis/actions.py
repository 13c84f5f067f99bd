"""What to do about each finding: the fixed verb a hook can branch on and the plain words beside
it, by the finding's cause (its kind, or a finer cause within one), in one table; a warning never
takes a node out of service."""

from __future__ import annotations

from ..findings import Action, Severity, Words


class Cause(Words):
    """Why a finding was made, as far as what to do about it differs: its kind's own cause (the
    same word as the kind), or a finer one within the kind. It picks the finding's action
    (ACTIONS) and goes no further: the sweep document and the store carry the kind and the action,
    never the cause. A Kind is no Cause, even where the two are the same word."""

    SLOW_GPU = "slow_gpu"
    SLOW_GPU_PCIE = "slow_gpu_pcie"          # slow_gpu: copies slow on a link at full width and generation
    SLOW_GPU_P2P = "slow_gpu_p2p"            # slow_gpu: its NVLink copies slow
    THROTTLED = "throttled"
    POWER_CAPPED = "power_capped"            # throttled: a software power cap, not a hardware slowdown
    DEGRADED_PCIE = "degraded_pcie"
    PCIE_REPLAYS = "pcie_replays"            # degraded_pcie: its replay counter far above its peers'
    NVLINK_DOWN = "nvlink_down"
    NVLINK_ERRORS = "nvlink_errors"
    ECC = "ecc"
    ECC_REMAP_FAILED = "ecc_remap_failed"    # ecc: a row remap failed
    SLOW_NODE = "slow_node"
    STARVED_NODE = "starved_node"            # slow_node: load, usable CPUs or free memory
    MISSING_GPU = "missing_gpu"
    SLOW_LINK = "slow_link"                  # a slow GPU pair within a node
    SLOW_NETWORK_LINK = "slow_network_link"  # slow_link: a slow pair of nodes
    SLOW_NIC = "slow_nic"
    # nic_port (no cause of its own): a port down, trained below its peers, with error counters
    # growing faster than theirs, or down with no peer to compare with
    NIC_PORT_DOWN = "nic_port_down"
    NIC_PORT_RATE = "nic_port_rate"
    NIC_PORT_ERRORS = "nic_port_errors"
    NIC_PORT_NOT_COMPARED = "nic_port_not_compared"
    LINK_ERROR = "link_error"
    HOST_LINK_ERROR = "host_link_error"      # link_error: one node no partner could test with
    FLEET_SHIFT = "fleet_shift"
    SLOW_NETWORK = "slow_network"
    SOFTWARE_REGRESSION = "software_regression"
    POWER_POLICY = "power_policy"            # fleet_shift or software_regression: a power cap every GPU shares
    UNCHECKED = "unchecked"


# The cause of a finding -> (the verb for a fail, what to do in plain words). A warning of a cause
# whose verb takes the node out of service is ``watch`` instead (see :func:`action`).
ACTIONS: dict[Cause, tuple[Action, str]] = {
    Cause.SLOW_GPU: (Action.DRAIN, "drain the node and run the vendor diagnostic on {gpu} (dcgmi diag -r 3{i}); "
                                   "replace it if it repeats"),
    Cause.SLOW_GPU_PCIE: (Action.INSPECT, "the PCIe link trains at full width and generation yet copies are slow: "
                                          "check the PCIe switch, AER/replay counters and the GPU's NUMA placement"),
    Cause.SLOW_GPU_P2P: (Action.DRAIN, "drain the node and run the vendor diagnostic on the NVLinks of {gpu} (dcgmi "
                                       "diag -r 3{i}, nvidia-smi nvlink -s{i}); replace the GPU or baseboard part if "
                                       "it repeats"),
    Cause.THROTTLED: (Action.DRAIN, "check the cooling and power of {gpu} (nvidia-smi -q -d "
                                    "PERFORMANCE,TEMPERATURE,POWER{i}; fans, airflow, inlet temperature, power "
                                    "brake); drain if it persists"),
    Cause.POWER_CAPPED: (Action.INSPECT, "a software power cap holds the clocks down: check the power limit "
                                         "(nvidia-smi -q -d POWER{i}) against the board's default and the site's "
                                         "power policy, and restore it (nvidia-smi{i} -pl)"),
    Cause.DEGRADED_PCIE: (Action.DRAIN, "reseat {gpu} or its riser and check the slot trains at full width and "
                                        "generation (nvidia-smi -q -d PCIE{i})"),
    Cause.NVLINK_DOWN: (Action.RESET_GPU, "drain the node and reset {gpu} (nvidia-smi -r{i}); replace the "
                                          "NVLink/NVSwitch part if the link stays down"),
    Cause.NVLINK_ERRORS: (Action.INSPECT, "this NVLink logs errors far above its peers': read its counters "
                                          "(nvidia-smi nvlink -e{i}) and the fabric manager log, re-check at the "
                                          "next sweep, and drain and reset {gpu} (replace the NVLink/NVSwitch part) "
                                          "if they keep growing"),
    Cause.PCIE_REPLAYS: (Action.INSPECT, "the PCIe link of {gpu} retries corrupted packets far more than its peers': "
                                         "check the kernel log for AER errors, reseat the GPU or its riser at the "
                                         "next drain, and watch whether the counter keeps growing (nvidia-smi -q -d "
                                         "PCIE{i})"),
    Cause.ECC: (Action.RESET_GPU, "drain the node and reset {gpu} to apply pending row remaps (nvidia-smi -r{i}); "
                                  "replace it if uncorrectable errors persist"),
    Cause.ECC_REMAP_FAILED: (Action.DRAIN, "a row remap failed: drain the node and replace (RMA) {gpu}"),
    # A confirmed host-side slowdown costs every job on the node: it is kept out until checked.
    Cause.SLOW_NODE: (Action.DRAIN, "drain the node and check the host: CPU frequency governor, other processes, "
                                    "memory and NUMA placement"),
    Cause.STARVED_NODE: (Action.DRAIN, "the host is starved (load, usable CPUs or free memory): drain it, and find "
                                       "what else runs there and the cgroup/CPU limits before it takes a job"),
    Cause.MISSING_GPU: (Action.REBOOT, "a GPU is missing (fallen off the bus): drain the node and reboot it; reseat "
                                       "or replace {gpu} if it does not come back (check the kernel log for Xid 79)"),
    Cause.SLOW_LINK: (Action.INSPECT, "one GPU pair is slow while both GPUs are fine with every other partner: check "
                                      "the NVSwitch/NVLink path between the two GPUs (nvidia-smi nvlink -e{i}, "
                                      "fabric manager logs)"),
    Cause.SLOW_NIC: (Action.DRAIN, "this node is slow with every partner on this rail: check the NIC's port (ibstat: "
                                   "rate and state, error counters), its cable and transceiver, and its PCIe link; "
                                   "reseat or replace it"),
    Cause.SLOW_NETWORK_LINK: (Action.INSPECT, "this pair is slow while both nodes are fine with other partners: "
                                              "check the path between them (switch ports, cables, routing or "
                                              "adaptive-routing state)"),
    Cause.NIC_PORT_DOWN: (Action.DRAIN, "this NIC port is not active while its peers are: check its cable and "
                                        "transceiver (ibstat, ibv_devinfo), the switch port and the subnet manager's "
                                        "view of it; reseat or replace the cable or the NIC"),
    Cause.NIC_PORT_RATE: (Action.DRAIN, "this NIC port trained below its peers' rate or width: reseat or replace the "
                                        "cable or transceiver, check the switch port's speed settings, then re-check "
                                        "with ibstat"),
    Cause.NIC_PORT_ERRORS: (Action.INSPECT, "this NIC port's error counters grow far faster than its peers': check "
                                            "the cable and transceiver (ibstat, perfquery, the switch's port "
                                            "counters) and replace the cable if they keep growing"),
    Cause.NIC_PORT_NOT_COMPARED: (Action.INSPECT, "this port is not active and no port of its kind is up to compare "
                                                  "with: if it should be cabled, check the cable, the switch port "
                                                  "and the subnet manager; it is not a pass"),
    Cause.LINK_ERROR: (Action.INSPECT, "this pair could not be tested: check the data-plane address, firewall and "
                                       "that the probe's ports are reachable between the two nodes; it is not a pass"),
    Cause.HOST_LINK_ERROR: (Action.INSPECT, "this node could not be pair-tested with any partner while they could "
                                            "with others: check its data port (link state, carrier), its data-plane "
                                            "address and firewall; keep it out of jobs until it is tested"),
    Cause.FLEET_SHIFT: (Action.INSPECT, "a regression most of the fleet shares: compare driver, firmware, clocks and "
                                        "power policy with the baseline's sweeps; draining single nodes will not fix "
                                        "it"),
    Cause.SLOW_NETWORK: (Action.INSPECT, "every pair of this network runs alike and far below its line rate: the "
                                         "fabric (switch ports, cabling, routing, congestion control, firmware) or "
                                         "every one of its NICs (firmware, link settings) is at fault, not one node: "
                                         "check the ports' rates and error counters (ibstat, perfquery) and the "
                                         "switches; draining nodes will not fix it"),
    Cause.SOFTWARE_REGRESSION: (Action.INSPECT, "the same hardware runs faster on the other driver/CUDA/torch "
                                                "versions named: hold or roll back the upgrade and compare the "
                                                "versions' release notes; draining single nodes will not fix it"),
    Cause.POWER_POLICY: (Action.INSPECT, "every GPU of the group runs under a software power cap that costs this "
                                         "speed: check the power limit (nvidia-smi -q -d POWER) against the board's "
                                         "default and the site's or job's power policy; draining single nodes will "
                                         "not fix it"),
    Cause.UNCHECKED: (Action.INSPECT, "this could not be measured or compared: it is not a pass; see the evidence"),
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


def action(cause: Cause, severity: Severity, gpu: int | None = None,
           peer_gpu: int | None = None) -> tuple[Action, str]:
    """The (verb, detail) of a finding of ``cause`` at ``severity``: a warning never drains. The
    detail names the GPU by NVML's index ``gpu`` (and ``peer_gpu``, the other GPU of a pair), as
    nvidia-smi and dcgmi take it (``-i 5``); "this GPU" where the index is unknown. ``cause`` is a
    Cause: a Kind or a plain string of the same word is refused (TypeError)."""
    if not isinstance(cause, Cause):
        raise TypeError(f"not a Cause: {cause!r}")
    verb, template = ACTIONS[cause]
    detail = template.format(**_gpu_words(gpu, peer_gpu))
    if severity == Severity.WARN and verb in SERVICE_VERBS:
        return Action.WATCH, f"re-check at the next sweep and act if it grows: {detail}"
    return verb, detail
