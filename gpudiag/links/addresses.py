"""Each host's data-plane address for the pair tests: where it comes from (``--net-address``:
the hosts file's ``net=`` field, the address SSH reaches, or what the node says an interface
holds), and the checks it passes before its pair server binds to it and its partners connect to it.

An address given in the hosts file, taken from SSH, or reported by the node itself
(``--net-address iface:NAME``) must be one that another node can reach and that is this host's
alone: never unspecified, multicast, reserved (broadcast) or link-local (its scope is one
node's), never loopback unless the host itself is reached over loopback (a test fleet on one
machine), and never another host's SSH address. Names are not resolved here: the node resolves
its own and binds to it, and a bind to an address that is not the node's fails there (the
node's kernel knows its interfaces; the controller does not). Two hosts claiming one address are
not refused here for the same reason: only the one that owns it can listen on it, so the other's
pair tests fail and only its verdict changes, where refusing both would let one node take another
out of the link rounds.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from ..errors import InputError
from ..findings import Finding, unchecked
from ..hosts import HostSpec
from ..transport import Session, TransportError
from .protocol import PairProtocolError, interface_event, parse_event, plain_text

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# --net-address: where a host's data-plane address comes from (or iface:NAME on the node).
NET_ADDRESS_SOURCES = ("auto", "field", "ssh")
IFACE_PREFIX = "iface:"
# Seconds a node gets to say an interface's addresses.
ADDRESS_LOOKUP_S = 60.0


def parse_ip(text: str) -> IpAddress | None:
    """The IP address ``text`` spells (IPv4-mapped IPv6 as IPv4; a scope id ignored), or None for a name."""
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped if mapped is not None else address


def impossible_address(address: str, ssh_address: str | None) -> str | None:
    """Why ``address`` can be no host's data-plane address for its partners, or None (names pass:
    see the module docstring). ``ssh_address``: how the controller reaches that host."""
    ip = parse_ip(address)
    if ip is None:
        return None
    if ip.is_unspecified:
        return f"{address} is unspecified (every node's own 'any address')"
    if ip.is_multicast:
        return f"{address} is a multicast address"
    if ip.is_loopback:  # before reserved: ::1 lies in IPv6's reserved ::/8
        return None if is_loopback(ssh_address) else f"{address} is a loopback address: each partner would reach itself"
    if ip.is_reserved:
        return f"{address} is a reserved or broadcast address"
    if ip.is_link_local:
        return f"{address} is link-local (valid on one link, with a scope only that node knows)"
    return None


def is_loopback(address: str | None) -> bool:
    """Whether ``address`` is a loopback IP address (``localhost`` too)."""
    if address is None:
        return False
    if address.lower() in ("localhost", "localhost.localdomain"):
        return True
    ip = parse_ip(address)
    return ip is not None and ip.is_loopback


def same_address(first: str, second: str) -> bool:
    """Whether two addresses are the same: equal IP addresses, or equal names (case aside)."""
    a, b = parse_ip(first), parse_ip(second)
    if a is not None and b is not None:
        return a == b
    return first.lower().rstrip(".") == second.lower().rstrip(".")


def address_refusal(label: str, address: str, ssh_addresses: Mapping[str, str]) -> str | None:
    """Why ``label`` may not use ``address`` as its data-plane address, or None: an impossible
    address, or another host's SSH address (``ssh_addresses``: label -> how SSH reaches it)
    that is not its own too (hosts reached at one address, as the nodes of a test cluster on
    one machine are, share it)."""
    own = ssh_addresses.get(label)
    why = impossible_address(address, own)
    if why is not None or (own is not None and same_address(address, own)):
        return why
    for other, ssh in sorted(ssh_addresses.items()):
        if other != label and same_address(address, ssh):
            return f"{address} is {other}'s SSH address"
    return None


def usable_address(label: str, interface: str, reported: Sequence[str],
                   ssh_addresses: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(the first address of ``reported`` that ``label`` may use, None), else (None, why each was
    refused): what a node said its ``interface`` holds (``--net-address iface:NAME``)."""
    if not reported:
        return None, f"interface {interface} has no address on this node (--net-address iface:{interface})"
    refusals = []
    for address in reported:
        why = address_refusal(label, address, ssh_addresses)
        if why is None:
            return address, None
        refusals.append(why)
    return None, f"it reported no usable address for {interface}: {'; '.join(refusals[:4])}"


