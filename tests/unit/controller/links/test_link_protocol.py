"""The pair protocol at the controller's boundary: each event line a node prints is checked
(gpudiag.links.protocol), a pair client's records are checked before they become figures
(gpudiag.links.remote.check_records), data-plane addresses are checked (gpudiag.links.addresses),
and an error that is one end's own blames that end alone (LinkResult.fault)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gpudiag.findings import Severity
from gpudiag.links import LinkResult, attribute_links, remote
from gpudiag.links.addresses import address_refusal, impossible_address
from gpudiag.links.linkfindings import link_findings
from gpudiag.links.protocol import (
    PAIR_PROTOCOL,
    PairProtocolError,
    done_event,
    interface_event,
    listening_event,
    net_info_event,
    parse_event,
    plain_text,
)
from gpudiag.links.remote import PairTestOptions, check_records
from gpudiag.links.rounds import LinkRecord
from gpudiag.records import ProbeResult, parse_probe_output
from probes.net import common as net
from probes.net import main as net_main

LISTENING = {"event": "listening", "backend": "tcp", "port": 40123, "bind": "10.0.0.2", "protocol": PAIR_PROTOCOL}


def test_the_controller_and_the_nodes_speak_one_protocol():
    assert PAIR_PROTOCOL == net.PROTOCOL


def test_a_well_formed_listening_line_is_read():
    listening = listening_event(parse_event(json.dumps(LISTENING)))
    assert (listening.backend, listening.port, listening.bind) == ("tcp", 40123, "10.0.0.2")


@pytest.mark.parametrize(("line", "said"), [
    ('{"event": "listening", "backend": "tcp", "port": "abc", "protocol": "gpudiag-net/2"}', "'port' must be"),
    ('{"event": "listening", "backend": "tcp", "port": Infinity, "protocol": "gpudiag-net/2"}', "not a JSON line"),
    ('{"event": "listening", "backend": "tcp", "port": NaN, "protocol": "gpudiag-net/2"}', "not a JSON line"),
    ('{"event": "listening", "backend": "tcp", "port": 1e400, "protocol": "gpudiag-net/2"}', "not a JSON line"),
    ('{"event": "listening", "backend": "tcp", "port": 123456789012345678901234567890, "protocol": "gpudiag-net/2"}',
     "'port' must be an integer from 1 to 65535"),
    ('{"event": "listening", "backend": "tcp", "port": 9999.0, "protocol": "gpudiag-net/2"}', "'port' must be"),
    ('{"event": "listening", "backend": "tcp", "port": true, "protocol": "gpudiag-net/2"}', "'port' must be"),
    ('{"event": "listening", "backend": "tcp", "port": 0, "protocol": "gpudiag-net/2"}', "'port' must be"),
    ('{"event": "listening", "backend": "ftp", "port": 4000, "protocol": "gpudiag-net/2"}', "'backend' must be"),
    ('{"event": "listening", "backend": "tcp", "port": 4000}', "'protocol' must be a value (the field is required)"),
    ('{"event": "listening", "backend": "tcp", "port": 4000, "protocol": "gpudiag-net/1"}',
     "'protocol' must be one of gpudiag-net/2"),
    ('{"event": "listening", "backend": "tcp", "port": 4000, "protocol": "gpudiag-net/2", "bind": "node2"}',
     "'bind' must be an IP address"),
    ('[1, 2, 3]', "not a JSON object"),
    ('"listening"', "not a JSON object"),
    ('{"port": 4000}', "no 'event' name"),
    ('{"event": "listening", "backend": "tcp", "port": 4000', "not a JSON line"),
    ("x" * 70_000, "a line longer than"),
])
def test_a_malformed_listening_line_is_a_protocol_error_naming_the_field(line: str, said: str):
    with pytest.raises(PairProtocolError, match=said.replace("(", r"\(").replace(")", r"\)")):
        listening_event(parse_event(line))


def test_done_and_interface_and_net_info_events_are_checked():
    done = done_event({"event": "done", "status": "error", "reason": "cannot \x1b[2Jlisten\n", "cause": "bind"})
    assert (done.status, done.reason, done.cause) == ("error", "cannot listen", "bind")
    for bad in ({"event": "done", "status": "fine"}, {"event": "done", "status": "ok", "reason": 5},
                {"event": "done", "status": "ok", "cause": "gremlins"}):
        with pytest.raises(PairProtocolError):
            done_event(bad)
    assert interface_event({"event": "interface", "interface": "ib0", "addresses": ["10.2.0.7", "fd00::7"]}
                           ).addresses == ("10.2.0.7", "fd00::7")
    for bad in ({"event": "interface", "interface": "ib0", "addresses": ["10.2.0.7:9999"]},
                {"event": "interface", "interface": "ib0", "addresses": [7]},
                {"event": "interface", "interface": "ib0", "addresses": "10.2.0.7"},
                {"event": "interface", "interface": "", "addresses": []},
                {"event": "interface", "interface": "ib0", "addresses": ["10.0.0.1"] * 65}):
        with pytest.raises(PairProtocolError):
            interface_event(bad)
    assert net_info_event({"event": "net_info", "auto_backend": "tcp", "auto_reason": "no RDMA", "rails": [{}]}
                          ).rails == 1
    with pytest.raises(PairProtocolError):
        net_info_event({"event": "net_info", "auto_backend": "tcp", "auto_reason": "x", "rails": {"0": {}}})


def test_a_nodes_text_loses_its_control_characters_and_is_bounded():
    assert plain_text("ok\x1b]0;pwned\x07 \u202eevil\r\nnext") == "ok evil  next"  # a title, an override
    assert len(plain_text("y" * 5000)) == 300


# --- the client's records ----------------------------------------------------------------------------

def _record(direction: str | None = "client_to_server", value: float | None = 9.4, rail: object = None,
            probe: str = "net", status: str = "ok") -> ProbeResult:
    # Made directly: what a client's records can still hold after gpudiag.records has read them.
    params = {"backend": "tcp", "rail": rail, **({"direction": direction} if direction else {})}
    return ProbeResult(probe=probe, device="host" if rail is None else f"rail:{rail}", metric="bandwidth",
                       value=value, unit="Gbit/s", status=status, reason=None if status == "ok" else "refused",
                       params=params)


def _check(*records: ProbeResult) -> str | None:
    return check_records("node01", records)


def test_a_clients_well_formed_records_pass():
    lines = [json.dumps(_record(direction).to_dict()) for direction in ("client_to_server", "server_to_client")]
    assert check_records("node01", parse_probe_output("\n".join(lines), "node01 net-client")) is None
    assert _check(_record("client_to_server", None, status="error"), _record("server_to_client", None,
                                                                           status="error")) is None


@pytest.mark.parametrize(("lines", "said"), [
    ((_record("client_to_server"),), "no record for server_to_client on rail None"),
    ((_record("client_to_server"), _record("client_to_server"), _record("server_to_client")),
     "two records for client_to_server"),
    ((_record("client_to_server"), _record("server_to_client", 1e9)), "no figure a link can have"),
    ((_record("client_to_server"), _record("server_to_client", -1.0)), "no figure a link can have"),
    ((_record(None), _record("server_to_client")), "names no direction"),
    ((_record("client_to_server", probe="gemm"), _record("server_to_client")), "printed a 'gemm' record"),
    ((_record("client_to_server", rail=900), _record("server_to_client", rail=900)), "names rail '900'"),
    ((_record("client_to_server", rail=True), _record("server_to_client", rail=True)), "names rail 'True'"),
    ((_record("client_to_server", float("nan")), _record("server_to_client")), "no figure a link can have"),
])
def test_a_clients_records_that_cannot_be_figures_are_a_problem_naming_it(lines: tuple[ProbeResult, ...], said: str):
    problem = _check(*lines)
    assert problem is not None and problem.startswith("node01: ") and said in problem


# --- the command lines ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("streams", "kept"), [
    ([2.4, 2.4, 2.3, 2.3], True),    # one measurement: the sum is the figure
    ([6.0, 6.0, 1.0, 1.0], True),    # two streams on a slow path finished late: their sum runs 1.5 x the figure
    ([9.4, 9.4, 9.4, 9.4], False),   # four times the figure: not the streams of this measurement
    ([1.0, 1.0, 1.0, 1.0], False),   # well below it: neither
])
def test_a_directions_streams_stand_where_they_can_be_that_measurement(streams: list[float], kept: bool):
    record = _record(value=9.4)
    record = dataclasses.replace(record, details={"stream_gbps": streams})
    assert (remote._stream_figures(record) == streams) is kept


def test_the_pair_command_lines_carry_the_secret_the_bind_and_the_lifeline():
    options = PairTestOptions(backend="tcp", python="python3")
    secret = "ab" * 32
    _, server = net_main.parse_arguments(options.server_argv(secret, "10.0.0.2")[3:])
    assert (server.bind, server.token, server.stdin_lifeline) == ("10.0.0.2", secret, True)
    assert server.accept_window_s < server.deadline_s
    _, client = net_main.parse_arguments(options.client_argv("tcp", "10.0.0.2", 4000, secret)[3:])
    assert (client.token, client.stdin_lifeline, client.peer) == (secret, True, "10.0.0.2:4000")
    assert secret not in repr(server) and secret not in repr(client)  # never shown


# --- data-plane addresses --------------------------------------------------------------------------------

SSH = {"node01": "10.0.0.1", "node02": "10.0.0.2", "lo1": "127.0.1.1", "lo2": "127.0.1.2", "n1": "vm", "n2": "vm"}


@pytest.mark.parametrize(("label", "address", "said"), [
    ("node02", "0.0.0.0", "unspecified"),
    ("node02", "::", "unspecified"),
    ("node02", "224.0.0.1", "multicast"),
    ("node02", "ff02::1", "multicast"),
    ("node02", "255.255.255.255", "reserved or broadcast"),
    ("node02", "169.254.3.4", "link-local"),
    ("node02", "fe80::1%eth0", "link-local"),
    ("node02", "127.0.0.50", "loopback"),
    ("node02", "::1", "loopback"),
    ("node02", "::ffff:127.0.0.1", "loopback"),
    ("node02", "10.0.0.1", "node01's SSH address"),
    ("node02", "::ffff:10.0.0.1", "node01's SSH address"),
    ("lo2", "127.0.1.1", "lo1's SSH address"),
])
def test_an_address_no_partner_can_use_is_refused(label: str, address: str, said: str):
    why = address_refusal(label, address, SSH)
    assert why is not None and said in why


@pytest.mark.parametrize(("label", "address"), [
    ("node02", "10.2.0.2"), ("node02", "10.0.0.2"), ("node02", "fd00::2"), ("node02", "ib-node02.cluster"),
    ("lo2", "127.0.0.1"),  # a host reached over loopback is this machine: its loopback is reachable
    ("n2", "vm"), ("n2", "VM."),  # hosts reached at one address share it: it is this one's own too
])
def test_an_address_a_partner_can_use_passes(label: str, address: str):
    assert address_refusal(label, address, SSH) is None
    assert impossible_address(address, SSH[label]) is None


# --- one end's own failure blames that end alone -------------------------------------------------------

def test_a_pair_server_that_could_not_start_is_its_hosts_error_and_its_partner_is_not_named():
    results = [LinkResult("n1", "n2", "tcp", error="n2: the pair server did not start: cannot listen on 192.0.2.1",
                          fault="n2")]
    findings = link_findings(attribute_links(results), 10.0)
    (finding,) = findings
    assert (finding.kind, finding.host, finding.peer, finding.severity) == ("link_error", "n2", None, Severity.WARN)
    assert "n2's own end of the pair test failed with n1" in finding.evidence
    assert not any(f.host == "n1" or f.peer == "n1" for f in findings)


def test_an_error_of_no_known_end_names_both_and_a_fault_survives_the_document():
    shared = LinkResult("n1", "n2", "tcp", error="connection refused by 10.0.0.2:40000")
    (finding,) = link_findings(attribute_links([shared]), 10.0)
    assert (finding.kind, finding.host, finding.peer) == ("link_error", "n1", "n2")
    own = LinkResult("n1", "n2", "tcp", error="n1: the pair client printed no result", fault="n1")
    entry = LinkRecord("screen", own).to_dict()
    assert entry["fault"] == "n1" and LinkRecord.from_dict(entry).result == own
    assert LinkRecord.from_dict({**entry, "fault": "n9"}).result.fault is None  # names no end: dropped
    with pytest.raises(ValueError):
        LinkResult("n1", "n2", "tcp", gbps=9.0, fault="n1")  # a figure has no fault


def test_a_hosts_own_failure_does_not_hide_a_slow_nic_elsewhere():
    results = [LinkResult("n1", "n2", "tcp", error="n2: the pair server did not start", fault="n2")]
    results += [LinkResult(a, b, "tcp", gbps=9.4, line_rate_gbps=10.0) for a, b in
                (("n1", "n3"), ("n3", "n4"), ("n4", "n5"), ("n5", "n6"), ("n6", "n1"), ("n2", "n3"))]
    findings = link_findings(attribute_links(results), 10.0)
    assert [(f.kind, f.host, f.peer) for f in findings] == [("link_error", "n2", None)]
    assert all(f.severity != Severity.FAIL for f in findings)
