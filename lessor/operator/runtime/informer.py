"""An informer: a reflector feeding a store, run as one task."""

from __future__ import annotations

import asyncio

from lessor.operator.runtime.client import KubeClient, ResourceType
from lessor.operator.runtime.reflector import Reflector
from lessor.operator.runtime.store import IndexFunc, Store


class Informer:
    def __init__(
        self,
        client: KubeClient,
        resource: ResourceType,
        *,
        namespace: str | None = None,
        indexers: dict[str, IndexFunc] | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        min_watch_timeout: float = 300.0,
    ) -> None:
        # Not waited for by readiness (Manager.ready): a kind the process can do without.
        self.optional = False
        self.resource = resource
        self.store = Store(indexers)
        self.reflector = Reflector(
            client,
            resource,
            self.store,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            min_watch_timeout=min_watch_timeout,
        )
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(
                self.reflector.run(), name=f"informer-{self.resource.plural}"
            )

    async def wait_synced(self, poll: float = 0.05) -> None:
        while not self.store.has_synced:
            if self._task is not None and self._task.done():
                self._task.result()
            await asyncio.sleep(poll)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
