"""A row of the route table (lessor.apiserver.routes.app.ROUTES): one path and its resource.

What each responder answers, the query it reads, and whether the path needs a caller are the
resource's, each stated once there (`@responds`, a `query` parameter, `authentication`); the
route reads them off it, for the OpenAPI document (lessor.apiserver.routes.openapi).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lessor.apiserver.http.answers import Answer, answer_of
from lessor.apiserver.http.resource import Resource
from lessor.protocol.json_object import Json

RESPONDERS = ("get", "post", "put", "patch", "delete")


@dataclass(frozen=True)
class Route:
    """One path: the resource that answers it, and its OpenAPI operations (None: a path the
    document leaves out, as it describes the API, not the service's plumbing)."""

    path: str
    resource: type[Resource[Any]]
    operations: Callable[[Route], Json] | None
    sandbox: bool = False  # served only with `agentSandbox.mode: external` (sandboxes.gate)
    # Served only where /metrics has no listener of its own (Settings.metrics_port).
    api_metrics: bool = False

    @property
    def methods(self) -> frozenset[str]:
        """The methods the resource answers, as the document names them."""
        return frozenset(m for m in RESPONDERS if hasattr(self.resource, f"on_{m}"))

    def answer(self, method: str) -> Answer:
        """What the responder of `method` declared it answers; ValueError where it declared
        nothing, or there is no such responder: the document cannot describe it."""
        found = answer_of(getattr(self.resource, f"on_{method}", None))
        if found is None:
            raise ValueError(f"{self.path}: {method} has no responder that declares its answer")
        return found

    @property
    def public(self) -> bool:
        """Whether a caller without credentials is served (the resource's `authentication`)."""
        return self.resource.authentication != "required"
