"""The AccessPolicies of the service namespace, kept as an atomic in-memory snapshot.

A background thread lists and then watches AccessPolicies; every change replaces the whole
snapshot at once, so a request always sees one consistent set of policies. The thread survives
API server restarts and watch errors (it relists after a backoff), and an invalid policy is
skipped with a log line instead of breaking the others.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import watch
from pydantic import ValidationError

from lessor.apiserver.state.kube import Kube
from lessor.protocol.backoff import Backoff
from lessor.resources.access_policy import AccessPolicy, AccessPolicySpec
from lessor.resources.base import GROUP, VERSION

log = logging.getLogger(__name__)
# After a failed list or watch: 0.25-0.5 s, doubling up to 15-30 s; reset by a good watch.
RELIST_BACKOFF = Backoff(first=0.5, cap=30.0, jitter=0.5)


@dataclass(frozen=True)
class NamedPolicy:
    name: str
    spec: AccessPolicySpec


class PolicyStore:
    def __init__(self, kube_factory: Callable[[], Kube]) -> None:
        self._kube_factory = kube_factory
        self._snapshot: tuple[NamedPolicy, ...] = ()
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def snapshot(self) -> tuple[NamedPolicy, ...]:
        self.start()
        self._synced.wait(timeout=10)
        return self._snapshot

    def named(self, name: str) -> NamedPolicy | None:
        """The AccessPolicy of that name as it is now (a session outlives its authentication)."""
        return next((policy for policy in self.snapshot if policy.name == name), None)

    def start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="policies", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        failures = 0
        while True:
            try:
                self._list_and_watch()
                failures = 0
            except Exception as error:
                delay = RELIST_BACKOFF.delay(failures)
                log.warning("access policies: %s; relisting in %.1fs", error, delay)
                time.sleep(delay)
                failures += 1

    def _list_and_watch(self) -> None:
        kube = self._kube_factory()
        listed: dict[str, Any] = kube.custom.list_namespaced_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, kube.namespace, AccessPolicy.crd.plural, _request_timeout=10
        )
        objects = {item["metadata"]["name"]: item for item in listed.get("items", [])}
        self._publish(objects)
        version = listed["metadata"]["resourceVersion"]
        stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
            kube.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            kube.namespace,
            AccessPolicy.crd.plural,
            resource_version=version,
            timeout_seconds=random.randint(300, 600),  # noqa: S311 - spread reconnections
            _request_timeout=660,
        )
        for event in stream:
            obj = event["object"]
            name = obj["metadata"]["name"]
            if event["type"] == "DELETED":
                objects.pop(name, None)
            elif event["type"] in ("ADDED", "MODIFIED"):
                objects[name] = obj
            elif event["type"] == "ERROR":
                raise RuntimeError(f"watch error: {obj.get('message')}")
            self._publish(objects)

    def _publish(self, objects: dict[str, dict[str, object]]) -> None:
        parsed = []
        for name in sorted(objects):
            try:
                policy = AccessPolicy.model_validate(objects[name])
            except ValidationError as error:
                log.warning("access policy %s is invalid and ignored: %s", name, error)
                continue
            parsed.append(NamedPolicy(name=name, spec=policy.spec))
        self._snapshot = tuple(parsed)
        self._synced.set()
