"""Who is on the other end of a request, for the request log and the audit record (review N14).

The peer's address, unless the peer is one of the proxies the administrator names
(`apiserver.trustedProxies`, CIDRs: the Ingress controller's pods, a load balancer's range).
Then it is the address those proxies say they received the request from: X-Forwarded-For read
right to left, past every hop inside a trusted range. The header of any other peer is a claim
anyone can make, so it is never read; and it is only ever logged, never trusted for access.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

FORWARDED_FOR = "X-Forwarded-For"
HEADER_READ = 1024  # bytes of X-Forwarded-For looked at: the hops nearest to us are at its end

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def networks(cidrs: Iterable[str]) -> tuple[Network, ...]:
    """The trusted ranges; ValueError names the first that is not a CIDR or an address."""
    return tuple(ipaddress.ip_network(cidr.strip(), strict=False) for cidr in cidrs)


class ClientAddress:
    def __init__(self, trusted: tuple[Network, ...] = ()) -> None:
        self.trusted = trusted

    def of(self, peer: str | None, forwarded_for: str | None) -> str | None:
        if not peer or not self.trusted or not forwarded_for or not self._trusts(peer):
            return peer or None
        client = peer
        for hop in reversed(forwarded_for[-HEADER_READ:].split(",")):
            address = _address(hop)
            if address is None:
                break  # a malformed hop (or one cut by HEADER_READ): the last good one stands
            client = address
            if not self._trusts(address):
                break
        return client

    def _trusts(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.trusted)


def _address(hop: str) -> str | None:
    try:
        return str(ipaddress.ip_address(hop.strip()))
    except ValueError:
        return None
