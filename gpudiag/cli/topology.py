"""``gpudiag topology FILE...``: read a fabric's topology (an ibnetdiscover capture, a Slurm
topology.conf, a gpudiag.topology/1 file, an lldpctl capture; gpudiag.fabric.readers) and show
what was read: per rail plane, the switches by tier, the links between them, each leaf's nodes
and its oversubscription (gpudiag.fabric.render)."""

from __future__ import annotations

import click

from ..exitcodes import ExitCode
from ..fabric.readers import load_rails_map, load_topology
from ..fabric.render import topology_document, topology_text
from ..schema.jsonout import dumps as strict_dumps
from .helptext import USAGE_ROW, epilog
from .options import check_outputs, emit_json, json_option


@click.command(
    short_help="Read a fabric's topology and show it per rail: switches, links, leaves.",
    epilog=epilog(
    ["gpudiag topology examples/fabric/ib.txt          # ibnetdiscover > ib.txt",
     "gpudiag topology examples/fabric/ib.txt --rails examples/fabric/rails.json",
     "gpudiag topology examples/fabric/pod.topology.json --json topology.json"],
    [(ExitCode.OK, "read and shown"), USAGE_ROW]))
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option("--rails", "rails_path", default=None, metavar="MAP.json",
              help='Which rail each HCA is on, as JSON ({"mlx5_0": 0, "mlx5_1": 1, ...}): for an ibnetdiscover '
                   "capture of several rails (default: each host's HCAs in natural order), and a copy of a "
                   "topology.conf's plane for each rail.")
@json_option("The topology as JSON (a gpudiag.topology/1 file that reads back), instead of the text.")
def topology(files: tuple[str, ...], rails_path: str | None, json_path: str | None) -> ExitCode:
    """Read a fabric's topology and show it: per rail, the switches by tier, the links between
    switches (cables, ports, rates), each leaf's nodes and its oversubscription.

    FILE is an ibnetdiscover capture, a Slurm topology.conf (topology/tree), a gpudiag.topology/1
    JSON file (which can include the others) or an lldpctl -f json capture; several files merge,
    each rail given by one.
    """
    check_outputs(json_path)
    rails = None if rails_path is None else load_rails_map(rails_path)
    loaded = load_topology(files, rails=rails)
    if json_path is not None:
        emit_json(strict_dumps(topology_document(loaded), indent=1) + "\n", json_path)
    else:
        click.echo(topology_text(loaded), nl=False)
    return ExitCode.OK
