"""The rendezvous store of the ``nccl`` pair backend (torch.distributed's TCPStore): JSON
entries that the two ends and their rail workers put and poll for, each read strictly and, where
a peer wrote it, with a proof of the pair test's secret (probes/net/auth.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..context import Deadline
from .auth import PairSecret, canonical
from .messages import ProtocolError, strict_json

# Seconds between two looks at the store.
POLL_S = 0.005


def wait_key(store: Any, key: str, deadline: Deadline, limit_s: float | None = None) -> None:
    """Poll until ``key`` is in the store. Raises TimeoutError at ``deadline`` (or after ``limit_s`` seconds)."""
    until = deadline if limit_s is None else deadline.sooner(limit_s)
    while not store.check([key]):
        if until.expired():
            raise TimeoutError(f"no {key!r} in the store in time")
        time.sleep(POLL_S)


def wait_json(store: Any, key: str, deadline: Deadline, limit_s: float | None = None) -> dict[str, Any]:
    """The JSON object stored under ``key``, polling until it appears. Raises TimeoutError
    at ``deadline`` (or after ``limit_s`` seconds), ProtocolError for what is no JSON object."""
    wait_key(store, key, deadline, limit_s)
    value = strict_json(store.get(key))
    if not isinstance(value, dict):
        raise ProtocolError(f"{key!r} in the store is not a JSON object")
    return value


def put_json(store: Any, key: str, value: Mapping[str, Any]) -> None:
    store.set(key, json.dumps(value, allow_nan=False))


def put_proved(store: Any, key: str, value: Mapping[str, Any], secret: PairSecret, label: str, *parts: object) -> None:
    """Store ``value`` with a ``proof`` of ``secret`` over ``label``, ``parts`` and its own fields."""
    put_json(store, key, {**value, "proof": secret.proof(label, *parts, canonical(value))})


def proved(value: Mapping[str, Any], secret: PairSecret, label: str, *parts: object) -> dict[str, Any]:
    """``value`` without its proof, when the proof is ``secret``'s (see put_proved). Raises ProtocolError."""
    fields = {key: item for key, item in value.items() if key != "proof"}
    if not secret.verify(value.get("proof"), label, *parts, canonical(fields)):
        raise ProtocolError(f"no proof of the pair secret ({label})")
    return fields


def go_key(direction: str, side: str, rail: int) -> str:
    return f"go/{direction}/{side}/{rail}"


def release_barriers(store: Any, side: str, rail: int, directions: Sequence[str]) -> None:
    """Mark a rail's worker as arrived at every start barrier, so that a worker that died or was
    ended does not hold the other rails back."""
    for direction in directions:
        store.set(go_key(direction, side, rail), "1")
