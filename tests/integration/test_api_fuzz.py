"""Every operation of /openapi.json fuzzed with schemathesis, with and without credentials: no
generated request makes the server answer 5xx, and every error has the service's shape.

The operations are driven through hypothesis directly (schemathesis's pytest plugin does not
load under pytest 9)."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from tests.integration.test_apiserver import ALICE, Stack, stack  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration


def test_no_generated_request_makes_the_server_fail(stack: Stack) -> None:  # noqa: F811
    schema = schemathesis.openapi.from_url(f"{stack.api.base}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12
    failures: list[str] = []
    for operation in operations:

        @settings(
            max_examples=20, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(case=operation.as_strategy())
        def exercise(case: Any) -> None:
            for headers in ({"Authorization": f"Bearer {ALICE}"}, {}):
                response = case.call(base_url=stack.api.base, headers=headers)
                if response.status_code >= 500:
                    failures.append(f"{case.method} {case.formatted_path}: {response.status_code}")
                elif response.status_code >= 400 and "error" not in (response.json() or {}):
                    failures.append(f"{case.method} {case.formatted_path}: {response.text}")

        exercise()
    assert failures == []
