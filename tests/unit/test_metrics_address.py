"""Where the API server serves /metrics, and the spec's counter under lessor's name: the
spec's defaults, and the hardening a deployment turns on (lessor.apiserver.http.listeners)."""

from __future__ import annotations

import re

from falcon import testing

from lessor.apiserver.http import metrics
from lessor.apiserver.routes.app import create_app
from lessor.apiserver.routes.settings import Settings


def sample(text: str, name: str) -> float | None:
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else None


def test_metrics_are_at_the_apis_address_without_credentials_by_default() -> None:
    client = testing.TestClient(create_app(Settings()))
    answer = client.simulate_get("/metrics")  # no Authorization header
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    assert sample(answer.text, "lessor_sandbox_admission_rate_limited_total") is not None


def test_with_a_metrics_listener_the_apis_address_has_no_metrics() -> None:
    client = testing.TestClient(create_app(Settings(metrics_port=9090)))
    assert client.simulate_get("/metrics").status_code == 404


def test_the_spec_counter_and_its_deprecated_name_count_together() -> None:
    """Spec 6 names `svc_sandbox_admission_rate_limited_total`, svc standing for the product's
    name: lessor's is `lessor_...`; the literal name stays one release, always the same value."""
    client = testing.TestClient(create_app(Settings()))
    before = sample(
        client.simulate_get("/metrics").text, "lessor_sandbox_admission_rate_limited_total"
    )
    metrics.SANDBOX_ADMISSION_RATE_LIMITED.inc()
    text = client.simulate_get("/metrics").text
    now = sample(text, "lessor_sandbox_admission_rate_limited_total")
    assert before is not None and now == before + 1
    assert sample(text, "svc_sandbox_admission_rate_limited_total") == now
