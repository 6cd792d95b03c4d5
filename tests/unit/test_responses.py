"""Answers are checked against the models the OpenAPI document is made of, the document's
paths are the app's route table, and what each responder declares (its answer, its query, its
publicness) is said once: the responder is held to it and the document made from it."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from falcon import testing

from lessor.apiserver.http.conformance import ResponseDriftError, conform
from lessor.apiserver.http.errors import BadRequestError
from lessor.apiserver.http.queries import query_of
from lessor.apiserver.leases.resources import LeasesResource, LeaseWait
from lessor.apiserver.routes.app import ROUTES, api_document
from lessor.apiserver.routes.openapi import document, lease
from lessor.apiserver.routes.route import Route
from lessor.protocol.error_reasons import LESSOR_CODES, SPEC_REASONS
from lessor.protocol.responses import Expiry, LeaseCreated, LeaseSummary


def test_an_answer_the_model_describes_is_passed_on_unchanged() -> None:
    body = {"id": "l-1", "phase": "Bound", "profile": "p", "expires_at": None}
    assert conform(LeaseSummary, body) is body


def test_a_field_the_document_does_not_name_is_a_drift() -> None:
    with pytest.raises(ResponseDriftError, match="kubeconfig_path"):
        conform(Expiry, {"expires_at": "2026-01-01T00:00:00Z", "kubeconfig_path": "/x"})


def test_a_missing_or_mistyped_field_is_a_drift() -> None:
    with pytest.raises(ResponseDriftError):
        conform(Expiry, {})
    with pytest.raises(ResponseDriftError):
        conform(LeaseSummary, {"id": "l-1", "phase": 3, "profile": "p"})


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


def test_a_drift_names_the_field_but_never_its_value() -> None:
    secret = "token-that-must-not-be-logged"
    with pytest.raises(ResponseDriftError, match="phase") as caught:
        conform(LeaseSummary, {"id": "l-1", "phase": {"x": secret}, "profile": "p"})
    assert secret not in str(caught.value)


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
        answer.check(200, {})


def test_every_error_reason_is_in_the_document() -> None:
    error = api_document()["components"]["schemas"]["Error"]["properties"]
    (code, _) = error["code"]["anyOf"]
    (reason, _) = error["reason"]["anyOf"]
    assert set(code["enum"]) == SPEC_REASONS | LESSOR_CODES
    assert set(reason["enum"]) == SPEC_REASONS
