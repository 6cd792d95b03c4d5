"""The AccessPolicies of the service namespace, kept as an atomic in-memory snapshot.

The policies are watched (lessor.apiserver.state.watched); every change replaces the whole
snapshot at once, so a request always sees one consistent set of policies, and an invalid policy
is skipped with a log line instead of breaking the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pydantic import ValidationError

from lessor.apiserver.http.errors import UnavailableError
from lessor.apiserver.state.kube import Kube
from lessor.apiserver.state.watched import WatchedObjects
from lessor.protocol.json_object import Json
from lessor.protocol.validation_errors import describe
from lessor.resources.access_policy import AccessPolicy, AccessPolicySpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NamedPolicy:
    name: str
    spec: AccessPolicySpec


class PolicyStore:
    def __init__(self, kube_factory: Callable[[], Kube]) -> None:
        self._snapshot: tuple[NamedPolicy, ...] = ()
        self._watched = WatchedObjects(kube_factory, AccessPolicy.crd.plural, self._publish)

    @property
    def snapshot(self) -> tuple[NamedPolicy, ...]:
        """The policies; until they were read once, a 503 (kube-apiserver unreachable since
        this worker started): no policy is not the same as unknown policies, and a 401 would
        tell a caller its valid credential is wrong."""
        if not self._watched.synced(timeout=10):
            raise UnavailableError("the access policies could not be read yet; retry")
        return self._snapshot

    def ready(self, timeout: float = 0.0) -> bool:
        """Whether the policies are read and kept current now (the watch listed, and has not
        failed since), waiting up to `timeout` for the first list: /readyz."""
        return self._watched.synced(timeout=timeout)

    def named(self, name: str) -> NamedPolicy | None:
        """The AccessPolicy of that name as it is now (a session outlives its authentication)."""
        return next((policy for policy in self.snapshot if policy.name == name), None)

    def _publish(self, objects: Mapping[str, Json]) -> None:
        parsed = []
        for name in sorted(objects):
            try:
                policy = AccessPolicy.model_validate(objects[name])
            except ValidationError as error:
                # Its own status says so too (lessor.operator.tenancy.access_policies).
                log.warning("access policy %s is invalid and ignored: %s", name, describe(error))
                continue
            parsed.append(NamedPolicy(name=name, spec=policy.spec))
        self._snapshot = tuple(parsed)
