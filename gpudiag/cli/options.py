"""What the commands share: the ``--store`` option, where the store is by default, the SSH and
output-cap options, the options the fleet commands' groups are made of (gpudiag.cli.groups),
and the hint under a table that left columns out."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import click

from ..errors import InputError
from ..fabric.readers import NO_TOPOLOGY
from ..links.remote import NET_BACKENDS
from ..records import DTYPES
from ..report import check_writable, write_report
from ..report.prometheus import check_prom_file
from ..run.request import LINK_MODES
from ..store.store import default_store_path
from ..transport.bounded import KIB, MIB, OutputLimits
from ..transport.ssh import SshSettings
from ..transport.sshconfig import SshOptions

# Where a table leaves out columns for want of room, its caption says so and how to see them.
WIDER_HINT = "a wider terminal (COLUMNS) shows them"


STORE_HELP = "SQLite store (default: $XDG_DATA_HOME/gpudiag/gpudiag.db)."


def store_path_option(help_text: str) -> Callable[[click.decorators.FC], click.decorators.FC]:
    """The ``--store PATH`` option (into the ``store_path`` parameter), with ``help_text``."""
    return click.option("--store", "store_path", default=None, metavar="PATH", help=help_text)


def store_option(function: click.decorators.FC) -> click.decorators.FC:
    """The ``--store PATH`` option (into the ``store_path`` parameter)."""
    return store_path_option(STORE_HELP)(function)


def node_python_option(default: str | None, help_text: str, *,
                       here: bool = False) -> Callable[[click.decorators.FC], click.decorators.FC]:
    """The ``--python PATH`` option (into ``python``): the interpreter that runs the probe bundle.
    A command name is looked up on the node's PATH. With ``here`` (the probes run on this
    machine) a relative path is taken from the current folder; for the nodes one is refused
    (InputError): the bundle runs from its own folder there, where ``./venv/bin/python`` names
    nothing, and this machine's current folder means nothing on a node."""
    return click.option("--python", "python", default=default, show_default=default is not None, metavar="PATH",
                        callback=_absolute_path if here else _node_path, help=help_text)


def _absolute_path(context: click.Context, parameter: click.Parameter, value: str | None) -> str | None:
    if value is None or "/" not in value or os.path.isabs(value):
        return value
    return os.path.abspath(value)


def _node_path(context: click.Context, parameter: click.Parameter, value: str | None) -> str | None:
    if value is None or "/" not in value or os.path.isabs(value):
        return value
    raise InputError(f"--python {value}: a relative path names nothing on the nodes (the probes run from the "
                     f"bundle's folder there); give an absolute path such as /opt/venv/bin/python, or a command "
                     f"name looked up on the node's PATH such as python3")


def check_identity_files(identities: tuple[str, ...]) -> None:
    """Raise InputError naming the first ``-i`` file that does not exist or cannot be read,
    before any node is touched (SSH would otherwise report it as an authentication failure)."""
    for path in identities:
        expanded = os.path.expanduser(path)
        if not os.path.isfile(expanded):
            raise InputError(f"-i {path}: no such file; give the path of an SSH private key "
                             f"(such as ~/.ssh/id_ed25519)")
        if not os.access(expanded, os.R_OK):
            raise InputError(f"-i {path}: not readable by this user; fix its permissions or give another key")


def check_deadline(duration_s: float, deadline_s: float) -> None:
    """Raise InputError when ``--deadline`` leaves no room for one probe's timed load of
    ``--duration`` seconds: every load probe would end unchecked (exit 3) without measuring."""
    if deadline_s <= duration_s:
        raise InputError(f"--deadline {deadline_s:g} is not longer than --duration {duration_s:g}: no probe could "
                         f"finish its timed load and every one would end unchecked; raise --deadline above "
                         f"{duration_s:g} s or lower --duration")


