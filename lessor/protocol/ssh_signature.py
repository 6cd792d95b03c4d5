"""The SSH request signature's wire format, shared by the API server and the CLI.

The header (one line):

    Authorization: Lessor-SSH key="<base64 public key blob>", aud="<audience>",
                   ts="<unix seconds>", nonce="<16 to 64 chars of [A-Za-z0-9_-]>",
                   sig="<base64 SSH signature blob>"

The signed bytes are these seven lines joined by LF, with no trailing LF:

    lessor-request-v2
    <audience: the endpoint URL the client is configured for, normalized by audience_of>
    <METHOD>
    <path with query string, exactly as sent>
    <ts>
    <nonce>
    <hex SHA-256 of the body; of the empty string when there is none>

The first line is a domain separator: an agent signs whatever it is given, and the prefix keeps
such a signature from ever being valid as anything else (an SSH login, another service's request).
The audience binds the signature to one deployment: a header captured by any other endpoint the
same key signs for (staging, a developer's install, a plain-http one) names that endpoint, and
this deployment accepts only the audiences it is configured with. (Version 1 named no endpoint,
and is refused.)
"""

from __future__ import annotations

import hashlib
import struct
from urllib.parse import urlsplit

SCHEME = "Lessor-SSH"
DOMAIN = "lessor-request-v2"
KEY_TYPE = b"ssh-ed25519"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def audience_of(endpoint: str) -> str:
    """The canonical spelling of an endpoint URL as an audience: scheme and host in lower case,
    the default port left out, no trailing slash, no query. ValueError if it is no http(s) URL."""
    parts = urlsplit(endpoint.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {endpoint!r}")
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    netloc = host if port in (None, _DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    return f"{scheme}://{netloc}{parts.path.rstrip('/')}"


def canonical_request(
    audience: str, method: str, target: str, *, timestamp: int, nonce: str, body: bytes
) -> bytes:
    digest = hashlib.sha256(body).hexdigest()
    lines = [DOMAIN, audience, method.upper(), target, str(timestamp), nonce, digest]
    return "\n".join(lines).encode()


def ssh_string(data: bytes) -> bytes:
    """SSH wire encoding of a byte string: 32-bit big-endian length, then the bytes."""
    return struct.pack(">I", len(data)) + data


def read_strings(blob: bytes) -> list[bytes]:
    """Split an SSH wire-format blob into its length-prefixed strings; ValueError if truncated."""
    parts, offset = [], 0
    while offset < len(blob):
        if offset + 4 > len(blob):
            raise ValueError("truncated SSH blob")
        (length,) = struct.unpack(">I", blob[offset : offset + 4])
        offset += 4
        if offset + length > len(blob):
            raise ValueError("truncated SSH blob")
        parts.append(blob[offset : offset + length])
        offset += length
    return parts
