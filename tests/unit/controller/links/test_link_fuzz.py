"""Hostile pair-protocol lines through the controller's pair runner (hypothesis): a pair server's
first line and a pair client's records, each with one field changed to any JSON value (or a token
JSON lacks), go through RemotePairRunner.run_pair over sessions that replay them. No exception
escapes, every result is a LinkResult, and a figure comes back only from output that is a whole,
valid pair test (the fuzz finds none where a field the controller reads was broken)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudiag.links import LinkResult
from gpudiag.links.protocol import PAIR_PROTOCOL
from gpudiag.links.remote import PairTestOptions, RemotePairRunner
from gpudiag.transport import CommandResult

LISTENING = {"event": "listening", "backend": "tcp", "port": 40123, "bind": "10.0.0.2", "host": "node02",
             "pid": 4242, "protocol": PAIR_PROTOCOL, "deadline_s": 64.0}
RECORD = {"probe": "net", "device": "host", "gpu_uuid": None, "metric": "bandwidth", "value": 9.41,
          "unit": "Gbit/s", "samples": 9, "cv": 0.01, "status": "ok", "reason": None,
          "params": {"backend": "tcp", "direction": "client_to_server", "streams": 1, "duration_s": 0.3, "rail": None,
                     "hca": None},
          "details": {"bytes": 352875000, "elapsed_s": 0.3, "line_rate_gbps": 10.0, "peer": "10.0.0.2:40123"}}
DIRECTIONS = ("client_to_server", "server_to_client")
# What JSON cannot hold but a node can print: Python's json reads these unless told not to.
TOKENS = ("NaN", "Infinity", "-Infinity", "1e999", "-1e999", "123456789012345678901234567890123")


class _Replay:
    """A started command that replays a first line and an ending."""

    def __init__(self, first: str | None, stdout: str) -> None:
        self._first = first
        self._stdout = stdout
        self.cancelled = False

    def first_line(self, timeout_s: float) -> str | None:
        return self._first

    def finish(self, timeout_s: float) -> CommandResult:
        return CommandResult(0, self._stdout, "", False, 0.1)

    def cancel(self) -> None:
        self.cancelled = True

    def send_line(self, text: str) -> None:
        self.sent = text


class _Session:
    """A session whose every started command replays ``first`` and ``stdout``."""

    def __init__(self, first: str | None, stdout: str = "") -> None:
        self.first, self.stdout = first, stdout
        self.started: list[_Replay] = []

    def start(self, argv: Sequence[str], timeout_s: float) -> _Replay:
        command = _Replay(self.first, self.stdout)
        self.started.append(command)
        return command

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        return self.start(argv, timeout_s).finish(timeout_s)

    def close(self) -> None:
        return None


def _run(listening_line: str | None, client_stdout: str) -> list[LinkResult]:
    sessions = {"node01": _Session(None, client_stdout), "node02": _Session(listening_line)}
    runner = RemotePairRunner(sessions.get, {"node01": "10.0.0.1", "node02": "10.0.0.2"},
                              PairTestOptions(backend="tcp"))
    results = runner.run_pair("node01", "node02")
    assert results and all(isinstance(result, LinkResult) for result in results)
    return results


def _records(records: Sequence[dict[str, Any]]) -> str:
    return "".join(json.dumps(record) + "\n" for record in records)


def _both() -> list[dict[str, Any]]:
    return [{**RECORD, "params": {**RECORD["params"], "direction": direction}} for direction in DIRECTIONS]


def test_a_valid_pair_test_is_a_figure():
    (result,) = _run(json.dumps(LISTENING), _records(_both()))
    assert (result.gbps, result.error, result.line_rate_gbps) == (9.41, None, 10.0)


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                           | st.text(max_size=20), lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)


def _with(line: dict[str, Any], path: Sequence[str], value: Any) -> dict[str, Any]:
    changed = json.loads(json.dumps(line))
    target = changed
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return changed


def _spelled(line: dict[str, Any], token: str | None) -> str:
    """The line as JSON, a changed field's value (the marker string) spelled as ``token`` where given."""
    text = json.dumps(line)
    return text if token is None else text.replace('"<token>"', token)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(sorted(LISTENING)), value=JSON_VALUES, token=st.none() | st.sampled_from(TOKENS))
def test_a_mutated_listening_line_is_never_an_exception_and_never_a_figure_unless_valid(key: str, value: Any,
                                                                                       token: str | None):
    line = _spelled(_with(LISTENING, [key], "<token>" if token else value), token)
    results = _run(line, _records(_both()))
    valid = (key in ("host", "pid", "deadline_s") or (key == "port" and type(value) is int and 1 <= value <= 65535)
             or (key == "bind" and value in ("*", "10.0.0.2", "::1")) or value == LISTENING[key]) and token is None
    if not valid:
        (result,) = results
        assert result.gbps is None and result.error and result.fault == "node02"


RECORD_PATHS = [["probe"], ["device"], ["metric"], ["value"], ["unit"], ["status"], ["reason"], ["samples"], ["cv"],
                ["params"], ["params", "direction"], ["params", "rail"], ["params", "backend"], ["details"],
                ["details", "line_rate_gbps"]]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(RECORD_PATHS), value=JSON_VALUES, token=st.none() | st.sampled_from(TOKENS),
       which=st.sampled_from([0, 1]), duplicate=st.booleans())
def test_mutated_client_records_are_never_an_exception_and_never_an_impossible_figure(
        path: list[str], value: Any, token: str | None, which: int, duplicate: bool):
    records = _both()
    records[which] = _with(records[which], path, "<token>" if token else value)
    lines = [_spelled(record, token) for record in records] + ([json.dumps(records[which])] if duplicate else [])
    for result in _run(json.dumps(LISTENING), "".join(line + "\n" for line in lines)):
        if result.gbps is not None:
            assert math.isfinite(result.gbps) and 0 <= result.gbps <= 100_000
            assert not duplicate and token is None
            assert path != ["params", "direction"] or value == records[which]["params"]["direction"]


class _RecordingSession(_Session):
    def __init__(self, first: str | None, stdout: str = "") -> None:
        super().__init__(first, stdout)
        self.argvs: list[list[str]] = []

    def start(self, argv: Sequence[str], timeout_s: float) -> _Replay:
        self.argvs.append(list(argv))
        return super().start(argv, timeout_s)


def test_the_secret_goes_on_both_ends_stdin_never_on_a_command_line():
    sessions = {"node01": _RecordingSession(None, _records(_both())),
                "node02": _RecordingSession(json.dumps(LISTENING))}
    runner = RemotePairRunner(sessions.get, {"node01": "10.0.0.1", "node02": "10.0.0.2"},
                              PairTestOptions(backend="tcp"))
    (result,) = runner.run_pair("node01", "node02")
    assert result.gbps == 9.41
    (client,), (server,) = sessions["node01"].started, sessions["node02"].started
    assert len(client.sent) == 64 and server.sent == client.sent  # one secret, on both ends' stdin
    for session in sessions.values():
        (argv,) = session.argvs
        assert argv[argv.index("--token") + 1] == "-" and client.sent not in " ".join(argv)
