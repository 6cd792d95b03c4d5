"""Signing keys of OIDC issuers, cached in memory and refetched when a key rotation shows.

Where the keys are: the policy's `jwksUrl` when it names one; otherwise the documented derived
default `{issuer}/.well-known/jwks.json` first and, when the issuer has no document there, the
`jwks_uri` its discovery document names (`{issuer}/.well-known/openid-configuration`), as most
providers publish their keys elsewhere (GitHub Actions at `/.well-known/jwks`, GitLab at
`/oauth/discovery/keys`, Keycloak, Dex). The discovery document must name the policy's issuer
exactly (OpenID Connect Discovery 1.0, 4.3), or a document anyone can serve at that address
could point us at keys of their choosing; its `jwks_uri` obeys the issuer's own rule (https, or
http on loopback). The URL found is remembered with the keys, so a rotation refetches the keys
only.

A token signed with a key we have not seen means either a rotation at the issuer or a forgery.
Refetching on every unknown `kid` would let anyone make us hammer the issuer with bogus kids, so
fetches of one issuer's keys (discovery included) are at most one per `refetch_interval`, failed
ones included: within it an unknown kid is simply refused, and an issuer whose last fetch failed
is answered as unavailable at once. Each issuer has a lock of its own, so one that is slow to
answer holds up the tokens of that issuer only, and a fetch has one deadline, however its server
trickles bytes.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cachetools
import jwt

from lessor.apiserver.auth.errors import AuthenticationError, IssuerUnavailableError
from lessor.resources.access_policy import SECURE_URL

MAX_DOCUMENT_BYTES = 1 << 20


@dataclass(frozen=True)
class KeySource:
    """An issuer's keys as a policy locates them; the CA bundle is trusted for this issuer's
    fetches only (another policy's bundle never applies to them)."""

    issuer: str
    jwks_url: str | None = None
    ca_bundle: str | None = None

    @property
    def derived(self) -> str:
        return f"{self.issuer.rstrip('/')}/.well-known/jwks.json"

    @property
    def discovery(self) -> str:
        return f"{self.issuer.rstrip('/')}/.well-known/openid-configuration"


class DocumentNotFoundError(OSError):
    """The server answered that no document is at the URL (404 or 410)."""


Fetch = Callable[[str, "str | None"], bytes]  # (url, extra CA PEM) -> body


def https_fetch(timeout: float = 5.0) -> Fetch:
    """A fetcher for JWKS and discovery documents, at most MAX_DOCUMENT_BYTES within `timeout`.
    The extra CA certificates (a policy's `caBundle`) are trusted besides the system's, for
    private issuers such as a cluster's own service-account issuer."""

    def fetch(url: str, ca_pem: str | None) -> bytes:
        if not url.startswith(("https://", "http://")):
            raise IssuerUnavailableError(f"unsupported URL scheme: {url}")
        context = ssl.create_default_context()
        if ca_pem:
            context.load_verify_locations(cadata=ca_pem)
        deadline = time.monotonic() + timeout
        body = bytearray()
        try:
            with urllib.request.urlopen(url, timeout=timeout, context=context) as response:  # noqa: S310
                while len(body) <= MAX_DOCUMENT_BYTES and (chunk := response.read1(65536)):
                    body += chunk
                    if time.monotonic() > deadline:
                        raise OSError(f"no whole answer within {timeout:g}s")
        except urllib.error.HTTPError as error:
            if error.code in (404, 410):
                raise DocumentNotFoundError(f"{url}: HTTP {error.code}") from None
            raise
        if len(body) > MAX_DOCUMENT_BYTES:
            raise OSError(f"a document over {MAX_DOCUMENT_BYTES} bytes")
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
        self._keys: cachetools.TTLCache[KeySource, dict[str, jwt.PyJWK]] = cachetools.TTLCache(
            maxsize=64, ttl=ttl, timer=clock
        )
        # The jwks_uri discovery gave for an issuer without a document at the derived default.
        self._discovered: cachetools.TTLCache[KeySource, str] = cachetools.TTLCache(
            maxsize=64, ttl=ttl, timer=clock
        )
        self._last_fetch: cachetools.LRUCache[KeySource, float] = cachetools.LRUCache(256)
        self._failure: cachetools.LRUCache[KeySource, str] = cachetools.LRUCache(256)
        self._refetch_interval = refetch_interval
        self._clock = clock
        self._locks: cachetools.LRUCache[KeySource, threading.Lock] = cachetools.LRUCache(256)
        self._locks_lock = threading.Lock()

    def key(self, source: KeySource, kid: str | None) -> jwt.PyJWK:
        """The key that signed a token, fetching the keys on first use or after a rotation."""
        with self._lock_of(source):
            keys = self._keys.get(source)
            if (keys is None or kid not in keys) and self._may_fetch(source):
                keys = self._load(source)
            if keys is None:
                why = self._failure.get(source, "not loaded")
                raise IssuerUnavailableError(f"the keys of {source.issuer} unavailable: {why}")
            if kid is None and len(keys) == 1:
                return next(iter(keys.values()))
            found = keys.get(kid or "")
            if found is None:
                raise AuthenticationError(f"unknown signing key id {kid!r}")
            return found

    def keys_of(
        self, source: KeySource, *, excluding: str | None, refetch: bool = False
    ) -> list[jwt.PyJWK]:
        """The source's keys but one; with `refetch`, fetched again first when the interval
        allows (the keys a token's signature needs may be newer than its `kid` says)."""
        with self._lock_of(source):
            if refetch and self._may_fetch(source):
                self._load(source)
            keys = self._keys.get(source) or {}
        return [key for kid, key in keys.items() if kid != (excluding or "")]

    def location(self, source: KeySource) -> str:
        """Where the source's keys were last read from (for logs and tests)."""
        return source.jwks_url or self._discovered.get(source) or source.derived

    def _lock_of(self, source: KeySource) -> threading.Lock:
        with self._locks_lock:
            lock = self._locks.get(source)
            if lock is None:
                lock = self._locks[source] = threading.Lock()
            return lock

    def _may_fetch(self, source: KeySource) -> bool:
        last = self._last_fetch.get(source)
        return last is None or self._clock() - last >= self._refetch_interval

    def _load(self, source: KeySource) -> dict[str, jwt.PyJWK] | None:
        """The source's keys, fetched now; on a failure the keys cached before (if any), with
        the failure remembered, so that the issuer is not asked again within the interval."""
        self._last_fetch[source] = self._clock()
        try:
            keys = self._fetch_keys(source)
        except (OSError, ValueError, jwt.PyJWKSetError, IssuerUnavailableError) as error:
            self._failure[source] = str(error)[:300]
            return self._keys.get(source)
        self._failure.pop(source, None)
        self._keys[source] = keys
        return keys

    def _fetch_keys(self, source: KeySource) -> dict[str, jwt.PyJWK]:
        if source.jwks_url:
            return self._keyset(source.jwks_url, source)
        known = self._discovered.get(source)
        if known:
            try:
                return self._keyset(known, source)
            except DocumentNotFoundError:
                self._discovered.pop(source, None)  # moved: look again, from the start
        try:
            return self._keyset(source.derived, source)
        except (DocumentNotFoundError, _NotAKeySetError):
            pass  # no keys at the derived default: ask the issuer's discovery document
        url = self._discover(source)
        keys = self._keyset(url, source)
        self._discovered[source] = url
        return keys

    def _keyset(self, url: str, source: KeySource) -> dict[str, jwt.PyJWK]:
        document = _json_object(self._fetch(url, source.ca_bundle), url)
        if not isinstance(document.get("keys"), list):
            raise _NotAKeySetError(f"{url} is not a JWKS document")
        keyset = jwt.PyJWKSet.from_dict(document)
        return {key.key_id or "": key for key in keyset.keys}

    def _discover(self, source: KeySource) -> str:
        document = _json_object(self._fetch(source.discovery, source.ca_bundle), source.discovery)
        named = document.get("issuer")
        if named != source.issuer:
            raise IssuerUnavailableError(
                f"the discovery document at {source.discovery} is of another issuer "
                f"({str(named)[:200]!r}), not {source.issuer!r}"
            )
        jwks_uri = document.get("jwks_uri")
        if not isinstance(jwks_uri, str) or not re.match(SECURE_URL, jwks_uri):
            raise IssuerUnavailableError(
                f"the discovery document at {source.discovery} names no https jwks_uri"
            )
        return jwks_uri


class _NotAKeySetError(ValueError):
    """A document that parses but holds no `keys` (some servers answer 200 with a page)."""


def _json_object(body: bytes, url: str) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError as error:
        raise _NotAKeySetError(f"{url} is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise _NotAKeySetError(f"{url} is not a JSON object")
    return document
