"""A fleet file (``gpudiag sweep --simulate FLEET.json``), read and checked into a ``Fleet``.

A fleet file names the nodes (``nodes``, ``name_format``), their GPU model and software (the
top-level settings and ``overrides``: gpudiag/sim/nodespecs.py), the ``seed`` and ``noise`` of
the measurements (gpudiag/sim/fleet.py) and the ``faults`` planted in them
(gpudiag/sim/faults.py). Every problem is one InputError line: file, field path, problem.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..analysis.sku import SkuTable, load_skus
from ..errors import InputError
from ..fabric.model import Topology
from ..hosts import HostSpec
from .fabric import FabricFault, FabricSpec, NodeRails, fabric_spec, fabric_topology
from .faults import Fault, check_faults
from .nodespecs import MAX_NODES, NodeSpec, default_spec, node_specs
from .reader import FieldReader
from .state import Noise

MAX_CV = 0.5
TOP_LEVEL_FIELDS = ("nodes", "name_format", "gpus_per_node", "gpu_model", "gpu_memory_mib", "driver", "cuda",
                    "torch", "nvml_link_slots", "platform", "seed", "noise", "overrides", "faults", "fabric")


@dataclass(frozen=True)
class Fleet:
    """A fleet file, checked. ``hosts`` are the generated node names, in order; the top-level
    settings are the defaults, ``node_specs`` every node (in ``hosts`` order) with its overrides."""

    source: str
    hosts: tuple[str, ...]
    gpus_per_node: int
    gpu_model: str
    gpu_memory_mib: int
    driver: str
    cuda: str
    torch: str
    seed: int
    noise: Noise
    faults: tuple[Fault, ...]
    node_specs: tuple[NodeSpec, ...]
    fabric: FabricSpec | None = None  # the switched fabric between the nodes (gpudiag/sim/fabric.py)
    topology: Topology | None = None
    fabric_faults: tuple[FabricFault, ...] = ()

    def host_specs(self) -> list[HostSpec]:
        """Every node as a sweep host."""
        return [HostSpec(host) for host in self.hosts]


def demo_fleet_path() -> Path:
    """The packaged 64-node demo fleet (gpudiag/data/demo_fleet.json)."""
    return Path(str(resources.files("gpudiag").joinpath("data/demo_fleet.json")))


def load_fleet(path: str | Path, skus: SkuTable | None = None) -> Fleet:
    """Read and check a fleet file. Raises InputError (one line: file, field path, problem)."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise InputError(f"{source}: cannot read the fleet file ({error.strerror or error})") from error
    except UnicodeDecodeError as error:
        raise InputError(f"{source}: not UTF-8 text") from error
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"{source}: invalid JSON at line {error.lineno}, column {error.colno}: "
                         f"{error.msg}") from error
    return parse_fleet(data, source, skus)


def parse_fleet(data: Any, source: str, skus: SkuTable | None = None) -> Fleet:
    """Check a fleet file's parsed JSON; ``source`` names it in errors. Raises InputError."""
    read = FieldReader(source)
    table = skus or load_skus()
    read.keys(data, "", TOP_LEVEL_FIELDS, ("nodes",))
    nodes = read.integer(data, "nodes", low=1, high=MAX_NODES)
    hosts = _host_names(read, read.text(data, "name_format", "node{:03d}"), nodes)
    default = default_spec(read, table, data)
    specs = node_specs(read, table, hosts, default, read.value(data, "overrides", [], list))
    faults = read.value(data, "faults", [], list)
    noise = _noise(read, read.value(data, "noise", {}, dict))
    fabric = fabric_spec(read, data.get("fabric"), nodes, noise.link_cv / 2)
    topology = None
    if fabric is not None:
        networks = [NodeRails(host, table.skus[specs[host].gpu_model].network.rails,
                              table.skus[specs[host].gpu_model].network.rail_line_rate_gbps) for host in hosts]
        topology = fabric_topology(fabric, networks, f"{source} (fabric)")
    node_faults, fabric_faults = check_faults(read, faults, hosts, specs, table, topology)
    return Fleet(source=source, hosts=hosts, gpus_per_node=default.gpus_per_node, gpu_model=default.gpu_model,
                 gpu_memory_mib=default.gpu_memory_mib, driver=default.driver, cuda=default.cuda,
                 torch=default.torch, seed=read.integer(data, "seed", 0), noise=noise, faults=node_faults,
                 node_specs=tuple(specs[host] for host in hosts), fabric=fabric, topology=topology,
                 fabric_faults=fabric_faults)


def _host_names(read: FieldReader, name_format: str, nodes: int) -> tuple[str, ...]:
    try:
        names = tuple(name_format.format(number) for number in range(1, nodes + 1))
    except (ValueError, IndexError, KeyError) as error:
        raise read.error("name_format", f"{json.dumps(name_format)} cannot format a node number "
                         f"({error}); write e.g. \"node{{:03d}}\"") from error
    if len(set(names)) != len(names):
        raise read.error("name_format", f"{json.dumps(name_format)} gives the same name to several nodes; "
                         "it needs a {} placeholder for the node number")
    bad = next((name for name in names if not name or any(c.isspace() or c in "@:[],/" for c in name)), None)
    if bad is not None:
        raise read.error("name_format", f"{json.dumps(bad)} is not a valid host name")
    return names


def _noise(read: FieldReader, data: dict[str, Any]) -> Noise:
    defaults = Noise()
    read.keys(data, "noise", ("gemm_cv", "membw_cv", "link_cv"), ())
    values = {}
    for key in ("gemm_cv", "membw_cv", "link_cv"):
        value = float(read.value(data, key, getattr(defaults, key), float, "noise"))
        if not 0.0 <= value <= MAX_CV:
            raise read.error(f"noise.{key}", f"{value:g} is out of range 0..{MAX_CV:g}")
        values[key] = value
    return Noise(**values)