def with_options(function: Callable[..., Any], decorators: list[Callable[..., Any]]) -> Callable[..., Any]:
    """``function`` under ``decorators``, the first listed outermost (as if written above it in order)."""
    for decorator in reversed(decorators):
        function = decorator(function)
    return function


def ssh_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """How commands that reach nodes over SSH take its settings (sweep, preflight, triage), and
    the caps on what one command on a node may print (output_options): the command gets ``ssh``
    (SshOptions) and ``settings`` (SshSettings, the caps in it)."""

    @functools.wraps(function)
    def with_ssh(*args: Any, ssh_config: str | None, identities: tuple[str, ...], user: str | None,
                 known_hosts: str | None, accept_new_host_keys: bool, connect_timeout: float, output: OutputLimits,
                 **kwargs: Any) -> Any:
        check_identity_files(identities)
        ssh = SshOptions(config_file=ssh_config, identity_files=identities, user=user, known_hosts=known_hosts,
                         connect_timeout_s=connect_timeout)
        settings = SshSettings(accept_new_host_keys=accept_new_host_keys, output=output)
        return function(*args, ssh=ssh, settings=settings, **kwargs)

    decorators = [
        click.option("--ssh-config", default=None, metavar="FILE", help="OpenSSH client configuration to use."),
        click.option("-i", "--identity", "identities", multiple=True, metavar="FILE", help="Private key (repeatable)."),
        click.option("-l", "--user", default=None, help="Remote user, where the hosts and the SSH config name none."),
        click.option("--known-hosts", default=None, metavar="FILE",
                     help="known_hosts file to check host keys against."),
        click.option("--accept-new-host-keys", is_flag=True,
                     help="Trust and record host keys seen for the first time (changed keys are always refused)."),
        click.option("--connect-timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
                     metavar="S", help="TCP connect timeout, where the SSH config sets none."),
    ]
    return with_options(output_options(with_ssh), decorators)


def output_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """The caps on what one command on a node may print (sweep, probe, preflight, triage): the
    command gets ``output`` (OutputLimits). Raises InputError when a line may be longer than
    the whole output."""

    @functools.wraps(function)
    def with_output(*args: Any, max_output_mib: int, max_line_kib: int, **kwargs: Any) -> Any:
        return function(*args, output=output_limits(max_output_mib, max_line_kib), **kwargs)

    defaults = OutputLimits()
    decorators = [
        click.option("--max-output-mib", type=click.IntRange(min=1), default=defaults.max_bytes // MIB,
                     show_default=True, metavar="MIB",
                     help="Most output one node's probe run may print, in MiB; past it the run is ended and the "
                          "host is a probe_error naming the cap."),
        click.option("--max-line-kib", type=click.IntRange(min=1), default=defaults.max_line_bytes // KIB,
                     show_default=True, metavar="KIB",
                     help="Longest line a node may print, in KiB; past it the run is ended as for --max-output-mib."),
    ]
    return with_options(with_output, decorators)


def output_limits(max_output_mib: int, max_line_kib: int) -> OutputLimits:
    """The OutputLimits of ``--max-output-mib`` and ``--max-line-kib`` (the stderr tail as by
    default). Raises InputError when a line may be longer than the whole output."""
    if max_line_kib * KIB > max_output_mib * MIB:
        raise InputError(f"--max-line-kib {max_line_kib} is more than --max-output-mib {max_output_mib} "
                         f"({max_output_mib * MIB // KIB} KiB): a line cannot be longer than the whole output; "
                         f"lower --max-line-kib or raise --max-output-mib")
    return OutputLimits(max_bytes=max_output_mib * MIB, max_line_bytes=max_line_kib * KIB)


def json_option(help_text: str) -> Callable[[click.decorators.FC], click.decorators.FC]:
    """``--json PATH|-`` (into ``json_path``), the same in every command: PATH writes the file,
    ``-`` writes to stdout. A value that starts with ``-`` (``--json --duration 2``: a flag's
    old habit) is refused with the fix (InputError)."""
    return click.option("--json", "json_path", default=None, metavar="PATH|-", callback=json_target,
                        help=f"{help_text} PATH writes the file, - writes to stdout.")


