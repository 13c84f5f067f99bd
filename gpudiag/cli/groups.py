"""The option groups the fleet commands share (sweep, preflight, triage), each defined once and
turned into the part of the request it fills (gpudiag.run.request): how the nodes are reached
(``reach_options``: Reach), how the results are kept and judged (``judging_options``: Judging)
and the pair tests between the nodes (``link_options``: LinkOptions). A command names the
members it has, with its own help where its words differ; a member it lacks leaves the
request's default."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from ..errors import InputError
from ..links.remote import PairTestOptions
from ..run.request import Judging, LinkOptions, Reach
from ..sim import FleetFile
from ..slurm.launcher import FALLBACKS, LAUNCHERS
from ..transport.ssh import SshSettings
from ..transport.sshconfig import SshOptions
from .options import (
    STORE_HELP,
    baseline_option,
    job_store,
    links_option,
    net_address_option,
    net_backend_option,
    net_line_rate_option,
    no_retest_option,
    run_store,
    ssh_options,
    store_path_option,
    thresholds_option,
    topology_option,
    with_options,
)

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

BASELINE_HELP = "Stored baseline to judge against (default: 'default', if stored)."
RETEST_HELP = "Report suspects without re-testing them: each stays unconfirmed and unchecked (exit 3)."


def reach_options(*, simulate_help: str, here_help: str | None = None, launcher_help: str | None = None,
                  fallback: bool = False, bundle_dir_help: str | None = None) -> Decorator:
    """How the nodes are reached: over SSH (ssh_options), a simulated fleet instead of real hosts
    (``--simulate``), and where the command has them (each ``*_help`` that option's help; None:
    the command has not), this machine alone (``--here``), srun (``--launcher``; ``fallback``:
    ``--launcher-fallback``) and the folder srun stages the bundle in (``--slurm-bundle-dir``).
    The command gets ``reach`` (Reach)."""
    members: dict[str, Callable[..., Any]] = {}  # each option by the Reach field its value fills
    if here_help is not None:
        members["here"] = click.option("--here", is_flag=True, help=here_help)
    if launcher_help is not None:
        members["launcher"] = click.option("--launcher", type=click.Choice(LAUNCHERS), default="ssh",
                                           show_default=True, help=launcher_help)
    if fallback:
        members["launcher_fallback"] = click.option(
            "--launcher-fallback", type=click.Choice(FALLBACKS), default="none", show_default=True,
            help="slurm: probe the hosts srun cannot reach (down, drained, not in the job) over SSH instead.")
    if bundle_dir_help is not None:
        members["slurm_bundle_dir"] = click.option("--slurm-bundle-dir", default=None, metavar="DIR",
                                                   help=bundle_dir_help)

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def with_reach(*args: Any, ssh: SshOptions, settings: SshSettings, simulate_path: str | None,
                       **kwargs: Any) -> Any:
            given = {field: kwargs.pop(field) for field in members}
            stand_in = FleetFile(simulate_path) if simulate_path is not None else None
            return function(*args, reach=Reach(ssh=ssh, settings=settings, stand_in=stand_in, **given), **kwargs)

        simulate = click.option("--simulate", "simulate_path", default=None, metavar="FLEET.json", help=simulate_help)
        return ssh_options(with_options(with_reach, [simulate, *members.values()]))

    return decorate


def judging_options(*, no_store_help: str, store_help: str = STORE_HELP, baseline_help: str = BASELINE_HELP,
                    retest_help: str = RETEST_HELP, job: bool = False) -> Decorator:
    """Where the results are kept (``--store``, ``--no-store``) and how they are judged (the
    thresholds file, the stored baseline, whether suspects are re-tested), each option with the
    command's help: the command gets ``judging`` (Judging). ``job``: a command that judges one
    job or node (preflight, triage), where --no-store with --store or --baseline is refused
    (job_store)."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def with_judging(*args: Any, store_path: str | None, no_store: bool, thresholds_path: str | None,
                         baseline_name: str | None, no_retest: bool, **kwargs: Any) -> Any:
            store = job_store(store_path, no_store, baseline_name) if job else run_store(store_path, no_store)
            judging = Judging(store_path=store, thresholds_path=thresholds_path, baseline_name=baseline_name,
                              retest=not no_retest)
            return function(*args, judging=judging, **kwargs)

        return with_options(with_judging, [
            store_path_option(store_help),
            click.option("--no-store", is_flag=True, help=no_store_help),
            thresholds_option,
            baseline_option(baseline_help),
            no_retest_option(retest_help),
        ])

    return decorate


def link_options(links_help: str, *, tuning: bool = True, no_links: bool = False) -> Decorator:
    """The pair tests between nodes: the command gets ``links`` (LinkOptions), whose pair tests
    run on the command's --python and over host memory with its --pause (where it has one).
    ``tuning``: the command sets how long and with how many streams each pair is tested, NCCL's
    socket fallback and the screen's stride (else the defaults hold: a pre-flight's plan sets
    the length); ``no_links``: it has --no-links, the same as --links none."""
    members = [links_option(links_help)]
    if no_links:
        members.append(click.option("--no-links", is_flag=True, help="The same as --links none."))
    members += [net_backend_option, net_address_option]
    if tuning:
        members += [
            click.option("--net-duration", type=click.FloatRange(min=0.1), default=PairTestOptions.duration_s,
                         show_default=True, metavar="S", help="Timed seconds per direction of each pair test."),
            click.option("--net-streams", type=click.IntRange(min=1, max=64), default=PairTestOptions.streams,
                         show_default=True, help="Parallel TCP streams (tcp) or queue pairs (perftest) per pair test."),
        ]
    members.append(net_line_rate_option)
    if tuning:
        members += [
            click.option("--screen-stride", type=click.IntRange(min=1), default=None, metavar="K",
                         help="Screen each node with the nodes K places before and after it in the host list "
                              "(default: one more than the last stored sweep's, so successive sweeps reach every "
                              "pair)."),
            click.option("--net-allow-socket", is_flag=True,
                         help="nccl: let NCCL fall back to sockets instead of failing when no IB path exists."),
        ]
    members.append(topology_option)

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def with_links(*args: Any, links: str, net_backend: str, net_address: str, net_line_rate: float | None,
                       topology: tuple[str, ...], no_links: bool = False,
                       net_duration: float = PairTestOptions.duration_s, net_streams: int = PairTestOptions.streams,
                       screen_stride: int | None = None, net_allow_socket: bool = False, **kwargs: Any) -> Any:
            pair = PairTestOptions(backend=net_backend, duration_s=net_duration, streams=net_streams,
                                   python=kwargs["python"], line_rate_gbps=net_line_rate,
                                   allow_socket=net_allow_socket, host_memory=kwargs.get("pause", False))
            chosen = LinkOptions(mode=_link_mode(links, no_links), net_address=net_address, pair=pair,
                                 screen_stride=screen_stride, topology=topology)
            return function(*args, links=chosen, **kwargs)

        return with_options(with_links, members)

    return decorate


def _link_mode(links: str, no_links: bool) -> str:
    """--links, with --no-links its synonym of --links none; InputError where they disagree."""
    if no_links and links not in ("auto", "none"):
        raise InputError(f"--no-links and --links {links} disagree: give one of them")
    return "none" if no_links else links
