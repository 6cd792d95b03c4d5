"""The WebSocket routes, in front of Falcon: GET /v1/sandbox-leases/:id/attach and /port-forward
with `Upgrade: websocket`.

A Falcon responder must return a response, and a session is a connection that outlives one, so
these two requests are taken before Falcon sees them. Everything that can be refused is refused
first, as an ordinary JSON error in the service's shape (400, 401, 403, 404, 409, 429, 503),
exactly as the REST routes would answer: the handshake, the credential, the Sandbox gate, the
lease and its pod, the declared port, the identity's ceiling of open sessions
(lessor.apiserver.state.session_slots), and opening the pod's stream. Only then is the 101
written on the socket gunicorn hands over, and the session runs on it
(lessor.apiserver.sandboxes.stream_bridge); gunicorn is told the response was already written.
A plain GET of these paths goes on to Falcon, which answers 426.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException

from lessor.apiserver.auth.authenticator import Authenticator, Principal
from lessor.apiserver.http import audit, metrics
from lessor.apiserver.http.client_address import ClientAddress, networks
from lessor.apiserver.http.errors import (
    BadRequestError,
    HttpError,
    HttpNotFoundError,
    TooManyRequestsError,
    UnavailableError,
)
from lessor.apiserver.sandboxes.gate import SandboxGate
from lessor.apiserver.sandboxes.stream_bridge import Limits, StreamSession
from lessor.apiserver.sandboxes.streams import PodStream, SandboxStreamService
from lessor.apiserver.sandboxes.websocket import HandshakeError, WebSocket, handshake, is_upgrade
from lessor.apiserver.state.session_slots import SessionSlots
from lessor.protocol.responses import serialized

log = logging.getLogger(__name__)
PATH = re.compile(r"^/v1/sandbox-leases/([^/]+)/(attach|port-forward)$")

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
Wsgi = Callable[[Environ, StartResponse], Iterable[bytes]]


class StreamSettings(Protocol):
    @property
    def agent_sandbox_mode(self) -> str: ...

    @property
    def trusted_proxies(self) -> tuple[str, ...]: ...


class StreamServices(Protocol):
    """What the WebSocket routes use of the process's services
    (lessor.apiserver.routes.services), which sit above this package."""

    @property
    def settings(self) -> StreamSettings: ...

    @property
    def sandbox(self) -> SandboxGate: ...

    @property
    def streams(self) -> SandboxStreamService: ...

    @property
    def auth(self) -> Authenticator: ...


class StreamRoutes:
    def __init__(
        self, app: Wsgi, services: StreamServices, limits: Limits, slots: SessionSlots
    ) -> None:
        self.app = app
        self.services = services
        self.limits = limits
        self.slots = slots
        self.clients = ClientAddress(networks(services.settings.trusted_proxies))

    def __call__(self, environ: Environ, start_response: StartResponse) -> Any:
        match = PATH.match(environ.get("PATH_INFO", ""))
        if not (
            match
            and environ.get("REQUEST_METHOD") == "GET"
            and is_upgrade(environ)
            and self.services.settings.agent_sandbox_mode == "external"
        ):
            return self.app(environ, start_response)
        lease_id, kind = match.groups()
        action = kind.replace("-", "_")
        caller: dict[str, Any] = {}  # the principal, once _prepare knows it
        client = self.clients.of(environ.get("REMOTE_ADDR"), environ.get("HTTP_X_FORWARDED_FOR"))
        try:
            answer, pod, check, slot = self._prepare(environ, lease_id, kind, caller)
        except (HandshakeError, HttpError, ApiException) as error:
            refusal = _refusal(error, kind)
            audit.record(
                f"{action}.open",
                caller=caller.get("principal"),
                status=refusal.status,
                lease=lease_id,
                client=client,
            )
            return _refuse(start_response, kind, refusal)
        principal = caller["principal"]
        _count(kind, 101)
        audit.record(f"{action}.open", caller=principal, status=101, lease=lease_id, client=client)
        websocket = WebSocket(environ["gunicorn.socket"])
        try:
            self._serve(
                websocket, answer, pod=pod, check=check, kind=kind,
                audited=lambda **detail: audit.record(
                    f"{action}.close", caller=principal, status=None, lease=lease_id,
                    client=client, **detail,
                ),
            )  # fmt: skip
        finally:
            self.slots.release(slot)
        from gunicorn.workers.base_async import ALREADY_HANDLED  # noqa: PLC0415 - worker only

        return ALREADY_HANDLED

    def _prepare(
        self, environ: Environ, lease_id: str, kind: str, caller: dict[str, Any]
    ) -> tuple[bytes, PodStream, Callable[[], None], int]:
        """Every check of the session, in the REST routes' order, the open pod stream, and the
        session's slot; `caller["principal"]` is set once the caller is known (for the audit
        record of a refusal after that)."""
        answer = handshake(environ)
        verdict = self.services.sandbox.verdict()
        if not verdict.served:  # as the REST routes (SandboxResource): the path does not exist
            raise HttpNotFoundError(f"the Sandbox API is not served here: {verdict.reason}")
        principal = caller["principal"] = self._principal(environ)
        streams = self.services.streams
        target = streams.target(principal, lease_id, kind, environ.get("QUERY_STRING", ""))
        if environ.get("gunicorn.socket") is None:
            raise UnavailableError("WebSocket sessions are served under gunicorn only")
        slot = self.slots.claim(principal.owner)
        if slot is None:
            raise TooManyRequestsError(
                f"{self.slots.per_identity} attach and port-forward sessions of this identity"
                " are open on this server; close one first",
                reason="too_many_sessions",
            )
        try:
            pod = streams.open(target)
        except BaseException:
            self.slots.release(slot)
            raise
        return answer, pod, lambda: streams.check(target, principal), slot

    def _serve(
        self,
        websocket: WebSocket,
        answer: bytes,
        *,
        pod: PodStream,
        check: Callable[[], None],
        kind: str,
        audited: Callable[..., None],
    ) -> None:
        """`audited`: records the session's end (lessor.apiserver.http.audit)."""
        try:
            websocket.accept(answer)
        except OSError:  # the client went away before the session began
            pod.close()
            audited(reason="client_gone", duration_s=0.0, bytes_in=0, bytes_out=0)
            return
        started = time.monotonic()
        open_sessions = metrics.SANDBOX_STREAMS_OPEN.labels(kind)
        open_sessions.inc()
        try:
            session = StreamSession(websocket, pod, self.limits, check)
            outcome = session.run()
        finally:
            open_sessions.dec()
        metrics.SANDBOX_STREAMS_ENDED.labels(kind, outcome.reason).inc()
        audited(  # the session's one line: how it ended, how long, how much
            reason=outcome.reason,
            detail=outcome.detail,
            duration_s=round(time.monotonic() - started, 1),
            bytes_in=session.bytes_in,
            bytes_out=session.bytes_out,
        )

    def _principal(self, environ: Environ) -> Principal:
        """Authenticated once, as any request: an SSH signature's nonce is single-use."""
        target = environ.get("PATH_INFO", "")
        if environ.get("QUERY_STRING"):
            target += "?" + environ["QUERY_STRING"]
        return self.services.auth.authenticate(
            "GET", target, environ.get("HTTP_AUTHORIZATION"), b""
        )


def _count(kind: str, status: int) -> None:
    metrics.REQUESTS.labels(f"/v1/sandbox-leases/{{lease_id}}/{kind}", "GET", str(status)).inc()


def _refusal(error: HandshakeError | HttpError | ApiException, kind: str) -> HttpError:
    """What a failed check answers, in the service's error shape."""
    if isinstance(error, HandshakeError):
        return BadRequestError(str(error))
    if isinstance(error, ApiException):
        log.warning("kubernetes API error opening a %s session: %s", kind, error.status)
        return UnavailableError("the cluster API did not answer; retry")
    return error


def _refuse(start_response: StartResponse, kind: str, error: HttpError) -> list[bytes]:
    _count(kind, error.status)
    body = json.dumps(serialized(error.body())).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    headers += list(error.headers.items())
    start_response(f"{error.status} {HTTPStatus(error.status).phrase}", headers)
    return [body]