def json_target(context: click.Context, parameter: click.Parameter, value: str | None) -> str | None:
    """The callback of an option that takes ``PATH|-``: InputError for a value that is another option."""
    if value is None or value == "-" or not value.startswith("-"):
        return value
    option = (parameter.opts or ["--json"])[0]
    raise InputError(f"{option} {value}: {option} takes a PATH or - (stdout), not another option; write {option} "
                     f"- to print it, or {option} FILE")


def emit_json(text: str, json_path: str) -> None:
    """``text`` to stdout for ``--json -``, else written to the file (whole, atomically); raises
    OutputError when it cannot be written."""
    if json_path == "-":
        click.echo(text, nl=False)
    else:
        write_report(text, json_path)


def probes_option(default_text: str) -> Callable[[click.decorators.FC], click.decorators.FC]:
    """``--probes NAMES`` (into ``probe_list``): probes for every host, separated by commas or
    spaces, as ``listed_probe_names`` reads them; ``default_text`` says which run when none is
    named."""
    return click.option("--probes", "probe_list", default="", metavar="NAMES",
                        help=f"Probes to run on every host, separated by commas or spaces ({default_text}; name "
                             f"xid to read the kernel log's Xids and NVML's pending recovery actions: it needs read "
                             f"access to the journal).")


def deadline_option(default: float | None, default_text: str = "") -> Callable[[click.decorators.FC],
                                                                               click.decorators.FC]:
    """``--deadline S`` (into ``deadline``): the probes' overall deadline on a node."""
    return click.option("--deadline", type=click.FloatRange(min=1), default=default, show_default=default is not None,
                        metavar="S", help=f"Overall deadline of the probes on a node, in seconds{default_text}; "
                                          "longer than the load of one probe; a probe it cuts short is an error "
                                          "record (exit 3).")


def dtype_option(function: click.decorators.FC) -> click.decorators.FC:
    """``--dtype`` (into ``dtype``): the GEMM data type."""
    return click.option("--dtype", type=click.Choice(DTYPES), default="bf16", show_default=True,
                        help="GEMM data type.")(function)


def max_gpu_mem_option(function: click.decorators.FC) -> click.decorators.FC:
    """``--max-gpu-mem MIB`` (into ``max_gpu_mem``)."""
    return click.option("--max-gpu-mem", type=click.IntRange(min=1), default=None, metavar="MIB",
                        help="Most GPU memory one probe may take on one GPU, in MiB.")(function)


def links_option(help_text: str) -> Callable[[click.decorators.FC], click.decorators.FC]:
    """``--links`` (into ``links``): which pairs of nodes are tested (LINK_MODES)."""
    return click.option("--links", type=click.Choice(LINK_MODES), default="auto", show_default=True, help=help_text)


def net_backend_option(function: click.decorators.FC) -> click.decorators.FC:
    """``--net-backend`` (into ``net_backend``)."""
    return click.option("--net-backend", type=click.Choice(NET_BACKENDS), default="auto", show_default=True,
                        help="Pair-test backend: perftest (ib_write_bw per HCA), nccl (send/recv per rail), tcp; "
                             "auto: perftest where ib_write_bw and RDMA devices exist, else nccl with CUDA, else "
                             "tcp.")(function)


def net_address_option(function: click.decorators.FC) -> click.decorators.FC:
    """``--net-address`` (into ``net_address``)."""
    return click.option("--net-address", default="auto", show_default=True, metavar="auto|field|ssh|iface:NAME",
                        help="Each host's data-plane address for pair tests: the hosts file's net= field, the "
                             "address SSH reaches, or the address of interface NAME on the node; auto: the field "
                             "where given, else ssh.")(function)


