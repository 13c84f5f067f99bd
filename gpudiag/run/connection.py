"""How a run reaches its hosts: a ``Connection``, which the command line builds from the
request's ``Reach`` and the hosts to sweep (gpudiag.cli.connect: SSH sessions, srun steps, this
machine, or a stand-in fleet's) and hands in through the run's ``Runtime``. The run uses what it
is given and builds no connector itself.

Without the command line's builder a run can reach a stand-in fleet only (``stand_in_only``):
library callers and tests that sweep real hosts hand in gpudiag.cli.connect.connect.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import InputError
from ..hosts import HostSpec
from ..links.remote import PairTestOptions
from ..links.rounds import PairRunner
from ..transport import Connector, Session
from .request import Reach


@dataclass(frozen=True)
class Connection:
    """What reaches the hosts: the ``connector`` (the run closes it); how many hosts at once
    (``fanout``) and pairs at once the open-file limit allows; each host's address as SSH or
    Slurm reaches it (``ssh_addresses``, for the pair tests' data plane); what had to be adapted
    (``notes``, the run's warnings); and how pair tests run: a stand-in fleet's own runner
    (``pairs``), else over each host's pooled session (``session_of``; None: no pair tests)."""

    connector: Connector
    fanout: int
    pairs_at_once: int
    ssh_addresses: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    pairs: Callable[[PairTestOptions], PairRunner] | None = None
    session_of: Callable[[str], Session | None] | None = None


# Builds the connection for ``hosts`` (after --suspects has chosen them) with at most ``fanout``
# hosts at once. Raises InputError for a reach that cannot be built, before any host is touched.
Connect = Callable[[Reach, Sequence[HostSpec], int], Connection]


def stand_in_only(reach: Reach, hosts: Sequence[HostSpec], fanout: int) -> Connection:
    """A stand-in fleet's connection: its connector and pair runner. Raises InputError for a
    reach of real hosts, which only the command line's builder connects to."""
    if reach.stand_in is None:
        raise InputError("this run was handed no way to reach real hosts: pass gpudiag.cli.connect.connect "
                         "as the runtime's connect")
    connector = reach.stand_in.connector()
    return Connection(connector, fanout, fanout, pairs=connector.pair_runner)
