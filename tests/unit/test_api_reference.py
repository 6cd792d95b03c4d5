"""docs/api-reference.md is what the OpenAPI document of this version renders to."""

from __future__ import annotations

from pathlib import Path

from lessor.apiserver.routes.reference import render


def test_the_api_reference_is_generated_from_the_current_openapi_document() -> None:
    path = Path(__file__).resolve().parents[2] / "docs" / "api-reference.md"
    assert path.read_text() == render(), (
        "regenerate: python -m lessor.apiserver.routes.reference write docs/api-reference.md"
    )
