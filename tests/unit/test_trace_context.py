"""The trace context at both ends: what the CLI sends, and what the servers accept from a
header or a lease's annotation (a tenant's bytes: only the exact W3C format is taken)."""

from __future__ import annotations

import re

import pytest
from opentelemetry import trace

from lessor import tracing
from lessor.cli.trace_context import TRACEPARENT_ENV, TraceContext

W3C = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-01$")
INHERITED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_the_cli_sends_one_trace_per_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TRACEPARENT_ENV, raising=False)
    first, second = TraceContext(), TraceContext()
    assert W3C.match(first.traceparent)
    assert first.traceparent == first.traceparent, "every request of a command: one trace"
    assert first.trace_id != second.trace_id, "two commands: two traces"
    assert first.trace_id in first.traceparent


@pytest.mark.parametrize(
    ("inherited", "joined"),
    [
        (INHERITED, True),
        (INHERITED.replace("-01", "-00"), True),  # the job's sampling decision is kept
        ("00-" + "0" * 32 + "-00f067aa0ba902b7-01", False),  # an all-zero trace id is invalid
        ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", False),  # unknown version
        ("garbage", False),
    ],
)
def test_a_job_that_traces_hands_its_context_down(
    monkeypatch: pytest.MonkeyPatch, inherited: str, joined: bool
) -> None:
    monkeypatch.setenv(TRACEPARENT_ENV, inherited)
    sent = TraceContext().traceparent
    assert (sent == inherited) is joined
    assert re.match(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$", sent)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "not a traceparent",
        INHERITED + "-extra",
        INHERITED + " " * 100,  # oversized: not parsed at all
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",
    ],
)
def test_a_malformed_context_is_no_parent(value: str) -> None:
    assert tracing.context_of({tracing.TRACEPARENT: value}) is None
    assert tracing.context_of({tracing.ANNOTATION: value}) is None


def test_a_well_formed_context_is_the_parent() -> None:
    found = tracing.context_of({tracing.ANNOTATION: INHERITED})
    assert found is not None
    parent = trace.get_current_span(found).get_span_context()
    assert f"{parent.trace_id:032x}" == INHERITED.split("-")[1]


def test_without_an_endpoint_nothing_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in tracing.ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert tracing.configure("lessor-test") is False
    assert not tracing.enabled()
    assert tracing.carried() == {}, "no annotation is written on a lease"
