"""Session tokens: what `lessor login` exchanges a credential for, valid on every replica, and
never longer than the credential behind it.

A session token is `lsess.<payload>.<mac>`: the payload (base64url JSON: session id, identity,
policy, claims, method, the credential it came from, issue and expiry times) authenticated with
HMAC-SHA256 under a key kept in the Secret `lessor-session-key`. The first replica that needs
the key creates it (an atomic create; the others read the winner's), and every replica reads it
again at least once a minute, so deleting the Secret rotates the key: every session ends.

A session also has a record, the ConfigMap `lessor-session-<id>` (label `lessor.dev/session`,
annotated with the identity, policy, method and expiry), created at login, and a session is
valid only while its record exists. `kubectl get configmaps -l lessor.dev/session` lists the
sessions, deleting a record ends that session on every replica (each trusts a record it has seen
for two seconds at most), and logout deletes it. Records carry the ten minutes their expiry falls
in as a label, and each process deletes the expired ones at most once a minute, as for nonces.

Whether the credential is still good is the authenticator's question
(lessor.apiserver.auth.authenticator), asked on every use of the session.
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
from lessor.apiserver.state.expiring_records import ExpiringRecords
from lessor.apiserver.state.kube import TIMEOUT, Kube

PREFIX = "lsess."
KEY_SECRET = "lessor-session-key"  # noqa: S105 - the name of a Secret, not a secret
RECORD_PREFIX = "lessor-session-"
LABEL = "lessor.dev/session"
SWEPT_BUCKETS = 144 * 2  # two days: longer sessions than that do not exist
DEFAULT_TTL = 12 * 3600
MAX_TTL = 24 * 3600
KEY_TTL = 60.0  # default seconds a replica uses the signing key it read before reading it again
KEY_RECHECK = 5.0  # at most this often, a token that fails the MAC makes it read the key again
RECORD_TTL = 2.0  # seconds a replica trusts a session record it has seen


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class LoginSession:
    session_id: str
    identity: str
    policy: str
    claims: dict[str, Any]
    method: str
    credential: str  # which credential of the policy it came from (authn.credential_of)
    expires: int


class Sessions:
    def __init__(self, kube: Kube, key_ttl: float = KEY_TTL) -> None:
        self.kube = kube
        # How soon a rotated key (its Secret deleted) ends every session on this replica.
        self.key_ttl = key_ttl
        self._key: bytes | None = None
        self._key_read = 0.0
        self._lock = threading.Lock()
        self._recorded: cachetools.TTLCache[str, bool] = cachetools.TTLCache(
            maxsize=10_000, ttl=RECORD_TTL
        )
        self.records = ExpiringRecords(kube, LABEL, SWEPT_BUCKETS)

    # -- the signing key ---------------------------------------------------------------------

    def _signing_key(self, max_age: float) -> bytes:
        """The key, read again when the copy at hand is `max_age` seconds old."""
        with self._lock:
            age = time.monotonic() - self._key_read
            if self._key is None or age >= max_age:
                self._key = self._load_or_create_key()
                self._key_read = time.monotonic()
            return self._key

    def _load_or_create_key(self) -> bytes:
        stored = self.kube.secret_value_bytes(self.kube.namespace, KEY_SECRET, "key")
        if stored is not None:
            return stored
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

    def _mac(self, encoded: str, max_age: float | None = None) -> bytes:
        key = self._signing_key(self.key_ttl if max_age is None else max_age)
        return hmac.new(key, encoded.encode(), hashlib.sha256).digest()

    # -- issue, verify, revoke ----------------------------------------------------------------

    def issue(
        self,
        identity: str,
        policy: str,
        claims: dict[str, Any],
        *,
        method: str,
        credential: str,
        ttl: int,
    ) -> tuple[str, int]:
        """A new session and its record; `ttl` is already bounded by the caller's credential."""
        now = int(time.time())
        expires = now + max(1, min(ttl, MAX_TTL))
        session_id = secrets.token_hex(16)
        self._record(session_id, identity, policy, method, expires)
        payload = {
            "sid": session_id,
            "sub": identity,
            "pol": policy,
            "clm": claims,
            "via": method,
            "crd": credential,
            "iat": now,
            "exp": expires,
        }
        encoded = _b64(json.dumps(payload, separators=(",", ":")).encode())
        self.records.sweep_now_and_then()
        # Signed with the key as it is now, never a copy kept from before a rotation: every
        # worker of every replica, reading the key again on a failed MAC, then accepts it.
        return f"{PREFIX}{encoded}.{_b64(self._mac(encoded, max_age=0))}", expires

    def verify(self, token: str) -> LoginSession:
        try:
            encoded, mac = token.removeprefix(PREFIX).split(".")
            if not hmac.compare_digest(self._mac(encoded), _unb64(mac)) and not (
                hmac.compare_digest(self._mac(encoded, KEY_RECHECK), _unb64(mac))
            ):
                raise AuthenticationError("bad session signature")
            payload = json.loads(_unb64(encoded))
            session = LoginSession(
                session_id=str(payload["sid"]),
                identity=str(payload["sub"]),
                policy=str(payload["pol"]),
                claims=dict(payload["clm"]),
                method=str(payload["via"]),
                credential=str(payload.get("crd", "")),
                expires=int(payload["exp"]),
            )
        except (ValueError, TypeError, KeyError) as error:
            raise AuthenticationError("malformed session token") from error
        if session.expires < time.time():
            raise AuthenticationError("session expired")
        if not self._exists(session.session_id):
            raise AuthenticationError("session revoked")
        return session

    def revoke(self, session: LoginSession) -> None:
        """End the session on every replica: its record goes."""
        self._recorded.pop(session.session_id, None)
        try:
            self.kube.core.delete_namespaced_config_map(
                RECORD_PREFIX + session.session_id, self.kube.namespace, _request_timeout=TIMEOUT
            )
        except ApiException as error:
            if error.status != 404:  # already gone: logging out twice is fine
                raise

    # -- records --------------------------------------------------------------------------------

    def _record(
        self, session_id: str, identity: str, policy: str, method: str, expires: int
    ) -> None:
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name=RECORD_PREFIX + session_id,
                labels=self.records.labels(expires),
                annotations={
                    "lessor.dev/identity": identity[:1024],
                    "lessor.dev/policy": policy,
                    "lessor.dev/method": method,
                    "lessor.dev/expires": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires)),
                },
            )
        )
        self.kube.core.create_namespaced_config_map(
            self.kube.namespace, body, _request_timeout=TIMEOUT
        )
        self._recorded[session_id] = True

    def _exists(self, session_id: str) -> bool:
        if session_id in self._recorded:
            return True
        try:
            self.kube.core.read_namespaced_config_map(
                RECORD_PREFIX + session_id, self.kube.namespace, _request_timeout=TIMEOUT
            )
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        self._recorded[session_id] = True
        return True
