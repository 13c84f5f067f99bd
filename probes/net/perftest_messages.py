"""The messages of the ``perftest`` pair backend (probes/net/perftest.py), checked field by field:
what either end sends is a ProtocolError naming the field, never a figure, when it has the wrong
type, range or length.

Each rail runs ``streams`` ib_write_bw pairs at once (one QP each, each on its own TCP port), so
the ``ports`` of a rail are a list of exactly ``streams`` distinct ports and the ``results`` of a
rail a list of exactly ``streams`` run results, in the same order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .common import MAX_DURATION_S
from .messages import ProtocolError, expect_int, expect_mapping, expect_number, expect_str

# What a peer may ask for or report: bytes per message, rails, Gbit/s of one run, runs per rail.
MAX_MESSAGE_BYTES = 1 << 31
MAX_RAILS = 64
MAX_GBPS = 1e6
MAX_RUNS_PER_RAIL = 32
# The fields of a run's summary (PerftestReport.summary, plus exit_status) and their checks.
_SUMMARY_INTEGERS = ("message_bytes", "iterations", "qps", "mtu_bytes", "cuda_device", "sizes", "exit_status")
_SUMMARY_TEXTS = ("link_type", "device", "transport", "connection", "gpu_name")


def session_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The client's test parameters of its hello, each checked: ``streams`` (ib_write_bw runs
    per rail, 1 to MAX_RUNS_PER_RAIL), ``duration_s``, ``message_bytes``. Raises ProtocolError."""
    return {"streams": expect_int(params, "streams", 1, MAX_RUNS_PER_RAIL),
            "duration_s": expect_number(params, "duration_s", 0.0, MAX_DURATION_S, above=True),
            "message_bytes": expect_int(params, "message_bytes", 1, MAX_MESSAGE_BYTES)}


def phase_rails(message: Mapping[str, Any]) -> list[int]:
    """The ``rails`` of a phase message: distinct rail numbers, sorted. Raises ProtocolError."""
    rails = message.get("rails")
    if not isinstance(rails, list) or len(rails) > MAX_RAILS or not all(
            isinstance(rail, int) and not isinstance(rail, bool) and 0 <= rail < MAX_RAILS for rail in rails):
        raise ProtocolError(f"'rails' must be a list of at most {MAX_RAILS} rail numbers")
    return sorted(set(rails))


def rail_ports(message: Mapping[str, Any], runs: int) -> dict[str, list[int]]:
    """A ``ports`` mapping: rail number (as text) -> the TCP ports of its ``runs`` ib_write_bw
    servers, distinct, in run order. Raises ProtocolError."""
    ports = expect_mapping(message, "ports", limit=MAX_RAILS)
    for rail, listed in ports.items():
        _expect_rail_key("ports", rail)
        if not (isinstance(listed, list) and len(listed) == runs and len(set(map(str, listed))) == runs and all(
                isinstance(port, int) and not isinstance(port, bool) and 1 <= port <= 65535 for port in listed)):
            raise ProtocolError(f"'ports' of rail {rail} must be a list of {runs} distinct TCP ports")
    return {rail: list(listed) for rail, listed in ports.items()}


def rail_texts(message: Mapping[str, Any], key: str) -> dict[int, str]:
    """An ``errors`` mapping: rail number (as text) -> reason. Raises ProtocolError."""
    texts = expect_mapping(message, key, limit=MAX_RAILS)
    for rail in texts:
        _expect_rail_key(key, rail)
        expect_str(texts, rail)
    return {int(rail): text for rail, text in texts.items()}


def rail_results(message: Mapping[str, Any], ports: Mapping[str, Any], runs: int) -> dict[int, list[dict[str, Any]]]:
    """The ``results`` of the rails in ``ports`` (a result for another rail is no figure of this
    test): per rail, ``runs`` results in run order, each checked (:func:`checked_result`).
    Raises ProtocolError."""
    sent = expect_mapping(message, "results", limit=MAX_RAILS)
    checked = {}
    for rail, listed in sent.items():
        if rail not in ports:
            continue
        if not isinstance(listed, list) or len(listed) != runs:
            raise ProtocolError(f"'results' of rail {rail} must be a list of {runs} run results")
        checked[int(rail)] = [checked_result(result) for result in listed]
    return checked


def _expect_rail_key(key: str, rail: str) -> None:
    if not rail.isdigit() or int(rail) >= MAX_RAILS:
        raise ProtocolError(f"{key!r} names rail {rail[:20]!r}")


def checked_result(result: object) -> dict[str, Any]:
    """One run's result as a peer sent it — ``{"error": reason}`` or a summary — with only the
    summary's own fields, each checked (a peer cannot add or replace details). Raises ProtocolError."""
    if not isinstance(result, dict):
        raise ProtocolError("a run's result must be an object")
    if "error" in result:
        return {"error": expect_str(result, "error")}
    checked: dict[str, Any] = {"average_gbps": expect_number(result, "average_gbps", 0.0, MAX_GBPS)}
    checked["peak_gbps"] = expect_number(result, "peak_gbps", 0.0, MAX_GBPS, optional=True)
    for key in _SUMMARY_INTEGERS:
        if key in result:
            checked[key] = expect_int(result, key, -(1 << 31), 1 << 40, optional=True)
    for key in _SUMMARY_TEXTS:
        if key in result:
            checked[key] = expect_str(result, key, limit=200, optional=True)
    if "dmabuf" in result:
        if not isinstance(result["dmabuf"], bool):
            raise ProtocolError("'dmabuf' must be true or false")
        checked["dmabuf"] = result["dmabuf"]
    return checked


def server_info(reply: Mapping[str, Any]) -> dict[str, Any]:
    """The server's first reply, every field this client reads checked. Raises ProtocolError."""
    rails = reply.get("rails")
    if not isinstance(rails, list) or len(rails) > MAX_RAILS or not all(isinstance(rail, dict) for rail in rails):
        raise ProtocolError(f"'rails' must be a list of at most {MAX_RAILS} objects")
    checked = []
    for rail in rails:
        checked.append({"rail": expect_int(rail, "rail", 0, MAX_RAILS - 1),
                        "hca": expect_str(rail, "hca", limit=64, optional=True),
                        "line_rate_gbps": expect_number(rail, "line_rate_gbps", 0.0, MAX_GBPS, optional=True)})
    gpu_direct = reply.get("gpu_direct")
    if not isinstance(gpu_direct, bool):
        raise ProtocolError("'gpu_direct' must be true or false")
    return {"host": expect_str(reply, "host", limit=255, optional=True), "rails": checked,
            "unavailable": expect_str(reply, "unavailable", optional=True), "gpu_direct": gpu_direct}
