"""A node Python that answers the probe bundle as a simulated fleet's node would, over real SSH.

For tests about what the controller does with what nodes print, reached as real hosts are: each
sshd host of an ``SshdFleet`` runs this wrapper as its ``--python``; it tells which node it is
from the address the SSH session came in on (``SSH_CONNECTION``), and prints for ``python -m
probes ...`` exactly what the simulated fleet's node prints for that command line (its records,
its faults: gpudiag/sim/runner.py), its calls counted per node as the simulated connector counts
them. Anything else (a pair test's ``net-server`` and ``net-client``, ``python -c``) runs with the
real Python. The bundle is still
staged over SSH, the facts still go through the identity check: only the node's measurements are
the simulator's, which on this machine's CPUs no real probe could give.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

NODE_PROGRAM = '''\
import fcntl, json, os, sys
from pathlib import Path
folder = Path(__file__).parent
args = sys.argv[1:]
if args[:2] != ["-m", "probes"] or (len(args) > 2 and args[2].startswith("net-")):
    os.execv(sys.executable, [sys.executable, *args])
from gpudiag.sim import SimulatedFleet, parse_fleet
from gpudiag.sim.runner import BundleUsage, parse_bundle_argv, run_bundle
host = json.loads((folder / "addresses.json").read_text())[os.environ["SSH_CONNECTION"].split()[2]]
fleet = SimulatedFleet(parse_fleet(json.loads((folder / "fleet.json").read_text()), "fleet.json"))
try:
    call = parse_bundle_argv([sys.executable, *args])
except BundleUsage as usage:
    sys.stderr.write(f"python -m probes: error: {usage}\\n")
    sys.exit(2)
with open(folder / f"{host}.calls", "a+") as counter:
    fcntl.flock(counter, fcntl.LOCK_EX)
    counter.seek(0)
    number = len(counter.read())
    counter.write("x")
result = run_bundle(call, fleet.node_state(host, number), fleet.draw(host, number)).command_result(600.0)
sys.stdout.write(result.stdout)
sys.stderr.write(result.stderr)
sys.exit(result.exit_status if result.exit_status is not None else 1)
'''


def simulated_node_python(folder: Path, fleet: dict[str, Any], addresses: dict[str, str]) -> str:
    """Write the wrapper, its program, ``fleet`` (a fleet file's JSON, its node names those of the
    hosts) and ``addresses`` (each host's SSH address: its node name) into ``folder``; returns the
    wrapper's path, for ``--python``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fleet.json").write_text(json.dumps(fleet))
    (folder / "addresses.json").write_text(json.dumps({address: name for name, address in addresses.items()}))
    program = folder / "node.py"
    program.write_text(NODE_PROGRAM)
    wrapper = folder / "node-python"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {program} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)
