"""Answers are checked against the models the OpenAPI document is made of, and the document's
paths are the app's route table."""

from __future__ import annotations

import pytest

from lessor.apiserver.http.app import ROUTES, Route, api_document
from lessor.apiserver.http.openapi import document, lease
from lessor.apiserver.http.responses import Expiry, LeaseSummary, ResponseDriftError, conform


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
