"""What Slurm says about each node: its state, why it was drained or set down, its address.

Read from ``scontrol show node -o`` (one line per node, ``Key=value`` fields). Values hold no
spaces except ``OS=`` (words follow it) and ``Reason=``, which Slurm prints last: everything
after it, less the ``[user@time]`` stamp Slurm appends, is the reason, ``=`` signs and all. The
stamp says who set the reason and when: scontrol writes the user's name and the time as this
machine's clock and ``SLURM_TIME_FORMAT`` say, so gpudiag asks with ``SLURM_TIME_FORMAT=%s``
(seconds since the epoch: no time zone, no ``relative`` form to guess at).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..hosts import fold_hosts
from .commands import COMMAND_TIMEOUT_S, SlurmCommandError, run_slurm

# States in which no new step can start on a node (base states and flags, as scontrol spells them).
_UNUSABLE = frozenset({"DOWN", "FAIL", "FAILING", "NOT_RESPONDING", "FUTURE", "POWERED_DOWN", "POWER_DOWN",
                       "POWERING_DOWN", "POWERING_UP", "UNKNOWN", "INVALID_REG", "REBOOT_ISSUED"})
# Flags that keep a new job off a node (a step inside a job that holds the node still runs).
_NO_NEW_JOBS = frozenset({"DRAIN", "DRAINED", "DRAINING", "MAINTENANCE", "RESERVED"})
_KEY = re.compile(r"([A-Za-z][A-Za-z0-9_:]*)=(.*)")
# A GRES type that names a MIG profile (``1g.10gb``): Slurm then counts slices, not GPUs.
_MIG_TYPE = re.compile(r"\d+g\.\d+gb", re.IGNORECASE)
_REASON_STAMP = re.compile(r"\s*\[([^\[\]@]*)@([^\[\]]*)\]\s*$")
# scontrol prints every time (the reason's stamp too) as seconds since the epoch with this.
EPOCH_TIME_FORMAT = {"SLURM_TIME_FORMAT": "%s"}
_STANDARD_TIME = "%Y-%m-%dT%H:%M:%S"


@dataclass(frozen=True)
class ReasonStamp:
    """Slurm's ``[user@time]`` after a reason: who set it (``user``, as scontrol names the uid)
    and when (``epoch``: seconds since the epoch; None when the time cannot be read). ``text``
    is the stamp as printed, between the brackets."""

    user: str
    epoch: float | None
    text: str

    @classmethod
    def read(cls, user: str, when: str) -> ReasonStamp:
        """From the stamp's two halves: the time in seconds (``SLURM_TIME_FORMAT=%s``) or
        Slurm's standard ``2026-11-29T10:00:00`` in this machine's time zone (where a wrapper
        ignored the format asked for); any other form leaves ``epoch`` None."""
        user, when = user.strip(), when.strip()
        epoch: float | None = None
        if when.isdigit():
            epoch = float(when)
        else:
            try:
                epoch = time.mktime(time.strptime(when, _STANDARD_TIME))
            except (ValueError, OverflowError):
                epoch = None
        return cls(user, epoch, f"{user}@{when}")


@dataclass(frozen=True)
class NodeState:
    """One node as Slurm sees it. ``state`` as scontrol prints it (``IDLE+DRAIN``); ``reason``
    without its ``[user@time]`` stamp, None when none is set; ``address`` the NodeAddr;
    ``stamp`` who set the reason and when (None: no reason, or Slurm printed no stamp); ``gres``
    the node's configured generic resources as scontrol prints them (``gpu:h100:8(S:0-1)``; None:
    none)."""

    name: str
    state: str
    reason: str | None = None
    address: str | None = None
    stamp: ReasonStamp | None = None
    gres: str | None = None

    @property
    def gpus(self) -> int | None:
        """The GPUs Slurm is configured to give this node (configured_gpus), None where it does not say."""
        return configured_gpus(self.gres)

    @property
    def words(self) -> frozenset[str]:
        """The base state and every flag: ``IDLE+DRAIN`` → {IDLE, DRAIN}; a trailing ``*``
        (not responding, in sinfo's short form) counts as NOT_RESPONDING."""
        text = self.state.upper()
        words = set(text.rstrip("*~#!%$@^-").split("+"))
        if text.endswith("*"):
            words.add("NOT_RESPONDING")
        return frozenset(word for word in words if word)

    @property
    def drained(self) -> bool:
        """True when the node is drained or draining (no new job starts there)."""
        return bool({"DRAIN", "DRAINED", "DRAINING"} & self.words)

    def describe(self) -> str:
        """``n3 is DOWN+NOT_RESPONDING (reason: "hand")``."""
        reason = f' (reason: "{self.reason}")' if self.reason else ""
        return f"{self.name} is {self.state} in Slurm{reason}"

    def launch_problem(self, allocation: frozenset[str] | None) -> str | None:
        """Why ``srun`` cannot run a task here, or None when it can. ``allocation``: the nodes of
        the job the controller runs in (a step can only use those), None outside a job (a new
        job is made, which drained nodes do not take)."""
        if self.words & _UNUSABLE:
            return f"{self.describe()}: srun cannot start a task there"
        if allocation is not None:
            if self.name not in allocation:
                return (f"{self.name} is not in this job's allocation ({fold_hosts(allocation)}): srun can only "
                        f"start tasks on the job's nodes")
            return None
        if self.words & _NO_NEW_JOBS:
            return f"{self.describe()}: a new job cannot start there"
        return None


def parse_show_node(text: str) -> dict[str, NodeState]:
    """The nodes of ``scontrol show node -o`` output (one ``NodeName=...`` line each), by name;
    other lines (``Node x not found``) are skipped."""
    nodes: dict[str, NodeState] = {}
    for line in text.splitlines():
        if not line.startswith("NodeName="):
            continue
        fields, reason, stamp = _fields(line)
        name = fields["NodeName"]
        gres = fields.get("Gres")
        nodes[name] = NodeState(name=name, state=fields.get("State", "UNKNOWN"), reason=reason,
                                address=fields.get("NodeAddr") or None, stamp=stamp if reason else None,
                                gres=None if gres in (None, "", "(null)") else gres)
    return nodes


def configured_gpus(gres: str | None) -> int | None:
    """The GPUs a node's configured ``Gres=`` gives: the sum of its ``gpu`` entries' counts
    (``gpu:h100:8(S:0-1)``: 8; ``gpu:a100:2,gpu:h100:2``: 4). None where it names no GPU, where a
    count is not a whole number, or where a type names a MIG profile (``gpu:1g.10gb:7`` counts
    slices, not GPUs)."""
    if not gres:
        return None
    total, found = 0, False
    for entry in re.sub(r"\([^)]*\)", "", gres).split(","):  # (S:0-1): the sockets, which may hold commas
        name, *rest = entry.strip().split(":")
        if name != "gpu":
            continue
        count = rest[-1] if rest else "1"  # a bare ``gpu`` is one
        if not count.isdigit() or any(_MIG_TYPE.fullmatch(kind) for kind in rest[:-1]):
            return None
        total, found = total + int(count), True
    return total if found else None


def _fields(line: str) -> tuple[dict[str, str], str | None, ReasonStamp | None]:
    """The ``Key=value`` fields of one line, its reason (None when unset or ``none``) and the
    reason's stamp."""
    head, marker, tail = line.partition(" Reason=")
    found = _REASON_STAMP.search(tail) if marker else None
    stamp = ReasonStamp.read(found.group(1), found.group(2)) if found is not None else None
    reason = _REASON_STAMP.sub("", tail).strip() if marker else None
    fields: dict[str, str] = {}
    last: str | None = None
    for token in head.split():
        match = _KEY.fullmatch(token)
        if match is not None:
            last = match.group(1)
            fields[last] = match.group(2)
        elif last is not None:  # a value with spaces (OS=Linux 6.1 #1 SMP ...)
            fields[last] += " " + token
    if reason is not None and reason.lower() in ("", "none", "(null)"):
        reason = None
    return fields, reason, stamp


def query_nodes(names: Iterable[str] | None = None, scontrol: str = "scontrol",
                timeout_s: float = COMMAND_TIMEOUT_S) -> dict[str, NodeState]:
    """Slurm's view of ``names`` (every node when None), by name; a name Slurm does not know is
    left out. Raises SlurmCommandError when scontrol cannot run, or the controller does not
    answer within ``timeout_s`` seconds (scontrol is then ended)."""
    wanted = sorted(set(names)) if names is not None else None
    if wanted == []:
        return {}
    argv = [scontrol, "show", "node", "-o"] + ([fold_hosts(wanted)] if wanted else [])
    output = run_slurm(argv, timeout_s=timeout_s, check=False, env=EPOCH_TIME_FORMAT)
    nodes = parse_show_node(output.stdout)
    if output.exit_status != 0 and not nodes and not _only_unknown(output.stdout + output.stderr):
        raise SlurmCommandError(f"{output.command} failed: {output.why()}")
    return nodes if wanted is None else {name: node for name, node in nodes.items() if name in set(wanted)}


def _only_unknown(text: str) -> bool:
    """True when scontrol's complaint is only that nodes do not exist (not a controller failure)."""
    lines = [line for line in text.splitlines() if line.strip()]
    return bool(lines) and all(re.fullmatch(r"Node \S+ not found", line.strip()) for line in lines)


def launch_problems(names: Iterable[str], nodes: Mapping[str, NodeState],
                    allocation: frozenset[str] | None) -> dict[str, str]:
    """For each of ``names`` that srun cannot run on, why (unknown to Slurm, down, drained,
    outside the allocation)."""
    problems: dict[str, str] = {}
    for name in names:
        node = nodes.get(name)
        if node is None:
            problems[name] = f"Slurm knows no node called {name}"
            continue
        problem = node.launch_problem(allocation)
        if problem is not None:
            problems[name] = problem
    return problems
