"""Which data-plane addresses a pair test may use: the checks a host's address passes before its
pair server binds to it and its partners connect to it.

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
from collections.abc import Mapping, Sequence

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


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
