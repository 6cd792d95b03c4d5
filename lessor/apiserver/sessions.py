"""Session tokens: what `lessor login` exchanges a credential for, valid on every replica.

A session token is `lsess.<payload>.<mac>`: the payload (base64url JSON: session id, identity,
policy, claims, method, issue and expiry times) authenticated with HMAC-SHA256 under a key kept
in the Secret `lessor-session-key`. The first replica that needs the key creates it (an atomic
create; the others read the winner's), so every replica verifies every session. Logout records
the session id as revoked (a ConfigMap, also an atomic create) until the session would have
expired anyway; replicas check that record, caching a negative answer for two seconds at most.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

import cachetools
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lessor.apiserver.auth.errors import AuthenticationError
from lessor.apiserver.kube import TIMEOUT, Kube

PREFIX = "lsess."
KEY_SECRET = "lessor-session-key"  # noqa: S105 - the name of a Secret, not a secret
REVOKED_LABEL = "lessor.dev/revoked-session"
DEFAULT_TTL = 12 * 3600
MAX_TTL = 24 * 3600


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class Session:
    session_id: str
    identity: str
    policy: str
    claims: dict[str, Any]
    method: str
    expires: int


class Sessions:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._key: bytes | None = None
        self._lock = threading.Lock()
        self._not_revoked: cachetools.TTLCache[str, bool] = cachetools.TTLCache(
            maxsize=10_000, ttl=2
        )

    def _signing_key(self) -> bytes:
        with self._lock:
            if self._key is None:
                self._key = self._load_or_create_key()
            return self._key

    def _load_or_create_key(self) -> bytes:
        fresh = secrets.token_bytes(32)
        body = client.V1Secret(
            metadata=client.V1ObjectMeta(name=KEY_SECRET),
            data={"key": base64.b64encode(fresh).decode()},
            type="Opaque",
        )
        try:
            self.kube.core.create_namespaced_secret(
                self.kube.namespace, body, _request_timeout=TIMEOUT
            )
            return fresh
        except ApiException as error:
            if error.status != 409:
                raise
        stored = self.kube.secret_value_bytes(self.kube.namespace, KEY_SECRET, "key")
        if stored is None:
            raise AuthenticationError("session key unreadable")
        return stored

    def issue(
        self, identity: str, policy: str, claims: dict[str, Any], method: str, ttl: int
    ) -> tuple[str, int]:
        now = int(time.time())
        expires = now + max(1, min(ttl, MAX_TTL))
        payload = {
            "sid": secrets.token_hex(16),
            "sub": identity,
            "pol": policy,
            "clm": claims,
            "via": method,
            "iat": now,
            "exp": expires,
        }
        encoded = _b64(json.dumps(payload, separators=(",", ":")).encode())
        mac = hmac.new(self._signing_key(), encoded.encode(), hashlib.sha256).digest()
        return f"{PREFIX}{encoded}.{_b64(mac)}", expires

    def verify(self, token: str) -> Session:
        try:
            encoded, mac = token.removeprefix(PREFIX).split(".")
            expected = hmac.new(self._signing_key(), encoded.encode(), hashlib.sha256).digest()
            if not hmac.compare_digest(expected, _unb64(mac)):
                raise AuthenticationError("bad session signature")
            payload = json.loads(_unb64(encoded))
        except (ValueError, TypeError) as error:
            raise AuthenticationError("malformed session token") from error
        if int(payload["exp"]) < time.time():
            raise AuthenticationError("session expired")
        session = Session(
            session_id=str(payload["sid"]),
            identity=str(payload["sub"]),
            policy=str(payload["pol"]),
            claims=dict(payload["clm"]),
            method=str(payload["via"]),
            expires=int(payload["exp"]),
        )
        if self._revoked(session.session_id):
            raise AuthenticationError("session revoked")
        return session

    def _revoked(self, session_id: str) -> bool:
        if session_id in self._not_revoked:
            return False
        try:
            self.kube.core.read_namespaced_config_map(
                f"lessor-revoked-{session_id}", self.kube.namespace, _request_timeout=TIMEOUT
            )
        except ApiException as error:
            if error.status == 404:
                self._not_revoked[session_id] = True
                return False
            raise
        return True

    def revoke(self, session: Session) -> None:
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name=f"lessor-revoked-{session.session_id}",
                labels={REVOKED_LABEL: "true"},
                annotations={"lessor.dev/expires": str(session.expires)},
            )
        )
        try:
            self.kube.core.create_namespaced_config_map(
                self.kube.namespace, body, _request_timeout=TIMEOUT
            )
        except ApiException as error:
            if error.status != 409:  # already revoked: logging out twice is fine
                raise
        self._not_revoked.pop(session.session_id, None)
