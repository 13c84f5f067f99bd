"""One rail's worker of the nccl pair test, run as ``python -m probes.net.nccl_worker`` by
probes/net/nccl.py: NCCL reads ``NCCL_IB_HCA`` once per process, so pinning each rail to its own
HCA takes one process per rail. It joins its rail's two-rank group through the server's store,
runs each direction, and (the receiving side) stores the figures with a proof of the pair secret
(which it gets in its environment, nccl.SECRET_ENV); it ends at its deadline or when its
parent goes away."""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import ModuleType
from typing import Any

from ..context import Deadline
from ..devices import import_torch
from ..runner import EXIT_DEADLINE, EXIT_OK
from .auth import PairSecret, SecretError
from .common import bits_gbps, split_host_port
from .messages import expect_int
from .nccl import (
    MAX_TRANSFERS,
    MIB,
    MIN_SAMPLES,
    SECRET_ENV,
    SIDES,
    TARGET_SAMPLE_S,
    TORCH_ERRORS,
    WARMUP_TRANSFERS,
    first_line,
)
from .nccl_store import POLL_S, go_key, put_json, put_proved, release_barriers, wait_json


def run_rail(torch: ModuleType, store: Any, arguments: argparse.Namespace, deadline: Deadline,
             finished: list[str], secret: PairSecret) -> None:
    """Join this rail's two-rank group and run each direction; the receiver stores its figures,
    proved with ``secret`` (net_nccl_store.proved reads them)."""
    dist = torch.distributed
    rank = SIDES.index(arguments.side)
    if arguments.collective == "nccl":
        torch.cuda.set_device(arguments.gpu)
        device = torch.device("cuda", arguments.gpu)
        free_bytes = torch.cuda.mem_get_info(arguments.gpu)[0]
        if free_bytes < 2 * arguments.message_bytes:
            raise ValueError(f"refused: {free_bytes // MIB} MiB free on GPU {arguments.gpu}, the test needs "
                             f"{2 * arguments.message_bytes // MIB} MiB")
        synchronize: Any = torch.cuda.synchronize
    else:
        device = torch.device("cpu")

        def synchronize() -> None:
            return None

    rail_store = dist.PrefixStore(f"rail{arguments.rail}/", store)
    dist.init_process_group(arguments.collective, store=rail_store, rank=rank, world_size=2,
                            timeout=timedelta(seconds=max(deadline.left_s(), 1.0)))
    buffer = torch.ones(arguments.message_bytes, dtype=torch.uint8, device=device)
    link = _Link(dist, buffer, 1 - rank, synchronize)
    try:
        for direction in arguments.directions:
            if rank == (0 if direction == "server_to_client" else 1):
                _send_phase(link, rail_store, store, direction, arguments, deadline)
            else:
                result = _receive_phase(link, rail_store, store, direction, arguments, deadline)
                put_proved(store, f"result/{arguments.rail}/{direction}", result, secret, "rail-result",
                           *arguments.nonces, arguments.rail, direction)
            finished.append(direction)
    finally:
        dist.destroy_process_group()


@dataclass(frozen=True)
class _Link:
    dist: Any
    buffer: Any
    peer: int
    synchronize: Any

    def send(self, count: int) -> None:
        for _ in range(count):
            self.dist.send(self.buffer, dst=self.peer)
        self.synchronize()

    def receive(self, count: int) -> float:
        """Seconds to receive ``count`` transfers."""
        started = time.perf_counter()
        for _ in range(count):
            self.dist.recv(self.buffer, src=self.peer)
        self.synchronize()
        return time.perf_counter() - started


def _all_rails_start(store: Any, direction: str, arguments: argparse.Namespace, deadline: Deadline) -> None:
    store.set(go_key(direction, arguments.side, arguments.rail), "1")
    keys = [go_key(direction, side, rail) for side in SIDES for rail in arguments.rails]
    while not store.check(keys):
        if deadline.expired():
            raise TimeoutError("the rails did not all reach the start of the timed transfers")
        time.sleep(POLL_S)


