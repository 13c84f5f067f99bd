"""A test Slurm cluster (``slurm_cluster.py``) whose slurmctld loads a topology.conf: ``TopologyPlugin=
topology/tree``, the file beside the cluster's slurm.conf (where Slurm looks for it). slurmctld refuses to start
on a file it cannot read (a switch naming a node or switch that does not exist, a switch defined twice), so a
started cluster has accepted it, and ``scontrol show topology`` prints the tree as slurmctld holds it."""

from __future__ import annotations

import re
from pathlib import Path

from slurm_cluster import SlurmCluster

_SWITCH_LINE = re.compile(r"SwitchName=(\S+)\s+Level=(\d+)\s+LinkSpeed=\d+(?:\s+Nodes=(\S+))?(?:\s+Switches=(\S+))?")


class TopologyCluster(SlurmCluster):
    """``count`` nodes ``n1``..``nN`` and ``topology_conf`` (the text of its topology.conf)."""

    def __init__(self, count: int, topology_conf: str) -> None:
        super().__init__(count)
        self.topology_conf = topology_conf

    @property
    def topology_path(self) -> Path:
        return self.conf_path.with_name("topology.conf")

    def config_text(self, controller_port: int, node_ports: list[int]) -> str:
        # called once the cluster's directory exists and before slurmctld starts: the file goes in beside it
        self.topology_path.write_text(self.topology_conf)
        return super().config_text(controller_port, node_ports) + "TopologyPlugin=topology/tree\n"

    def show_topology(self) -> dict[str, tuple[int, str | None, str | None]]:
        """``scontrol show topology`` as slurmctld holds the tree: each switch's (level, nodes, switches), the
        lists in Slurm's host-list syntax as it prints them (None: none)."""
        text = self.run(["scontrol", "show", "topology"]).stdout
        found = {}
        for line in text.splitlines():
            match = _SWITCH_LINE.match(line.strip())
            if match is None:
                raise ValueError(f"scontrol show topology printed a line of no known form: {line!r}\n{text}")
            name, level, nodes, switches = match.groups()
            found[name] = (int(level), nodes, switches)
        return found
