"""What every controller's `setup` is given: the manager it joins, the API client, the settings,
and what the controllers of one process share (the event recorder, the caches, the backends,
the agent-sandbox compatibility verdict).

Each reconciler module declares its own watches in a `setup(context) -> Controller` beside its
reconciler, so that what requeues a key is read next to the code that handles it;
lessor.operator.main only lists the controllers.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, cast

from lessor.operator.backends.local import HostIdentity, LocalBackend
from lessor.operator.backends.registry import Backends
from lessor.operator.core.compatibility import CompatibilityCache
from lessor.operator.core.kinds import CACHED, resource_type
from lessor.operator.core.typed import T, Typed
from lessor.operator.runtime.client import KubeClient, ResourceType
from lessor.operator.runtime.controller import Controller, Reconcile
from lessor.operator.runtime.events import EventRecorder
from lessor.operator.runtime.informer import Informer
from lessor.operator.runtime.manager import Manager
from lessor.operator.runtime.store import IndexFunc
from lessor.operator.wiring.settings import Settings
from lessor.resources.base import Resource


@dataclass(frozen=True)
class Context:
    manager: Manager
    client: KubeClient
    settings: Settings
    events: EventRecorder

    def informer(
        self, resource: ResourceType, indexers: dict[str, IndexFunc] | None = None
    ) -> Informer:
        """The shared cache of `resource` in the operator's namespace, with (at least) the
        indexes the caller reads; of ClusterLeases, those not finished (kinds.CACHED)."""
        informer = self.manager.informer(
            self.client,
            resource,
            namespace=self.settings.namespace,
            field_selector=CACHED.get(resource),
        )
        for name, function in (indexers or {}).items():
            informer.store.add_indexer(name, function)
        return informer

    def cache(self, model: type[T], indexers: dict[str, IndexFunc] | None = None) -> Typed[T]:
        """The shared cache of lessor's kind `model` read as models (core.typed): one per kind
        in the process, so an object is validated once whichever controllers read it."""
        resource = resource_type(model)
        typed = self._typed.get(resource)
        if typed is None:
            typed = self._typed[resource] = Typed(self.informer(resource), model)
        for name, function in (indexers or {}).items():
            typed.informer.store.add_indexer(name, function)
        return cast("Typed[T]", typed)

    @functools.cached_property
    def _typed(self) -> dict[ResourceType, Typed[Any]]:
        return {}

    def controller(
        self, of: type[Resource[Any, Any]] | str, reconcile: Reconcile | None = None
    ) -> Controller:
        """A controller with the configured number of workers, added to the manager; what it
        reconciles (Controller.for_, or `reconcile` for a sweep) and its watches
        (Controller.watch) are the caller's to declare. Named after the kind it reconciles, in
        lower case, as controller-runtime names one (the `controller` label of the reconcile
        metrics); a sweep that reconciles no one kind gives its name."""
        name = of if isinstance(of, str) else of.kind_name().lower()
        controller = Controller(name, reconcile, workers=self.settings.workers)
        return self.manager.add_controller(controller)

    @functools.cached_property
    def local_backend(self) -> LocalBackend:
        """One for the instance reconciler, which starts `local` clusters, and the orphan
        collector, which stops those no instance owns: both must see the same directory, and
        the host is identified once."""
        return LocalBackend(HostIdentity(self.client), self.settings.local_backend_dir)

    @functools.cached_property
    def backends(self) -> Backends:
        """One for the instance reconciler, which makes and tears down clusters, and the lease
        reconciler, which issues each lease's credential on them."""
        return Backends(
            self.client,
            self.local_backend,
            self.settings.test_backends,
            self.settings.allow_privileged_backends,
        )

    @functools.cached_property
    def compatibility(self) -> CompatibilityCache:
        """One verdict for both sandbox controllers."""
        return CompatibilityCache(self.client)
