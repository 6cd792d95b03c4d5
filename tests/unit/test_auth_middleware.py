"""The authentication middleware knows no particular resource: a resource's `gate()` refuses a
request before any credential is looked at (a path this deployment does not serve is a 404,
never a 401), and its `authentication` says whether a caller is needed at all."""

from __future__ import annotations

from typing import Any, NoReturn

import falcon
from falcon import testing

from lessor.apiserver.auth.middleware import Authenticate
from lessor.apiserver.http.errors import HttpNotFoundError, UnauthorizedError
from lessor.apiserver.http.observe import add_error_handlers
from lessor.apiserver.http.resource import Resource


class Refusing:
    """An authenticator that refuses every credential, and counts the times it was asked."""

    def __init__(self) -> None:
        self.asked = 0

    def authenticate(self, *_args: Any) -> NoReturn:
        self.asked += 1
        raise UnauthorizedError("no", reason="unauthenticated")


class Private(Resource[None]):
    def on_get(self, _req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {}


class Public(Private):
    authentication = "none"


class Gated(Private):
    def gate(self) -> None:
        raise HttpNotFoundError("not served here")


def client(refusing: Refusing) -> testing.TestClient:
    app = falcon.App(middleware=[Body(), Authenticate(lambda: refusing)])
    for path, resource in (("/private", Private), ("/public", Public), ("/gated", Gated)):
        app.add_route(path, resource(None))
    add_error_handlers(app)
    return testing.TestClient(app)


class Body:
    """What lessor.apiserver.http.observe.Observe does first: the body, read once."""

    def process_request(self, req: falcon.Request, _resp: falcon.Response) -> None:
        req.context.body = req.bounded_stream.read()


def test_a_gate_refuses_before_credentials_are_looked_at() -> None:
    refusing = Refusing()
    answer = client(refusing).simulate_get("/gated", headers={"Authorization": "Bearer x"})
    assert (answer.status_code, refusing.asked) == (404, 0)


def test_a_private_route_asks_and_a_public_one_does_not() -> None:
    refusing = Refusing()
    assert client(refusing).simulate_get("/private").status_code == 401
    assert client(refusing).simulate_get("/public").status_code == 200
    assert refusing.asked == 1
