"""Static tokens: which token a Secret's value stands for.

A Secret may hold the token itself or, better, `sha256:` and the lowercase hex SHA-256 of the
token's UTF-8 bytes: whoever can read the Secret (a backup, etcd, anyone allowed to get Secrets in
the namespace) then holds no credential. Both forms come down to the token's digest, so a
presented token is checked with one constant-time comparison of two digests whatever the form,
and a session remembers the token, not the form it was kept in.
"""

from __future__ import annotations

import hashlib
import re

DIGEST_PREFIX = b"sha256:"
_HEX_DIGEST = re.compile(rb"[0-9a-f]{64}")


class MalformedDigestError(ValueError):
    """A Secret's value says it is a digest and is not one: an administrator's mistake. The
    message never holds the value, so it can be logged."""


def token_digest(token: str) -> bytes:
    """The SHA-256 of a token as a caller presents it."""
    return hashlib.sha256(token.encode()).digest()


def stored_digest(value: bytes) -> bytes:
    """The SHA-256 of the token a Secret's value stands for: the digest it holds, or that of the
    token it holds in plaintext (still accepted, as before digests were).

    A value starting `sha256:` is always read as a digest: one that is not well formed is
    refused rather than taken for a plaintext token, so a mistyped digest is never a working
    token, not even for whoever types its text as the token."""
    if not value.startswith(DIGEST_PREFIX):
        return hashlib.sha256(value).digest()
    hex_digits = value.removeprefix(DIGEST_PREFIX)
    if _HEX_DIGEST.fullmatch(hex_digits) is None:
        raise MalformedDigestError(
            "a value starting sha256: must go on with exactly 64 lowercase hex digits"
        )
    return bytes.fromhex(hex_digits.decode())
