"""Each host's data-plane address for the pair tests, by --net-address (gpudiag.links.addresses):
the hosts file's net= field, the SSH address, or what the node says an interface holds; a host
without a usable one is left out of the link rounds with an ``unchecked``, never passed."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from gpudiag.errors import InputError
from gpudiag.hosts import HostSpec
from gpudiag.links.addresses import ADDRESS_LOOKUP_S, check_net_address, data_addresses
from gpudiag.transport import CommandResult, TransportError

SSH = {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3"}
HOSTS = [HostSpec("n1", net_address="10.2.0.1"), HostSpec("n2"), HostSpec("n3", net_address="10.0.0.1")]


class _Node:
    """A session that answers ``net-info`` with ``stdout`` (or raises ``error``), and remembers the call."""

    def __init__(self, stdout: str = "", error: TransportError | None = None) -> None:
        self.stdout, self.error = stdout, error
        self.calls: list[tuple[list[str], float]] = []
        self.closed = False

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        self.calls.append((list(argv), timeout_s))
        if self.error is not None:
            raise self.error
        return CommandResult(0, self.stdout, "", False, 0.1)

    def close(self) -> None:
        self.closed = True


def _interface(name: str, *addresses: str) -> str:
    return json.dumps({"event": "interface", "interface": name, "addresses": list(addresses)}) + "\n"


def test_net_address_values_are_checked_before_anything_runs():
    for good in ("auto", "field", "ssh", "iface:ib0"):
        check_net_address(good)
    for bad in ("iface:", "eth0", ""):
        with pytest.raises(InputError, match="expected auto, field, ssh or iface:NAME"):
            check_net_address(bad)


def test_field_ssh_and_auto_take_their_address_and_refuse_another_hosts_ssh_address():
    def session_of(label: str):
        raise AssertionError("no node is asked")

    by_source = {source: data_addresses(source, HOSTS, session_of, SSH, "python3", 4)
                 for source in ("auto", "field", "ssh")}
    addresses, missing = by_source["auto"]
    assert addresses == {"n1": "10.2.0.1", "n2": "10.0.0.2"}
    assert [(f.host, f.kind) for f in missing] == [("n3", "unchecked")]
    assert "its net= address cannot be its data-plane address: 10.0.0.1 is n1's SSH address" in missing[0].evidence
    addresses, missing = by_source["field"]
    assert addresses == {"n1": "10.2.0.1"} and [f.host for f in missing] == ["n2", "n3"]
    assert "gives no net= address for it (--net-address field)" in missing[0].evidence
    assert by_source["ssh"] == (SSH, [])


def test_an_interface_address_is_asked_of_each_node_within_what_the_run_has_left():
    nodes = {"n1": _Node(_interface("ib0", "fe80::1", "10.2.0.1")), "n2": _Node("stray line\n" + _interface("ib1")),
             "n3": _Node(error=TransportError("connection reset"))}
    addresses, missing = data_addresses("iface:ib0", HOSTS, nodes.get, SSH, "/opt/py", 2, left_s=5.0)
    assert addresses == {"n1": "10.2.0.1"}  # the link-local address is passed over
    why = {f.host: f.evidence for f in missing}
    assert "net-info answered for 'ib1', not ib0" in why["n2"]
    assert "could not ask for the address of ib0: connection reset" in why["n3"]
    assert nodes["n1"].calls == [(["/opt/py", "-m", "probes", "net-info", "--interface", "ib0"], 5.0)]
    assert all(node.closed for node in nodes.values())  # each session back to its pool
    data_addresses("iface:ib0", HOSTS[:1], nodes.get, SSH, "python3", 2)
    assert nodes["n1"].calls[-1][1] == ADDRESS_LOOKUP_S  # no run-wide limit: the lookup's own
    data_addresses("iface:ib0", HOSTS[:1], nodes.get, SSH, "python3", 2, left_s=0.0)
    assert nodes["n1"].calls[-1][1] == 0.1  # a spent budget still asks, briefly
