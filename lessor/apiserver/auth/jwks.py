"""Signing keys of OIDC issuers, cached in memory and refetched when a key rotation shows.

A token signed with a key we have not seen means either a rotation at the issuer or a forgery.
Refetching on every unknown `kid` would let anyone make us hammer the issuer with bogus kids, so
fetches of one JWKS URL are at most one per `refetch_interval`, failed ones included: within it
an unknown kid is simply refused, and an issuer whose last fetch failed is answered as
unavailable at once. Each URL has a lock of its own, so an issuer that is slow to answer holds up
the tokens of that issuer only, and a fetch has one deadline, however its server trickles bytes.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable

import cachetools
import jwt

from lessor.apiserver.auth.errors import AuthenticationError, IssuerUnavailableError

Fetch = Callable[[str], bytes]
MAX_JWKS_BYTES = 1 << 20


def https_fetch(
    ca_pem_for: Callable[[str], str | None] = lambda _url: None, timeout: float = 5.0
) -> Fetch:
    """A fetcher for JWKS documents. `ca_pem_for(url)` may name extra CA certificates to trust
    for a URL, for private issuers such as a cluster's own service-account issuer."""

    def fetch(url: str) -> bytes:
        if not url.startswith(("https://", "http://")):
            raise IssuerUnavailableError(f"unsupported JWKS URL scheme: {url}")
        context = ssl.create_default_context()
        extra = ca_pem_for(url)
        if extra:
            context.load_verify_locations(cadata=extra)
        deadline = time.monotonic() + timeout
        body = bytearray()
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:  # noqa: S310
            while len(body) <= MAX_JWKS_BYTES and (chunk := response.read1(65536)):
                body += chunk
                if time.monotonic() > deadline:
                    raise OSError(f"no whole answer within {timeout:g}s")
        if len(body) > MAX_JWKS_BYTES:
            raise OSError(f"a JWKS document over {MAX_JWKS_BYTES} bytes")
        return bytes(body)

    return fetch


class JwksCache:
    def __init__(
        self,
        fetch: Fetch,
        *,
        ttl: float = 600.0,
        refetch_interval: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._keys: cachetools.TTLCache[str, dict[str, jwt.PyJWK]] = cachetools.TTLCache(
            maxsize=64, ttl=ttl, timer=clock
        )
        self._last_fetch: dict[str, float] = {}
        self._failure: dict[str, str] = {}  # why the last fetch of a URL failed
        self._refetch_interval = refetch_interval
        self._clock = clock
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    def key(self, jwks_url: str, kid: str | None) -> jwt.PyJWK:
        """The key that signed a token, fetching the JWKS on first use or after a rotation."""
        with self._lock_of(jwks_url):
            keys = self._keys.get(jwks_url)
            if (keys is None or kid not in keys) and self._may_fetch(jwks_url):
                keys = self._load(jwks_url)
            if keys is None:
                raise IssuerUnavailableError(
                    f"JWKS at {jwks_url} unavailable: {self._failure.get(jwks_url, 'not loaded')}"
                )
            if kid is None and len(keys) == 1:
                return next(iter(keys.values()))
            found = keys.get(kid or "")
            if found is None:
                raise AuthenticationError(f"unknown signing key id {kid!r}")
            return found

    def _lock_of(self, jwks_url: str) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault(jwks_url, threading.Lock())

    def _may_fetch(self, jwks_url: str) -> bool:
        last = self._last_fetch.get(jwks_url)
        return last is None or self._clock() - last >= self._refetch_interval

    def _load(self, jwks_url: str) -> dict[str, jwt.PyJWK] | None:
        """The URL's keys, fetched now; on a failure the keys cached before (if any), with the
        failure remembered, so that the URL is not asked again within the interval."""
        self._last_fetch[jwks_url] = self._clock()
        try:
            document = json.loads(self._fetch(jwks_url))
            keyset = jwt.PyJWKSet.from_dict(document)
        except (OSError, ValueError, jwt.PyJWKSetError) as error:
            self._failure[jwks_url] = str(error)[:200]
            return self._keys.get(jwks_url)
        self._failure.pop(jwks_url, None)
        keys = {key.key_id or "": key for key in keyset.keys}
        self._keys[jwks_url] = keys
        return keys
