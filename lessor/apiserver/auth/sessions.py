"""Session tokens: what `lessor login` exchanges a credential for, valid on every replica, and
never longer than the credential behind it.

A session token is `lsess.<payload>.<mac>`: the payload (base64url JSON: session id, identity,
policy, claims, method, the credential it came from, issue and expiry times) authenticated with
HMAC-SHA256 under a key kept in the Secret `lessor-session-key`. The first replica that needs
the key creates it (an atomic create; the others read the winner's), and every replica reads it
again at least once a minute, so deleting the Secret rotates the key: every session ends.

A session also has a record, a ConfigMap (label `lessor.dev/session`, annotated with the session
id, identity, policy, method and expiry), created at login, and a session is valid only while
its record exists and names it. `kubectl get configmaps -l lessor.dev/session` lists the
sessions, deleting a record ends that session on every replica (each trusts a record it has seen
for two seconds at most), and logout deletes it. Records carry the ten minutes their expiry falls
in as a label, and each process deletes the expired ones at most once a minute, as for nonces.

Each login writes a record, so an owner holds at most `max_per_owner` of them: a record is one
of the owner's slots, `lessor-session-<owner digest>-<n>`, created atomically, so the ceiling
holds across replicas without counting first. With every slot taken, the owner's session that
expires first is ended (its record deleted, fenced by uid) and its slot is the new session's.
Tokens issued before slots existed name a record `lessor-session-<id>`, which stays theirs.

Whether the credential is still good is the authenticator's question
(lessor.apiserver.auth.authenticator), asked on every use of the session.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import random
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import cachetools
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lessor.apiserver.auth.errors import AuthenticationError
from lessor.apiserver.http.errors import HttpConflictError
from lessor.apiserver.state.expiring_records import ExpiringRecords
from lessor.apiserver.state.kube import TIMEOUT, Kube
from lessor.protocol.json_object import Json

PREFIX = "lsess."
KEY_SECRET = "lessor-session-key"  # noqa: S105 - the name of a Secret, not a secret
RECORD_PREFIX = "lessor-session-"
LABEL = "lessor.dev/session"
OWNER_LABEL = "lessor.dev/session-owner"  # a digest of the owner (labels hold no `/` or `@`)
SESSION_ANNOTATION = "lessor.dev/session-id"
# When the session expires, RFC 3339 UTC: written with the record, read to pick the slot to end.
EXPIRES_ANNOTATION = "lessor.dev/expires"
DEFAULT_MAX_PER_OWNER = 32
SLOT_ATTEMPTS = 5  # slots raced for by concurrent logins of one owner before a 409
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


class Issued(NamedTuple):
    token: str
    expires: int
    session_id: str  # for the audit record: what an administrator revokes (the record's key)


@dataclass(frozen=True)
class LoginSession:
    session_id: str
    identity: str
    policy: str
    claims: dict[str, Any]
    method: str
    credential: str  # which credential of the policy it came from (authn.credential_of)
    expires: int
    record: str  # the name of its record


class Sessions:
    def __init__(
        self, kube: Kube, key_ttl: float = KEY_TTL, max_per_owner: int = DEFAULT_MAX_PER_OWNER
    ) -> None:
        self.kube = kube
        # How soon a rotated key (its Secret deleted) ends every session on this replica.
        self.key_ttl = key_ttl
        self.max_per_owner = max_per_owner
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
        owner: str,
        method: str,
        credential: str,
        ttl: int,
    ) -> Issued:
        """A new session and its record, in one of `owner`'s slots; `ttl` is already bounded by
        the caller's credential."""
        now = int(time.time())
        expires = now + max(1, min(ttl, MAX_TTL))
        session_id = secrets.token_hex(16)
        body = self._record_body(session_id, identity, policy, method, expires)
        record = self._take_slot(_owner_tag(owner), body)
        self._recorded[session_id] = True
        payload = {
            "sid": session_id,
            "rec": record,
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
        token = f"{PREFIX}{encoded}.{_b64(self._mac(encoded, max_age=0))}"
        return Issued(token, expires, session_id)

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
                record=str(payload.get("rec") or RECORD_PREFIX + str(payload["sid"])),
            )
        except (ValueError, TypeError, KeyError) as error:
            raise AuthenticationError("malformed session token") from error
        if session.expires < time.time():
            raise AuthenticationError("session expired")
        if not self.exists(session):
            raise AuthenticationError("session revoked")
        return session

    def revoke(self, session: LoginSession) -> None:
        """End the session on every replica: its record goes (unless its slot is already
        another session's; logging out twice is fine)."""
        self._recorded.pop(session.session_id, None)
        found = self._read(session.record)
        if found is not None and _names(found, session):
            self._delete(found)

    # -- records --------------------------------------------------------------------------------

    def _record_body(
        self, session_id: str, identity: str, policy: str, method: str, expires: int
    ) -> Json:
        return {
            "metadata": {
                "labels": self.records.labels(expires),
                "annotations": {
                    SESSION_ANNOTATION: session_id,
                    "lessor.dev/identity": identity[:1024],
                    "lessor.dev/policy": policy,
                    "lessor.dev/method": method,
                    EXPIRES_ANNOTATION: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires)),
                },
            }
        }

    def _take_slot(self, tag: str, body: Json) -> str:
        """The name of the owner's slot the record was created in: a free one (at random, so
        that concurrent logins of one owner rarely race for it), else the one whose session
        expires first, ended for it. A slot taken meanwhile makes the create fail, and the
        slots are looked at again."""
        body["metadata"]["labels"][OWNER_LABEL] = tag
        slots = [f"{RECORD_PREFIX}{tag}-{n}" for n in range(self.max_per_owner)]
        for _ in range(SLOT_ATTEMPTS):
            held = {item["metadata"]["name"]: item for item in self._held(tag)}
            free = [name for name in slots if name not in held]
            if free:
                name = random.choice(free)  # noqa: S311 - a spread, not a secret
            else:  # every slot is held (records beyond the slots, of a higher cap, expire)
                victim = min((held[slot] for slot in slots), key=_expiry)
                name = victim["metadata"]["name"]
                self._delete(victim)
            body["metadata"]["name"] = name
            if self._create(body):
                return name
        raise HttpConflictError(
            "other logins of this identity took every session slot meanwhile; retry",
            reason="conflict_retryable",
        )

    def _held(self, tag: str) -> list[Json]:
        """The owner's records, as they are (a consistent list: logins are rare, and one just
        made by the same caller must be seen); a slot taken since is found by the create's
        409."""
        query = {"labelSelector": f"{OWNER_LABEL}={tag}"}
        listed = self.kube.request("GET", self.kube.configmap_path(), query=query)
        return cast(list[Json], listed.get("items") or [])

    def _create(self, body: Json) -> bool:
        try:
            self.kube.request("POST", self.kube.configmap_path(), body=body)
        except ApiException as error:
            if error.status != 409:
                raise
            return False
        return True

    def _read(self, name: str) -> Json | None:
        try:
            return self.kube.request("GET", self.kube.configmap_path(name))
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def _delete(self, record: Json) -> None:
        """Delete this record and no successor in its slot (uid precondition); gone is fine."""
        metadata = record["metadata"]
        options = {"kind": "DeleteOptions", "apiVersion": "v1",
                   "preconditions": {"uid": metadata["uid"]}}  # fmt: skip
        try:
            self.kube.request("DELETE", self.kube.configmap_path(metadata["name"]), body=options)
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    def exists(self, session: LoginSession) -> bool:
        if session.session_id in self._recorded:
            return True
        found = self._read(session.record)
        if found is None or not _names(found, session):
            return False
        self._recorded[session.session_id] = True
        return True


def _owner_tag(owner: str) -> str:
    """A label value standing for an owner (owners hold characters labels cannot)."""
    return hashlib.sha256(owner.encode()).hexdigest()[:40]


def _names(record: Json, session: LoginSession) -> bool:
    """Whether `record` is `session`'s: a slot record names its session (the slot may have
    passed to another); a record of the time before slots is its session's by its name."""
    annotations = record["metadata"].get("annotations") or {}
    return bool(annotations.get(SESSION_ANNOTATION, session.session_id) == session.session_id)


def _expiry(record: Json) -> str:
    """When its session expires, as RFC 3339 UTC text (which sorts as time does)."""
    return str((record["metadata"].get("annotations") or {}).get(EXPIRES_ANNOTATION, ""))
