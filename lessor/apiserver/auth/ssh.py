"""SSH request signatures: verifying a request signed by an Ed25519 key held in an ssh-agent.

The wire format is in `lessor.protocol.ssh_signature`. The audience names the deployment the
signature is for, so a header captured anywhere else is refused here; the timestamp bounds how
long a captured request stays usable, and the nonce, remembered for that window, makes it usable
once. Changing the method, path, query or body breaks the signature.
"""

from __future__ import annotations

import base64
import binascii
import re
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

import cachetools
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from lessor.apiserver.auth.errors import AuthenticationError
from lessor.protocol.ssh_signature import (
    KEY_TYPE,
    SCHEME,
    canonical_request,
    read_strings,
    ssh_string,
)

MAX_SKEW_SECONDS = 300
_NONCE = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
_PARAM = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class SignedRequest:
    key_blob: bytes
    audience: str
    timestamp: int
    nonce: str
    signature_blob: bytes


def _read_strings(blob: bytes) -> list[bytes]:
    try:
        return read_strings(blob)
    except ValueError as error:
        raise AuthenticationError(str(error)) from error


def ed25519_key_blob(raw_public_key: bytes) -> bytes:
    return ssh_string(KEY_TYPE) + ssh_string(raw_public_key)


def ed25519_signature_blob(raw_signature: bytes) -> bytes:
    return ssh_string(KEY_TYPE) + ssh_string(raw_signature)


def key_blob_from_openssh(line: str) -> bytes:
    """The wire blob of an `ssh-ed25519 AAAA... comment` line, as in authorized_keys."""
    fields = line.split()
    if len(fields) < 2 or fields[0] != KEY_TYPE.decode():
        raise ValueError("only ssh-ed25519 public keys are accepted")
    try:
        blob = base64.b64decode(fields[1], validate=True)
    except binascii.Error as error:
        raise ValueError("public key is not valid base64") from error
    parts = _read_strings(blob)
    if len(parts) != 2 or parts[0] != KEY_TYPE or len(parts[1]) != 32:
        raise ValueError("not an Ed25519 public key")
    return blob


def parse_authorization(header: str) -> SignedRequest:
    scheme, _, rest = header.partition(" ")
    if scheme != SCHEME:
        raise AuthenticationError("not an SSH signature")
    params = dict(_PARAM.findall(rest))
    try:
        return SignedRequest(
            key_blob=base64.b64decode(params["key"], validate=True),
            audience=params["aud"],
            timestamp=int(params["ts"]),
            nonce=params["nonce"],
            signature_blob=base64.b64decode(params["sig"], validate=True),
        )
    except (KeyError, ValueError, binascii.Error) as error:
        raise AuthenticationError(f"malformed SSH signature header: {error}") from error


class NonceCache:
    """Nonces seen within the skew window. Per replica: a nonce replayed against another replica
    within the window is refused only by that replica's own cache, which is why the window is
    short; requests that change state are also fenced by resourceVersion server-side."""

    def __init__(self, ttl: float = 2 * MAX_SKEW_SECONDS, maxsize: int = 100_000) -> None:
        self._seen: cachetools.TTLCache[tuple[bytes, str], bool] = cachetools.TTLCache(
            maxsize=maxsize, ttl=ttl
        )
        self._lock = threading.Lock()

    def first_use(self, key_blob: bytes, nonce: str) -> bool:
        with self._lock:
            if (key_blob, nonce) in self._seen:
                return False
            self._seen[(key_blob, nonce)] = True
            return True


def verify_request(
    request: SignedRequest,
    *,
    method: str,
    target: str,
    body: bytes,
    authorized_keys: Mapping[bytes, str],
    nonces: NonceCache,
    audiences: Collection[str],
    clock: Callable[[], float] = time.time,
) -> str:
    """Return the identity the key is authorized as, or raise AuthenticationError. `audiences`
    are this deployment's (normalized, lessor.protocol.ssh_signature.audience_of): none
    configured, no signature is accepted."""
    if request.audience not in audiences:
        raise AuthenticationError(f"signed for another deployment ({request.audience[:200]!r})")
    identity = authorized_keys.get(request.key_blob)
    if identity is None:
        raise AuthenticationError("key not authorized")
    if abs(clock() - request.timestamp) > MAX_SKEW_SECONDS:
        raise AuthenticationError("timestamp outside the allowed skew")
    if not _NONCE.match(request.nonce):
        raise AuthenticationError("malformed nonce")
    key_parts = _read_strings(request.key_blob)
    signature_parts = _read_strings(request.signature_blob)
    if len(signature_parts) != 2 or signature_parts[0] != KEY_TYPE:
        raise AuthenticationError("not an Ed25519 signature")
    message = canonical_request(
        request.audience,
        method,
        target,
        timestamp=request.timestamp,
        nonce=request.nonce,
        body=body,
    )
    try:
        Ed25519PublicKey.from_public_bytes(key_parts[1]).verify(signature_parts[1], message)
    except (InvalidSignature, ValueError) as error:
        raise AuthenticationError("bad signature") from error
    # Remembered only once the signature is good, so forgeries cannot fill the cache.
    if not nonces.first_use(request.key_blob, request.nonce):
        raise AuthenticationError("nonce replayed")
    return identity