def _send_phase(link: _Link, rail_store: Any, store: Any, direction: str, arguments: argparse.Namespace,
                deadline: Deadline) -> None:
    link.send(WARMUP_TRANSFERS)
    plan = wait_json(rail_store, f"plan/{direction}", deadline)
    transfers = expect_int(plan, "transfers", 1, MAX_TRANSFERS)
    _all_rails_start(store, direction, arguments, deadline)
    link.send(transfers + 1)


def _receive_phase(link: _Link, rail_store: Any, store: Any, direction: str, arguments: argparse.Namespace,
                   deadline: Deadline) -> dict[str, Any]:
    warm = [link.receive(1) for _ in range(WARMUP_TRANSFERS)]
    per_transfer_s = max(statistics.median(warm[1:]), 1e-6)
    batch = max(1, math.ceil(TARGET_SAMPLE_S / per_transfer_s))
    samples = max(MIN_SAMPLES, math.ceil(arguments.duration / (batch * per_transfer_s)))
    # Never plan past half of what is left of the deadline.
    samples = max(1, min(samples, int(deadline.left_s() / 2 / (batch * per_transfer_s))))
    put_json(rail_store, f"plan/{direction}", {"transfers": samples * batch})
    _all_rails_start(store, direction, arguments, deadline)
    link.receive(1)  # untimed: the rails and the two ends leave the barrier a few ms apart
    intervals = [link.receive(batch) for _ in range(samples)]
    size = arguments.message_bytes
    return {"bytes": size * batch * samples, "elapsed_s": sum(intervals), "transfers": batch * samples,
            "message_bytes": size, "interval_gbps": [round(bits_gbps(size * batch, s), 4) for s in intervals]}


def _guard(deadline: Deadline, parent: int) -> None:
    """End this worker at its deadline, or as soon as the process that started it is gone."""

    def watch() -> None:
        while not deadline.expired() and os.getppid() == parent:
            time.sleep(0.2)
        os._exit(EXIT_DEADLINE)

    threading.Thread(target=watch, name="rail-guard", daemon=True).start()


def worker_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of a rail worker (started by :func:`start_workers`, never by hand)."""
    parser = argparse.ArgumentParser(prog="python -m probes.net.nccl")
    parser.add_argument("--side", choices=SIDES, required=True)
    parser.add_argument("--rail", type=int, required=True)
    parser.add_argument("--gpu", type=int, default=-1)
    parser.add_argument("--store", required=True)
    parser.add_argument("--rails", type=lambda text: [int(part) for part in text.split(",")], required=True)
    parser.add_argument("--directions", type=lambda text: text.split(","), required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--message-bytes", type=int, required=True)
    parser.add_argument("--deadline", type=float, required=True)
    parser.add_argument("--collective", choices=("nccl", "gloo"), required=True)
    parser.add_argument("--nonces", type=lambda text: tuple(text.split(",")), required=True,
                        help="the server's and the client's nonce of the session")
    arguments = parser.parse_args(argv)
    try:
        secret = PairSecret.from_hex(os.environ.pop(SECRET_ENV, ""))
    except SecretError as error:
        parser.error(f"{SECRET_ENV}: {error}")
    deadline = Deadline.after(arguments.deadline)
    _guard(deadline, os.getppid())
    torch = import_torch()
    host, port = split_host_port(arguments.store)
    store = torch.distributed.TCPStore(host, port, None, False, timeout=timedelta(seconds=max(arguments.deadline, 1)))
    finished: list[str] = []
    try:
        run_rail(torch, store, arguments, deadline, finished, secret)
    except TORCH_ERRORS as error:
        store.set(f"error/{arguments.rail}/{arguments.side}", first_line(error))
        release_barriers(store, arguments.side, arguments.rail, arguments.directions)
        return 1
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(worker_main())