def check_net_address(source: str) -> None:
    """Raises InputError unless ``source`` is a --net-address value."""
    if source in NET_ADDRESS_SOURCES or (source.startswith(IFACE_PREFIX) and len(source) > len(IFACE_PREFIX)):
        return
    raise InputError(f"--net-address {source!r}: expected auto, field, ssh or iface:NAME (e.g. iface:ib0)")


def data_addresses(source: str, hosts: Sequence[HostSpec], session_of: Callable[[str], Session | None],
                   ssh_addresses: Mapping[str, str], python: str, fanout: int,
                   left_s: float | None = None) -> tuple[dict[str, str], list[Finding]]:
    """Each of the ``hosts``' data-plane address, by --net-address ``source``: ``field`` the hosts
    file's ``net=``, ``ssh`` the address SSH reaches (``ssh_addresses``: label -> that address),
    ``auto`` the field where given else the SSH address, ``iface:NAME`` the address of NAME on the
    node, asked over its session (``session_of``, with the nodes' ``python``; ``fanout`` nodes at
    once) within ADDRESS_LOOKUP_S and within the ``left_s`` seconds the run has left (None: no
    run-wide limit). Every address is checked (none unspecified, multicast, link-local, loopback
    off this machine, or another host's SSH address); hosts without an address, or with one
    refused, get an ``unchecked`` and are left out of the link rounds: no other host's verdict
    changes."""
    labels = [host.label for host in hosts]
    if source.startswith(IFACE_PREFIX):
        interface = source[len(IFACE_PREFIX):]
        lookup_s = ADDRESS_LOOKUP_S if left_s is None else max(0.1, min(ADDRESS_LOOKUP_S, left_s))
        with ThreadPoolExecutor(max_workers=max(1, min(fanout, len(labels) or 1)),
                                thread_name_prefix="address") as workers:
            answers = workers.map(lambda label: _interface_address(session_of, label, interface, python, lookup_s,
                                                                   ssh_addresses),
                                  labels)
            found = dict(zip(labels, answers, strict=True))
    else:
        found = {}
        for host in hosts:
            label, field = host.label, host.net_address
            if source == "field":
                found[label] = (field, None) if field else (None, "the hosts file gives no net= address "
                                                            "for it (--net-address field)")
            else:
                found[label] = (field if field and source == "auto" else ssh_addresses[label], None)
            address = found[label][0]
            refused = address_refusal(label, address, ssh_addresses) if address else None
            if refused is not None:
                where = "its net= address" if address == field else "its SSH address"
                found[label] = (None, f"{where} cannot be its data-plane address: {refused} "
                                      "(give its data-plane address as net= in the hosts file)")
    addresses = {label: address for label, (address, _) in found.items() if address}
    missing = [unchecked(label, "not pair-tested", f"left out of the link rounds: {why}")
               for label, (address, why) in found.items() if not address]
    return addresses, missing


def _interface_address(session_of: Callable[[str], Session | None], label: str, interface: str, python: str,
                       timeout_s: float = ADDRESS_LOOKUP_S,
                       ssh_addresses: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(address, None) of ``interface`` on the node (asked within ``timeout_s``): the first one it
    reports that passes the checks above; or (None, why not). What the node prints is checked
    line by line (gpudiag.links.protocol): a malformed ``interface`` event is a reason, never an
    address."""
    session = session_of(label)
    if session is None:
        return None, "no open SSH session to ask for its data-plane address"
    try:
        ran = session.run([python, "-m", "probes", "net-info", "--interface", interface], timeout_s)
    except TransportError as error:
        return None, f"could not ask for the address of {interface}: {error}"
    finally:
        session.close()  # the pool keeps the connection
    for line in ran.stdout.splitlines():
        try:
            event = parse_event(line)
        except PairProtocolError:
            continue  # a stray line: the answer may follow
        if event["event"] != "interface":
            continue
        try:
            reported = interface_event(event)
        except PairProtocolError as error:
            return None, f"net-info printed a malformed answer for {interface}: {error}"
        if reported.interface != interface:
            return None, f"net-info answered for {plain_text(reported.interface, 64)!r}, not {interface}"
        return usable_address(label, interface, reported.addresses, ssh_addresses or {})
    last = plain_text(ran.stderr.strip()[-200:]) if ran.stderr.strip() else "no output"
    return None, f"net-info printed no address for {interface}: {last}"