def net_line_rate_option(function: click.decorators.FC) -> click.decorators.FC:
    """``--net-line-rate GBPS`` (into ``net_line_rate``)."""
    return click.option("--net-line-rate", type=click.FloatRange(min=0.001), default=None, metavar="GBPS",
                        help="The data links' line rate in Gb/s, where the nodes' own port speed is wrong or unknown "
                             "(virtual NICs, rate-limited overlays); links are judged against it.")(function)


# Where a site sets its topology once: paths separated as in $PATH (gpudiag.fabric.readers).
TOPOLOGY_ENV = "GPUDIAG_TOPOLOGY"


def topology_option(function: click.decorators.FC) -> click.decorators.FC:
    """The ``--topology FILE`` option, repeatable (into ``topology``: the paths, with the site's
    $GPUDIAG_TOPOLOGY where none is given; ``none`` turns it off)."""
    return click.option(
        "--topology", "topology", multiple=True, metavar="FILE", callback=_topology_paths,
        help=f"The fabric between the nodes: an ibnetdiscover capture, Slurm's topology.conf, lldpctl -f json or "
             f"gpudiag's topology JSON (repeat it for one file per rail); the screen then loads every switch link "
             f"and names a slow one (default: ${TOPOLOGY_ENV}, paths separated by '{os.pathsep}'; none: no "
             f"topology).")(function)


def _topology_paths(context: click.Context, parameter: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    if not value:
        site = os.environ.get(TOPOLOGY_ENV, "").strip()
        value = tuple(path for path in site.split(os.pathsep) if path) if site else ()
    if NO_TOPOLOGY in value and len(value) > 1:
        raise InputError(f"--topology {NO_TOPOLOGY} turns the topology off: give it alone, not with files")
    return tuple(value)


def thresholds_option(function: click.decorators.FC) -> click.decorators.FC:
    """``--thresholds FILE`` (into ``thresholds_path``)."""
    return click.option("--thresholds", "thresholds_path", default=None, metavar="FILE",
                        help="Detection thresholds overriding the shipped defaults (JSON with units).")(function)


def baseline_option(help_text: str) -> Callable[[click.decorators.FC], click.decorators.FC]:
    """``--baseline NAME`` (into ``baseline_name``)."""
    return click.option("--baseline", "baseline_name", default=None, metavar="NAME", help=help_text)


def no_retest_option(help_text: str) -> Callable[[click.decorators.FC], click.decorators.FC]:
    """``--no-retest``."""
    return click.option("--no-retest", is_flag=True, help=help_text)


def exclude_file_option(help_text: str) -> Callable[[click.decorators.FC], click.decorators.FC]:
    """``--exclude-file PATH`` (into ``exclude_file``): where the hosts a job should not get are written."""
    return click.option("--exclude-file", default=None, metavar="PATH", help=help_text)


def store_location(store_path: str | None) -> str:
    """``--store``'s path, else the default store's (gpudiag.store.store.default_store_path)."""
    return store_path or str(default_store_path(os.environ))


def job_store(store_path: str | None, no_store: bool, baseline_name: str | None) -> str | None:
    """run_store for the commands that judge one job or node (preflight, triage), where --no-store
    with --store or --baseline is refused. Raises InputError."""
    if no_store and (store_path is not None or baseline_name is not None):
        raise InputError("--no-store reads no store: leave out --store and --baseline")
    return run_store(store_path, no_store)


def run_store(store_path: str | None, no_store: bool) -> str | None:
    """The store a run keeps its results in or reads its baseline from: ``--store``, else the
    default one; None with ``--no-store``."""
    return None if no_store else store_location(store_path)


def check_outputs(json_path: str | None, exclude_file: str | None = None, prom_file: str | None = None) -> None:
    """Raise InputError before any node is touched when an output asked for could not be written
    (``--json -`` is stdout)."""
    if json_path is not None and json_path != "-":
        check_writable(json_path, "--json")
    if exclude_file is not None:
        check_writable(exclude_file, "--exclude-file")
    if prom_file is not None:
        check_prom_file(prom_file)
