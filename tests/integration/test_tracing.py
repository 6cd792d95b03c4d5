"""Traces, read back from a real collector (Jaeger v2, built here: tracing_tools.py).

The real `lessor` CLI leases a cluster and releases it; the API server and the operator,
started with an OTLP endpoint, export their spans to Jaeger; the lease's trace, asked of
Jaeger's query API by the id `lessor -v` printed, holds the API's request span and the
operator's spans of the same lease as its children, and nothing in any span is a credential.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lessor.controlplane.kubectl import Cluster
from tests.integration.operator_harness import wait_for
from tests.integration.pool_stack import POOL, TOKEN, Stack, pool_stack
from tests.integration.tracing_tools import Jaeger, start_jaeger

pytestmark = pytest.mark.integration
TRACE_ID = re.compile(r"trace ([0-9a-f]{32})")


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    collector = start_jaeger(tmp_path_factory.mktemp("jaeger"))
    try:
        yield collector
    finally:
        collector.stop()


@pytest.fixture
def traced(control_plane: Cluster, tmp_path: Path, jaeger: Jaeger) -> Iterator[Stack]:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp_endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "200",  # spans leave within 0.2 s, not the default 5 s
    }
    with pool_stack(control_plane, tmp_path, env) as stack:
        yield stack


def lessor(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    assert stack.api is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LESSOR_", "OTEL_"))}
    env.pop("TRACEPARENT", None)
    env.update(
        HOME=str(stack.directory),
        XDG_CONFIG_HOME=str(stack.directory / ".config"),
        LESSOR_ENDPOINT=stack.api.base,
        LESSOR_TOKEN=TOKEN,
    )
    result = subprocess.run(
        [sys.executable, "-m", "lessor.cli.main", *args],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result


def spans_by_name(trace: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each span of the trace by its operation name, with its service's name added."""
    services = {key: process["serviceName"] for key, process in trace["processes"].items()}
    return {
        span["operationName"]: {**span, "service": services[span["processID"]]}
        for span in trace["spans"]
    }


def parent_of(span: dict[str, Any]) -> str | None:
    return next(
        (r["spanID"] for r in span.get("references", []) if r["refType"] == "CHILD_OF"), None
    )


WANTED = {"POST /v1/leases", "lease.bind", "cluster.teardown", "lease.end"}


def test_a_lease_and_its_release_are_one_trace_across_the_api_and_the_operator(
    traced: Stack, jaeger: Jaeger
) -> None:
    leased = lessor(traced, "-v", "lease", POOL, "-o", "json")
    lease = json.loads(leased.stdout)
    trace_ids = set(TRACE_ID.findall(leased.stderr))
    assert len(trace_ids) == 1, f"one trace id for the whole command: {leased.stderr}"
    (trace_id,) = trace_ids
    kubeconfig = Path(lease["kubeconfig"]).read_text()
    lessor(traced, "release", lease["id"])

    def complete() -> dict[str, Any] | None:
        trace = jaeger.trace(trace_id)
        return trace if trace and set(spans_by_name(trace)) >= WANTED else None

    trace = wait_for("the lease's spans in Jaeger", complete, timeout=180)
    spans = spans_by_name(trace)
    request = spans["POST /v1/leases"]
    assert request["service"] == "lessor-apiserver"
    assert parent_of(request) is not None, "a child of the CLI's traceparent"
    for name in WANTED - {"POST /v1/leases"}:
        assert spans[name]["service"] == "lessor-operator", name
        assert parent_of(spans[name]) == request["spanID"], f"{name} is the request's child"
    tags = {tag["key"]: tag["value"] for tag in spans["lease.bind"]["tags"]}
    assert tags["lessor.lease.name"] == lease["id"]
    assert tags["lessor.pool.name"] == POOL
    assert {tag["key"]: tag["value"] for tag in spans["lease.end"]["tags"]}[
        "lessor.lease.outcome"
    ] == "Released"
    if "lease.queue" in spans:  # no cluster was ready: the one it waited for started in it
        assert parent_of(spans["cluster.start"]) == request["spanID"]

    # No credential anywhere in the trace: not the token, not a line of the kubeconfig.
    everything = json.dumps(trace)
    secrets = [TOKEN] + [
        value
        for line in kubeconfig.splitlines()
        if (value := line.partition(":")[2].strip()) and len(value) >= 20
    ]
    assert len(secrets) > 2
    leaked = [secret[:12] for secret in secrets if secret in everything]
    assert not leaked, f"credentials in the trace: {leaked}"
