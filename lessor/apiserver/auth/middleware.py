"""Authentication as middleware, not each responder's: every route requires a principal unless
its resource declares otherwise (`authentication = "none"` or `"optional"`), so a responder
cannot forget it and a new route is private until someone says it is public.

The middleware puts the caller in `req.context.principal`; `principal(req)` is how a responder
reads it back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import falcon

from lessor.apiserver.auth.authenticator import Authenticator, Principal
from lessor.apiserver.http.resource import Authentication, Resource


def _target(req: falcon.Request) -> str:
    return req.path + (f"?{req.query_string}" if req.query_string else "")


class Authenticate:
    """Authenticates the caller before any responder of a route that requires it runs, and puts
    the principal in `req.context.principal` (None where the route lets the caller be unknown).

    A request for which no responder exists (no such path, a method the resource does not
    answer, Falcon's own OPTIONS) is left to Falcon's 404 or 405 as before, unauthenticated: it
    reaches no service, and the answer says nothing about any object."""

    def __init__(self, authenticator: Callable[[], Authenticator]) -> None:
        self.authenticator = authenticator  # built on first use, in the worker

    def process_resource(
        self,
        req: falcon.Request,
        resp: falcon.Response,
        resource: object,
        params: dict[str, Any],
    ) -> None:
        req.context.principal = None
        if resource is None or not hasattr(resource, f"on_{req.method.lower()}"):
            return
        if isinstance(resource, Resource):
            resource.gate()  # before credentials: a path that does not exist is a 404
        needs: Authentication = getattr(resource, "authentication", "required")
        header = req.get_header("Authorization")
        if needs == "none" or (needs == "optional" and not header):
            return
        req.context.principal = self.authenticator().authenticate(
            req.method, _target(req), header, req.context.body
        )
        if req.context.principal.session is not None:  # audit: which session to revoke
            req.context.session_id = req.context.principal.session.session_id


def principal(req: falcon.Request) -> Principal:
    """The caller `Authenticate` established before the responder ran."""
    found: Principal = req.context.principal
    return found
