"""/v1/login: a session for a credential, and its end."""

from __future__ import annotations

import datetime
import time
from typing import Protocol

import falcon

from lessor.apiserver.auth.authenticator import Authenticator
from lessor.apiserver.auth.middleware import principal
from lessor.apiserver.auth.sessions import DEFAULT_TTL
from lessor.apiserver.http import metrics
from lessor.apiserver.http.answers import responds
from lessor.apiserver.http.bodies import Login
from lessor.apiserver.http.errors import BadRequestError, ForbiddenError, TooManyRequestsError
from lessor.apiserver.http.resource import Resource
from lessor.apiserver.state.admission_limit import AdmissionLimiter
from lessor.protocol.durations import parse_duration
from lessor.protocol.responses import SessionIssued
from lessor.protocol.timestamps import timestamp


class LoginServices(Protocol):
    """What logging in and out uses of the process's services."""

    @property
    def auth(self) -> Authenticator: ...

    @property
    def logins(self) -> AdmissionLimiter: ...


class LoginResource(Resource[LoginServices]):
    """POST exchanges any configured credential (a static token, an OIDC token, or an SSH-signed
    request, whose timestamp and single-use nonce make it the challenge) for a session token;
    DELETE with the session token logs it out on every replica."""

    @responds(SessionIssued)
    def on_post(self, req: falcon.Request, resp: falcon.Response, body: Login | None) -> None:
        caller = principal(req)
        if caller.session is not None:
            raise BadRequestError("log in with a credential, not with a session token")
        if caller.method not in caller.policy.spec.auth.sessions.methods:
            raise ForbiddenError(
                f"the AccessPolicy {caller.policy.name} makes no sessions from {caller.method}"
                " credentials (auth.sessions.methods): send the credential with each request",
                reason="forbidden",
            )
        ttl = int(parse_duration(body.ttl).total_seconds()) if body and body.ttl else DEFAULT_TTL
        if caller.method == "oidc":  # never longer than the token it was exchanged for
            ttl = min(ttl, int(caller.claims["exp"]) - int(time.time()))
        decision = self.services.logins.take(caller.owner)
        if not decision.allowed:
            metrics.LOGIN_RATE_LIMITED.inc()
            raise TooManyRequestsError.rate_limited("logins", decision.retry_after)
        issued = self.services.auth.sessions.issue(
            caller.identity,
            caller.policy.name,
            dict(caller.claims),
            owner=caller.owner,
            method=caller.method,
            credential=caller.credential,
            ttl=ttl,
        )
        resp.media = SessionIssued(
            session_token=issued.token,
            identity=caller.identity,
            method=caller.method,
            expires_at=timestamp(datetime.datetime.fromtimestamp(issued.expires, datetime.UTC)),
        )
        req.context.session_id = issued.session_id  # the login's audit record names it

    @responds(status=204)
    def on_delete(self, req: falcon.Request, resp: falcon.Response) -> None:
        session = principal(req).session
        if session is None:
            raise BadRequestError("log out with the session token itself")
        self.services.auth.sessions.revoke(session)
