"""Which address a request's log line and audit record name (lessor.apiserver.http.client_address):
a forwarded address only from a proxy the administrator trusts."""

from __future__ import annotations

import pytest

from lessor.apiserver.http.client_address import ClientAddress, networks

INGRESS = ClientAddress(networks(["10.0.0.0/8", "fd00::/8"]))


@pytest.mark.parametrize(
    ("peer", "header", "client"),
    [
        # No trusted proxy named: the peer, whatever the header says.
        ("203.0.113.9", "198.51.100.1", "203.0.113.9"),
        # The ingress forwards: the address it received the request from.
        ("10.1.2.3", "198.51.100.7", "198.51.100.7"),
        # A client that sends its own X-Forwarded-For through the ingress: the ingress appends
        # the real peer, which is the last untrusted hop; the forged one before it is ignored.
        ("10.1.2.3", "192.0.2.66, 198.51.100.7", "198.51.100.7"),
        # Two trusted hops (a load balancer, then the ingress): past both.
        ("10.1.2.3", "198.51.100.7, 10.9.9.9", "198.51.100.7"),
        ("10.1.2.3", "2001:db8::5, fd00::1", "2001:db8::5"),
        # Garbage from the proxy's side: the last hop that was an address.
        ("10.1.2.3", "not-an-address", "10.1.2.3"),
        ("10.1.2.3", "", "10.1.2.3"),
        (None, "198.51.100.7", None),
    ],
)
def test_a_forwarded_address_is_read_only_from_a_trusted_proxy(
    peer: str | None, header: str, client: str | None
) -> None:
    trusting = INGRESS if peer != "203.0.113.9" else ClientAddress()
    assert trusting.of(peer, header) == client


def test_an_untrusted_peer_cannot_name_another_address() -> None:
    assert INGRESS.of("203.0.113.9", "10.1.2.3, 198.51.100.7") == "203.0.113.9"


def test_a_huge_header_is_read_from_its_end_only() -> None:
    header = "x" * 100_000 + ", 198.51.100.7"
    assert INGRESS.of("10.1.2.3", header) == "198.51.100.7"


def test_a_range_that_is_not_a_cidr_is_named() -> None:
    with pytest.raises(ValueError, match=r"10\.0\.0\.0/33"):
        networks(["10.0.0.0/33"])
