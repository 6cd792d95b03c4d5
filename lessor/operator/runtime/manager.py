"""The manager: informers, controllers, leader election, health and metrics, and shutdown.

Caches start at once on every replica, so a standby that wins the election starts reconciling
from warm caches; controllers run only on the leader. SIGTERM or SIGINT drains: queues stop
handing out keys, in-flight reconciles finish, informers stop, and the lease is released so a
successor takes over immediately. Losing the lease ends the process with a non-zero code, so
the orchestrator restarts it as a fresh candidate rather than letting two leaders overlap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from lessor.operator.runtime import metrics
from lessor.operator.runtime.client import KubeClient, ResourceType
from lessor.operator.runtime.controller import Controller
from lessor.operator.runtime.informer import Informer
from lessor.operator.runtime.leaderelection import LeaderElector
from lessor.operator.runtime.probes import ProbeServer

log = logging.getLogger(__name__)

LOST_LEADERSHIP_EXIT_CODE = 3


class Manager:
    def __init__(
        self,
        *,
        elector: LeaderElector | None,
        http_host: str = "127.0.0.1",
        http_port: int = 8080,
    ) -> None:
        self.elector = elector
        self.http_host, self.http_port = http_host, http_port
        self.informers: list[Informer] = []
        self._shared: dict[tuple[ResourceType, str | None, str | None, str | None], Informer] = {}
        self.controllers: list[Controller] = []
        self._stopping = asyncio.Event()

    def add_informer(self, informer: Informer) -> Informer:
        self.informers.append(informer)
        return informer

    def informer(
        self,
        client: KubeClient,
        resource: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Informer:
        """The one informer of `resource` in `namespace` (of the objects the selectors
        select), made on first use: controllers that read or watch the same kind share one
        cache and one watch (controller-runtime's shared cache). Indexes are added to its
        store by whoever reads them (Store.add_indexer)."""
        key = (resource, namespace, label_selector, field_selector)
        if key not in self._shared:
            self._shared[key] = self.add_informer(
                Informer(
                    client,
                    resource,
                    namespace=namespace,
                    label_selector=label_selector,
                    field_selector=field_selector,
                )
            )
        return self._shared[key]

    def add_controller(self, controller: Controller) -> Controller:
        self.controllers.append(controller)
        return controller

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> int:
        """Run until a signal (exit code 0) or the loss of leadership (non-zero)."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, self.stop)
        probes = ProbeServer(lambda: self.ready)
        await probes.start(self.http_host, self.http_port)
        for informer in self.informers:
            informer.start()
        lead = asyncio.create_task(self._lead_forever(), name="leader")
        stopping = asyncio.create_task(self._stopping.wait(), name="stopping")
        try:
            done, _ = await asyncio.wait({lead, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if lead in done:
                lead.result()
                return LOST_LEADERSHIP_EXIT_CODE
            log.info("manager: stopping, draining work queues")
            lead.cancel()
            await asyncio.gather(lead, return_exceptions=True)
            if self.elector is not None:
                await self.elector.release()
            return 0
        finally:
            stopping.cancel()
            for informer in self.informers:
                await informer.stop()
            await probes.stop()

    async def _lead_forever(self) -> None:
        def start_controllers() -> asyncio.Task[None]:
            async def run_all() -> None:
                await asyncio.gather(*(c.run() for c in self.controllers))

            return asyncio.create_task(run_all(), name="controllers")

        if self.elector is None:
            metrics.LEADER.set(1)  # the only replica leads: `lessor_leader` says so for alerts
            await start_controllers()
            return
        await self.elector.run(start_controllers)

    @property
    def leading(self) -> bool:
        """Whether this replica's controllers run now (always, without leader election)."""
        return self.elector is None or self.elector.is_leader

    @property
    def ready(self) -> bool:
        """Every cache synced, but those of kinds the process can do without (`optional`): a
        kind this version added, not yet installed or granted by an upgrade that kept the old
        CRDs or Role, must not keep every other controller's pod out of service."""
        return all(
            informer.store.has_synced for informer in self.informers if not informer.optional
        )
