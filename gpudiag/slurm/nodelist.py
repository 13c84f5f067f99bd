"""The hosts of a Slurm allocation: ``$SLURM_JOB_NODELIST`` in Slurm's folded node-list syntax
(``gpu[001-004,010],cpu1``), expanded with the same ClusterShell node sets as ``--hosts``, or
by Slurm itself with ``scontrol show hostnames``."""

from __future__ import annotations

import io
from collections.abc import Mapping

from ..errors import InputError
from ..hosts import HostSpec, load_hosts
from .commands import run_slurm

# Where Slurm puts the node list of the job a process runs in (SLURM_NODELIST: older name).
NODELIST_VARIABLES = ("SLURM_JOB_NODELIST", "SLURM_NODELIST")


def job_nodelist(environ: Mapping[str, str]) -> str | None:
    """The folded node list of the job this process runs in, None outside a job."""
    for variable in NODELIST_VARIABLES:
        value = environ.get(variable, "").strip()
        if value:
            return value
    return None


def job_id(environ: Mapping[str, str]) -> str | None:
    """The id of the job this process runs in (``SLURM_JOB_ID``), None outside a job."""
    return environ.get("SLURM_JOB_ID", "").strip() or None


def expand_nodelist(nodelist: str) -> list[str]:
    """Every node of a folded Slurm node list, in its order: ``gpu[001-002],cpu1`` → gpu001,
    gpu002, cpu1. Raises InputError naming the list when it is not valid node-list syntax."""
    return [host.host for host in nodelist_hosts(nodelist)]


def nodelist_hosts(nodelist: str, source: str = "the node list") -> list[HostSpec]:
    """The hosts of a folded Slurm node list, for a sweep. ``source`` names where the list came
    from in errors. Raises InputError when it is empty or not valid node-list syntax."""
    # As one line of a hosts file: a name that happens to be a file here is never read as one.
    try:
        return load_hosts("-", io.StringIO(nodelist.strip() + "\n"))
    except InputError as error:
        detail = str(error).split(": ", 1)[-1]
        raise InputError(f"{source} {nodelist!r} is not a valid Slurm node list: {detail}") from None


def job_hosts(environ: Mapping[str, str]) -> list[HostSpec]:
    """The hosts of the job this process runs in. Raises InputError outside a job (no
    ``$SLURM_JOB_NODELIST``) or when the list is not valid."""
    nodelist = job_nodelist(environ)
    if nodelist is None:
        raise InputError("$SLURM_JOB_NODELIST is not set: run inside a Slurm job (salloc, sbatch, a prolog) or "
                         "name the hosts")
    return nodelist_hosts(nodelist, "$SLURM_JOB_NODELIST")


def in_slurm_job(environ: Mapping[str, str]) -> bool:
    """Whether this process runs in a Slurm job or its prolog ($SLURM_JOB_ID is set)."""
    return bool(environ.get("SLURM_JOB_ID", "").strip())


def job_hosts_argument(environ: Mapping[str, str]) -> tuple[str, io.StringIO] | None:
    """The hosts of the job this process runs in, as a ``--hosts`` argument: ``-`` and a stdin that
    holds the node list as its one line, so a list that happens to name a file here is never read
    as one. None outside a job. Raises InputError naming $SLURM_JOB_NODELIST when the list is not
    valid."""
    nodelist = job_nodelist(environ)
    if nodelist is None:
        return None
    nodelist_hosts(nodelist, "$SLURM_JOB_NODELIST")
    return "-", io.StringIO(nodelist.strip() + "\n")


def scontrol_hostnames(nodelist: str, scontrol: str = "scontrol") -> list[str]:
    """Every node of ``nodelist`` as Slurm itself expands it (``scontrol show hostnames``).
    Raises SlurmCommandError when scontrol is missing or rejects the list."""
    output = run_slurm([scontrol, "show", "hostnames", nodelist])
    return [line.strip() for line in output.stdout.splitlines() if line.strip()]
