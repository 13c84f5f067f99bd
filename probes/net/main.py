"""``python -m probes net-server|net-client|net-info``: the command line of the pair tests, which
picks the backend (``--backend auto``) and hands the test to it (probes/net/common.py has
the protocol the backends share; this module alone imports the backends, so they never import it)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Sequence
from typing import Any

from ..runner import EXIT_OK, EXIT_USAGE
from . import common
from .common import (
    ACCEPT_WINDOW_S,
    BACKENDS,
    DIRECTIONS,
    MAX_DURATION_S,
    MAX_STREAMS,
    MAX_TRACE_HOPS,
    NCCL_MIN_BYTES,
    NetOptions,
    Output,
    choose_backend,
    detect_capabilities,
    split_host_port,
)
from .perftest_messages import MAX_RUNS_PER_RAIL

# --- command line ------------------------------------------------------------------------------

def parse_arguments(argv: Sequence[str]) -> tuple[str, NetOptions]:
    """(command, options) from ``argv`` (its first word is the command). Exits 2 on misuse."""
    parser = argparse.ArgumentParser(prog="python -m probes", description=common.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    server = commands.add_parser("net-server", help="serve one pair test on an ephemeral port")
    server.add_argument("--backend", choices=(*BACKENDS, "auto"), default="tcp")
    server.add_argument("--bind", default="", metavar="ADDR",
                        help="the address the client will connect to: listen there only (default: all)")
    server.add_argument("--accept-window", type=float, default=ACCEPT_WINDOW_S, metavar="S",
                        help="seconds to wait for a client that proves the secret (default: %(default)s)")
    client = commands.add_parser("net-client", help="run one pair test against a net-server")
    client.add_argument("--backend", choices=BACKENDS, required=True,
                        help="the backend the server's listening line names")
    client.add_argument("--connect", required=True, metavar="HOST:PORT")
    client.add_argument("--duration", type=float, default=2.0, metavar="S", help="timed seconds per direction")
    client.add_argument("--streams", type=int, default=4, metavar="N",
                        help="parallel TCP streams, or perftest QPs (one ib_write_bw each, per rail)")
    client.add_argument("--direction", choices=("both", *DIRECTIONS), default="both")
    client.add_argument("--trace-hops", type=int, default=0, metavar="K",
                        help=f"tcp: find the routers at TTL 2..K+1 on each stream's own path before it sends, "
                             f"for the client_to_server record (0 to {MAX_TRACE_HOPS}; default: no tracing)")
    client.add_argument("--message-bytes", type=int, default=None, metavar="B",
                        help="bytes per transfer (nccl: at least 64 MiB, default 64 MiB; perftest: default 1 MiB)")
    for sub in (server, client):
        sub.add_argument("--token", default=None, metavar="HEX|-",
                         help="the pair test's secret (32-128 hex digits), or - for the first line of stdin")
        sub.add_argument("--stdin-lifeline", action="store_true",
                         help="exit as soon as stdin reaches end of file (the controller is gone)")
        sub.add_argument("--deadline", type=float, default=60.0, metavar="S",
                         help="the process exits by itself after this many seconds")
        sub.add_argument("--rails", default="all", metavar="LIST", help="rails to test, e.g. 0,3 (default: all)")
        sub.add_argument("--hcas", default=None, metavar="LIST", help="RDMA devices rails may use (default: all)")
        sub.add_argument("--allow-socket", action="store_true",
                         help="nccl: let NCCL fall back to sockets instead of requiring IB")
        sub.add_argument("--gid-index", type=int, default=None, metavar="N", help="perftest: GID index (-x), RoCE")
        sub.add_argument("--no-gpu-direct", action="store_true", help="perftest: host memory even with GPUDirect")
        sub.add_argument("--host-memory", action="store_true",
                         help="no GPU memory at all (a job paused for mitigation holds it): perftest without "
                              "GPUDirect, auto never picks nccl, and nccl is refused")
        sub.add_argument("--ib-write-bw", default=None, metavar="PATH", help="perftest: the ib_write_bw to run")
        sub.add_argument("--sysfs-root", default="/sys", metavar="DIR", help=argparse.SUPPRESS)
    info = commands.add_parser("net-info", help="print the backend --backend auto picks and the rails")
    info.add_argument("--interface", default=None, metavar="NAME",
                      help="print only NAME's addresses (the data-plane address a controller asks for)")
    info.add_argument("--sysfs-root", default="/sys", metavar="DIR", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.command == "net-info":
        return arguments.command, NetOptions(role="info", backend="auto", sysfs_root=arguments.sysfs_root,
                                             bind=arguments.interface or "")
    try:
        return arguments.command, _options(arguments)
    except ValueError as error:
        parser.error(str(error))
        raise  # parser.error exits; this keeps type checkers content


def _options(arguments: argparse.Namespace) -> NetOptions:
    if not (math.isfinite(arguments.deadline) and arguments.deadline > 0):
        raise ValueError("--deadline must be positive (seconds)")
    if arguments.host_memory and arguments.backend == "nccl":
        raise ValueError("--host-memory: nccl moves GPU memory; use perftest, tcp or auto")
    common: dict[str, Any] = {
        "backend": arguments.backend, "deadline_s": arguments.deadline, "rails": _rails(arguments.rails),
        "hcas": tuple(arguments.hcas.split(",")) if arguments.hcas else None,
        "allow_socket": arguments.allow_socket, "gid_index": arguments.gid_index,
        "gpu_direct": not (arguments.no_gpu_direct or arguments.host_memory), "host_memory": arguments.host_memory,
        "ib_write_bw": arguments.ib_write_bw, "token": arguments.token or "",
        "stdin_lifeline": arguments.stdin_lifeline, "sysfs_root": arguments.sysfs_root}
    if arguments.command == "net-server":
        if not (math.isfinite(arguments.accept_window) and arguments.accept_window > 0):
            raise ValueError("--accept-window must be positive (seconds)")
        return NetOptions(role="server", bind=arguments.bind, accept_window_s=arguments.accept_window, **common)
    host, port = split_host_port(arguments.connect)
    if not (math.isfinite(arguments.duration) and 0 < arguments.duration <= MAX_DURATION_S):
        raise ValueError(f"--duration must be positive and at most {MAX_DURATION_S:g} s")
    if not 1 <= arguments.streams <= MAX_STREAMS:
        raise ValueError(f"--streams must be from 1 to {MAX_STREAMS}")
    if arguments.backend == "perftest" and arguments.streams > MAX_RUNS_PER_RAIL:
        raise ValueError(f"--streams must be at most {MAX_RUNS_PER_RAIL} for perftest (one ib_write_bw per QP "
                         "and rail)")
    if not 0 <= arguments.trace_hops <= MAX_TRACE_HOPS:
        raise ValueError(f"--trace-hops must be from 0 to {MAX_TRACE_HOPS}")
    if arguments.trace_hops and arguments.backend != "tcp":
        raise ValueError("--trace-hops: only the tcp backend traces its streams' paths")
    if arguments.message_bytes is not None and arguments.message_bytes < 1:
        raise ValueError("--message-bytes must be positive")
    if arguments.backend == "nccl" and arguments.message_bytes is not None and arguments.message_bytes < NCCL_MIN_BYTES:
        raise ValueError(f"--message-bytes must be at least {NCCL_MIN_BYTES} (64 MiB) for nccl")
    directions = DIRECTIONS if arguments.direction == "both" else (arguments.direction,)
    return NetOptions(role="client", host=host, port=port, duration_s=arguments.duration, streams=arguments.streams,
                      trace_hops=arguments.trace_hops, directions=directions, message_bytes=arguments.message_bytes,
                      **common)


def _rails(text: str) -> tuple[int, ...] | None:
    if text == "all":
        return None
    try:
        rails = tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError as error:
        raise ValueError(f"--rails takes 'all' or rail numbers like 0,3, not {text!r}") from error
    if any(rail < 0 for rail in rails):
        raise ValueError("rail numbers are not negative")
    return rails


def _backend_module(name: str) -> Any:
    # Imported on use: a tcp test must not pay for (or need) torch.
    if name == "tcp":
        from . import tcp as net_tcp
        return net_tcp
    if name == "nccl":
        from . import nccl as net_nccl
        return net_nccl
    from . import perftest
    return perftest


def net_info(options: NetOptions, out: Output) -> int:
    """Print what ``--backend auto`` picks on this node, and why, and the node's rails."""
    from ..devices import cuda_devices, import_torch
    from ..topology import discover_rails

    capabilities = detect_capabilities(options.sysfs_root, options.ib_write_bw)
    backend, why = choose_backend(capabilities)
    bdfs = {}
    if capabilities.cuda_devices:
        bdfs = {d.index: d.pci_bus_id for d in cuda_devices(import_torch()) if d.pci_bus_id}
    rails, source = discover_rails(capabilities.cuda_devices, bdfs, options.hcas, options.sysfs_root)
    out.event("net_info", auto_backend=backend, auto_reason=why, ib_write_bw=capabilities.ib_write_bw,
              rdma_devices=list(capabilities.rdma_devices), cuda_devices=capabilities.cuda_devices,
              nccl=capabilities.nccl, topology_source=source, rails=[rail.to_dict() for rail in rails])
    return EXIT_OK


def main(argv: Sequence[str]) -> int:
    """Entry point of ``python -m probes net-server|net-client|net-info``; the exit status."""
    command, options = parse_arguments(argv)
    out = Output(sys.stdout)
    if command == "net-info" and options.bind:
        from ..topology import interface_addresses

        out.event("interface", interface=options.bind, addresses=interface_addresses(options.bind))
        return EXIT_OK
    if command == "net-info":
        return net_info(options, out)
    if options.backend == "auto":
        capabilities = detect_capabilities(options.sysfs_root, options.ib_write_bw, count_cuda=not options.host_memory)
        backend, _ = choose_backend(capabilities, options.host_memory)
        options = dataclasses.replace(options, backend=backend)
    from .auth import SecretError, read_secret

    if not options.token:
        print(f"python -m probes {command}: --token is required (the pair test's secret, from its controller)",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        secret = read_secret(options.token)
    except SecretError as error:
        print(f"python -m probes {command}: --token: {error}", file=sys.stderr)
        return EXIT_USAGE
    module = _backend_module(options.backend)
    try:
        if command == "net-server":
            return int(module.serve(options, secret, out))
        return int(module.run_client(options, secret, out))
    except KeyboardInterrupt:
        return 130

