"""Answers are checked against the models the OpenAPI document is made of, the document's
paths are the app's route table, and what each responder declares (its answer, its query, its
body, its publicness) is said once: the responder is held to it and the document made from it."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import falcon
import pytest
from falcon import testing
from pydantic import ValidationError

from lessor.apiserver.http.answers import ResponseDriftError, responds
from lessor.apiserver.http.bodies import CreateLease, Login
from lessor.apiserver.http.errors import BadRequestError
from lessor.apiserver.http.observe import add_error_handlers
from lessor.apiserver.http.queries import query_of
from lessor.apiserver.leases.resources import LeasesResource, LeaseWait
from lessor.apiserver.routes.app import ROUTES, api_document
from lessor.apiserver.routes.openapi import document, lease
from lessor.apiserver.routes.route import Route
from lessor.protocol.error_reasons import LESSOR_CODES, SPEC_REASONS
from lessor.protocol.responses import Expiry, Lease, LeaseCreated, LeaseSummary

PENDING = LeaseSummary(id="l-1", phase="Pending", profile="p", expires_at=None)
SECRET = "token-that-must-not-be-logged"


class Answering:
    """A resource whose responders answer whatever the test puts in `media`."""

    def __init__(self, media: object) -> None:
        self.media = media

    @responds(LeaseSummary)
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.media

    @responds(LeaseSummary, many=True)
    def on_put(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.media

    @responds(status=204)
    def on_delete(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.media


def answered(method: str, media: object) -> testing.Result:
    app = falcon.App()
    app.add_route("/answer", Answering(media))
    add_error_handlers(app)
    return testing.TestClient(app).simulate_request(method, "/answer")


def test_an_answer_of_the_declared_model_is_its_json_by_the_one_rule() -> None:
    result = answered("GET", PENDING)
    assert result.status_code == 200
    # Set to None: null; never set (the alias): absent.
    assert result.json == {"id": "l-1", "phase": "Pending", "profile": "p", "expires_at": None}
    assert answered("PUT", [PENDING, PENDING]).json == [result.json, result.json]
    assert answered("PUT", []).json == []
    assert answered("DELETE", None).status_code == 204


@pytest.mark.parametrize(
    ("method", "media"),
    [
        # A subclass is another class: a Lease's kubeconfig must not ride in a summary.
        ("GET", Lease(id="l-1", phase="Bound", profile="p", kubeconfig=SECRET)),
        ("GET", Expiry(expires_at="2026-01-01T00:00:00Z")),
        # A dict is no model, whatever it holds: one with a key the document does not name...
        ("GET", {**PENDING.model_dump(), "kubeconfig_path": SECRET}),
        # ...and one the model would describe: every answer is serialized by the one rule.
        ("GET", {"id": "l-1", "phase": "Pending", "profile": "p"}),
        ("GET", [PENDING]),  # a list where one object is declared
        ("PUT", PENDING),  # one object where a list is declared
        ("PUT", [PENDING, Lease(id="l-2", phase="Bound", profile="p", kubeconfig=SECRET)]),
        ("PUT", [{"id": "l-1", "phase": "Pending", "profile": "p"}]),
        ("DELETE", PENDING),  # a body where none is declared
    ],
)
def test_an_answer_the_declaration_does_not_describe_is_a_500(
    method: str, media: Any, caplog: pytest.LogCaptureFixture
) -> None:
    result = answered(method, media)
    assert result.status_code == 500
    assert result.json == {"error": "internal error", "detail": "the failure was logged"}
    assert "ResponseDriftError" in caplog.text  # logged, as every 500
    assert SECRET not in result.text + caplog.text


def test_a_drift_names_the_class_answered_but_never_its_value() -> None:
    answer = Route("/v1/leases", LeasesResource, None).answer("get")
    with pytest.raises(ResponseDriftError, match="LeaseSummary expected: dict") as caught:
        answer.serialize(200, [{"id": "l-1", "kubeconfig": SECRET}])
    assert SECRET not in str(caught.value)


def test_a_missing_or_mistyped_field_fails_where_the_answer_is_made() -> None:
    with pytest.raises(ValidationError):
        Expiry.model_validate({})
    with pytest.raises(ValidationError):
        LeaseSummary.model_validate({"id": "l-1", "phase": "Running", "profile": "p"})
    summary = PENDING.model_copy()
    with pytest.raises(ValidationError):
        summary.phase = "Running"  # type: ignore[assignment]
    # A value that fails is never repeated: an answer may carry a kubeconfig or a token.
    with pytest.raises(ValidationError) as caught:
        Lease.model_validate(
            {"id": "l-1", "phase": "Bound", "profile": "p", "kubeconfig": [SECRET]}
        )
    assert SECRET not in str(caught.value)


def test_the_document_has_a_path_for_every_documented_route_and_no_other() -> None:
    paths = api_document()["paths"]
    assert list(paths) == [route.path for route in ROUTES if route.operations is not None]
    for route in ROUTES:
        if route.operations is not None:
            assert set(paths[route.path]) - {"description", "parameters"} == route.methods


def test_a_route_documenting_other_methods_than_it_answers_is_refused() -> None:
    pools = next(route for route in ROUTES if route.path == "/v1/pools")
    wrong = Route(pools.path, pools.resource, lease)  # documents get, delete and patch
    with pytest.raises(ValueError, match="/v1/pools"):
        document([wrong])


@pytest.mark.parametrize("value", ["31", "-1", "x", "1.5", "²", "١٢", "+5", " 5", "5_0", "1" * 17])
def test_a_query_integer_is_ascii_digits_within_its_bounds(value: str) -> None:
    req = testing.create_req(query_string=f"waitSeconds={quote(value)}")
    with pytest.raises(BadRequestError, match="waitSeconds must be an integer from 0 to 30"):
        query_of(req, LeaseWait)


def test_a_query_takes_its_defaults_and_ignores_what_it_does_not_name() -> None:
    assert query_of(testing.create_req(query_string="other=1"), LeaseWait).wait_seconds == 0
    req = testing.create_req(query_string="waitSeconds=0007")
    assert query_of(req, LeaseWait).wait_seconds == 7


def test_the_document_lists_a_responders_query_from_its_model() -> None:
    (parameter,) = api_document()["paths"]["/v1/leases/{lease_id}"]["get"]["parameters"]
    assert parameter["name"] == "waitSeconds" and parameter["required"] is False
    assert parameter["schema"] == {"type": "integer", "minimum": 0, "maximum": 30, "default": 0}


class LoggingIn:
    """A responder whose body may be left out, answering the TTL it was asked for."""

    @responds(Expiry)
    def on_post(self, req: falcon.Request, resp: falcon.Response, body: Login | None) -> None:
        resp.media = Expiry(expires_at=body.ttl if body and body.ttl else "default")


class ReadBody:
    """What the observing middleware does first: the request's bytes, read once."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.body = req.bounded_stream.read()


