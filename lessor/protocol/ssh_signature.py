"""The SSH request signature's wire format, shared by the API server and the CLI.

The header (one line):

    Authorization: Lessor-SSH key="<base64 public key blob>", ts="<unix seconds>",
                   nonce="<16 to 64 chars of [A-Za-z0-9_-]>", sig="<base64 SSH signature blob>"

The signed bytes are these six lines joined by LF, with no trailing LF:

    lessor-request-v1
    <METHOD>
    <path with query string, exactly as sent>
    <ts>
    <nonce>
    <hex SHA-256 of the body; of the empty string when there is none>

The first line is a domain separator: an agent signs whatever it is given, and the prefix keeps
such a signature from ever being valid as anything else (an SSH login, another service's request).
"""

from __future__ import annotations

import hashlib
import struct

SCHEME = "Lessor-SSH"
DOMAIN = "lessor-request-v1"
KEY_TYPE = b"ssh-ed25519"


def canonical_request(method: str, target: str, timestamp: int, nonce: str, body: bytes) -> bytes:
    digest = hashlib.sha256(body).hexdigest()
    return "\n".join([DOMAIN, method.upper(), target, str(timestamp), nonce, digest]).encode()


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
