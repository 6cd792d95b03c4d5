"""The base of every Falcon resource of the API, whatever feature it belongs to.

A resource is handed the process's services (lessor.apiserver.routes.services) and types them by
a protocol of its own feature, naming only what it uses: so a feature's resources sit beside
the feature, below the route table that builds the services, and no package imports the one
above it.
"""

from __future__ import annotations

from typing import ClassVar, Generic, Literal, TypeVar

ServicesT = TypeVar("ServicesT")

# Who may call a resource's responders (lessor.apiserver.auth.middleware): an authenticated
# caller; anyone, authenticated if it sends credentials; anyone, credentials never looked at.
Authentication = Literal["required", "optional", "none"]


class Resource(Generic[ServicesT]):
    """A resource. Its responders need an authenticated caller unless the class says otherwise:
    `"optional"` authenticates a request that sends credentials and lets others through with no
    principal; `"none"` never looks at credentials (liveness, readiness, metrics, the API's
    document)."""

    authentication: ClassVar[Authentication] = "required"

    def __init__(self, services: ServicesT) -> None:
        self.services = services

    def gate(self) -> None:
        """Refuses a request before any credential is looked at, by raising an HttpError: for a
        path that does not exist in this deployment, a 404 must come before a 401. Nothing by
        default; the authentication middleware calls it, knowing no particular resource."""