def logging_in(body: str | None) -> testing.Result:
    app = falcon.App(middleware=[ReadBody()])
    app.add_route("/login", LoggingIn())
    add_error_handlers(app)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    return testing.TestClient(app).simulate_post("/login", body=body, headers=headers)


def test_a_responder_is_handed_its_body_parsed_into_the_model_it_declares() -> None:
    assert logging_in('{"ttl": "2h"}').json == {"expires_at": "2h"}
    assert logging_in(None).json == {"expires_at": "default"}, "this body may be left out"
    refused = logging_in('{"ttl": "2h", "role": "admin"}')
    assert refused.status_code == 400 and refused.json["code"] == "invalid_request"
    assert "role" in refused.json["detail"]
    assert logging_in("[1]").status_code == 400


def test_a_body_not_typed_by_a_model_is_refused_where_it_is_declared() -> None:
    with pytest.raises(TypeError, match="pydantic model"):

        @responds(Expiry)
        def on_post(self: object, req: falcon.Request, resp: falcon.Response, body: dict) -> None:  # type: ignore[type-arg]
            pass


def test_the_document_takes_each_request_body_from_its_responder() -> None:
    paths = api_document()["paths"]
    create = paths["/v1/leases"]["post"]["requestBody"]
    assert create["required"] is True
    assert create["content"]["application/json"]["schema"]["$ref"].endswith(CreateLease.__name__)
    assert paths["/v1/login"]["post"]["requestBody"]["required"] is False


def test_a_route_is_public_as_its_resource_says_and_so_is_its_operation() -> None:
    paths = api_document()["paths"]
    for route in ROUTES:
        if route.operations is None:
            continue
        for method in route.methods:
            public = paths[route.path][method].get("security") == []
            assert public == (route.resource.authentication != "required"), route.path


def test_a_success_the_responder_did_not_declare_is_a_drift() -> None:
    answer = Route("/v1/leases", LeasesResource, None).answer("post")
    assert (answer.status, answer.body) == (202, LeaseCreated)
    with pytest.raises(ResponseDriftError, match="200"):
        answer.serialize(200, LeaseCreated.model_construct())


def test_every_error_reason_is_in_the_document() -> None:
    error = api_document()["components"]["schemas"]["Error"]["properties"]
    (code, _) = error["code"]["anyOf"]
    (reason, _) = error["reason"]["anyOf"]
    assert set(code["enum"]) == SPEC_REASONS | LESSOR_CODES
    assert set(reason["enum"]) == SPEC_REASONS
