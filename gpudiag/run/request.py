"""What a sweep is asked to do, one object per concern: which hosts and what runs on each
(``SweepOptions``: the probes, the fan-out, the time limits), how they are reached (``Reach``),
how the results are kept and judged (``Judging``), and the pair tests between them
(``LinkOptions``). The command line builds one; a pre-flight and a triage wrap theirs around the
same objects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..links.remote import PairTestOptions
from ..links.schedule import FULL, SCREEN
from ..pause import FocusRequest
from ..transport.ssh import SshSettings
from ..transport.sshconfig import SshOptions
from .fanout import SweepOptions
from .standin import StandInFleet

# --links auto: the screen schedule (kept as a name so stored options say what was asked).
AUTO_LINKS = "auto"
LINK_MODES = (AUTO_LINKS, SCREEN, FULL, "none")


@dataclass(frozen=True)
class Reach:
    """How the hosts are reached: SSH (``ssh``) with ``settings`` (host keys, and the caps on
    what one command may print, for every connector: SSH, this machine and srun); or srun
    (``launcher`` "slurm", with SSH for the hosts it cannot reach where ``launcher_fallback`` is
    "ssh", and the bundle staged in ``slurm_bundle_dir``); or this machine alone (``here``: the
    one host named, probed without SSH or srun, a prolog on the node); or a fleet that stands in
    for real hosts (``stand_in``, --simulate: its connector and pair tests, gpudiag.sim)."""

    ssh: SshOptions = SshOptions()
    settings: SshSettings = SshSettings()
    launcher: str = "ssh"
    launcher_fallback: str = "none"
    slurm_bundle_dir: str | None = None
    here: bool = False
    stand_in: StandInFleet | None = None


@dataclass(frozen=True)
class Judging:
    """Where results are kept (``store_path``; None: nowhere) and how they are judged: the
    thresholds file (None: the shipped ones), the stored baseline's name (None: 'default', if
    stored), whether suspects are re-tested, and the GPUs Slurm is configured to give each host
    (``slurm_gpus``, host -> count: a pre-flight's, gpudiag.slurm.nodes; a host that sees fewer
    is ``missing_gpu``)."""

    store_path: str | None = None
    thresholds_path: str | None = None
    baseline_name: str | None = None
    retest: bool = True
    slurm_gpus: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class LinkOptions:
    """The pair tests between hosts: the schedule (``mode``: LINK_MODES), where each host's
    data-plane address comes from, the test itself (``pair``), the screen's stride (None: one
    more than the last stored sweep's), and the fabric's ``topology`` files (gpudiag.fabric; empty:
    a simulated fleet's own fabric where it has one, else none; (NO_TOPOLOGY,): none)."""

    mode: str = AUTO_LINKS
    net_address: str = "auto"
    pair: PairTestOptions = PairTestOptions()
    screen_stride: int | None = None
    topology: tuple[str, ...] = ()  # (NO_TOPOLOGY,): none


@dataclass(frozen=True)
class SweepRequest:
    """A whole ``gpudiag sweep``: which hosts (``hosts_argument``; None: the stand-in fleet's
    own), what runs on each, how they are reached, how results are kept and judged, the pair
    tests, ``focus`` (--suspects: the suspects and their reference peers only) and ``budget_s``,
    the seconds for the whole run (every remote phase ends by then, gpudiag.run.budget; None: no
    run-wide limit)."""

    hosts_argument: str | None
    sweep: SweepOptions
    reach: Reach = Reach()
    judging: Judging = Judging()
    links: LinkOptions = LinkOptions()
    focus: FocusRequest | None = None
    budget_s: float | None = None
