"""A controller: informers that feed a work queue, and workers that reconcile its keys.

Workers start only once every informer the controller reads has synced, so no reconcile ever
acts on a partial picture (an empty cache would look like "no instances, create some").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from lessor.operator.runtime import metrics
from lessor.operator.runtime.client import ConflictError
from lessor.operator.runtime.informer import Informer
from lessor.operator.runtime.store import Handler, key_of
from lessor.operator.runtime.workqueue import WorkQueue
from lessor.protocol.json_object import Json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Result:
    """What a reconcile asks for next: nothing, or another look after `requeue_after` seconds."""

    requeue_after: float | None = None


Reconcile = Callable[[str], Awaitable[Result]]
MapFunc = Callable[[Json], Iterable[str]]
UpdatePredicate = Callable[[Json, Json], bool]
ObjectT_co = TypeVar("ObjectT_co", covariant=True)
ObjectT = TypeVar("ObjectT")


class ObjectSource(Protocol[ObjectT_co]):
    """A cache a controller reconciles the objects of, read as the reconciler wants them (the
    operator's typed caches give a model with its raw object)."""

    @property
    def informer(self) -> Informer: ...

    def get(self, key: str) -> ObjectT_co | None: ...


def spec_changed(old: Json, new: Json) -> bool:
    """Whether an update changed more than the object's status: its generation (spec) or its
    deletion. controller-runtime's GenerationChangedPredicate, plus deletion."""
    before, after = old["metadata"], new["metadata"]
    return any(
        before.get(field) != after.get(field) for field in ("generation", "deletionTimestamp")
    )


class Controller:
    """A controller may be made before what it reconciles with, so that a reconciler can be
    handed its controller's `enqueue`; `for_` then says what it reconciles. A sweep of no one
    kind passes its `reconcile` to the constructor instead."""

    def __init__(
        self,
        name: str,
        reconcile: Reconcile | None = None,
        informers: Sequence[Informer] = (),
        workers: int = 2,
    ) -> None:
        self.name = name
        self.reconcile: Reconcile = reconcile or self._unset
        self.informers = list(informers)
        self.workers = workers
        self.queue = WorkQueue(name)
        # Each controller's series exist from the start, at zero: rate() of a counter that
        # appears with its first error misses that error, and alerts need the series to exist.
        metrics.RECONCILE_ERRORS.labels(name)
        for result in ("success", "requeue", "conflict", "error"):
            metrics.RECONCILE_TOTAL.labels(name, result)

    def enqueue(self, key: str) -> None:
        self.queue.add(key)

    def for_(
        self,
        source: ObjectSource[ObjectT],
        reconcile: Callable[[str, ObjectT | None], Awaitable[Result]],
    ) -> Controller:
        """Reconcile the objects of `source`: each change of one enqueues its key, and the
        reconcile is handed the object as `source` reads it, or None once it is gone.
        controller-runtime's `For`, with a typed reconciler that gets its decoded object."""

        async def reconcile_key(key: str) -> Result:
            return await reconcile(key, source.get(key))

        self.reconcile = reconcile_key
        return self.watch(source.informer)

    async def _unset(self, key: str) -> Result:
        raise RuntimeError(f"controller {self.name} was never told how to reconcile")

    def watch(
        self,
        informer: Informer,
        keys: MapFunc | None = None,
        *,
        settle: float = 0.0,
        when: UpdatePredicate | None = None,
    ) -> Controller:
        """Reconcile the keys `keys` maps each added, changed or deleted object of `informer` to
        (by default the object's own key), and wait for that informer's cache before working:
        controller-runtime's `For`/`Owns`/`Watches` with a map function. A change passes its new
        version, a deletion the last one known. `settle`: reconcile a key at most once per that
        many seconds for this informer's changes, so that a burst of them (a pool's instances
        as 200 leases bind) costs one pass, not one per change. `when(old, new)`: a change is
        mapped only when it holds (controller-runtime's update predicate), for a watch whose
        keys depend on part of the object only."""
        to_keys: MapFunc = keys or (lambda obj: [key_of(obj)])

        def enqueue_all(obj: Json) -> None:
            for key in to_keys(obj):
                self.queue.add_after(key, settle)

        def on_update(old: Json, new: Json) -> None:
            if when is None or when(old, new):
                enqueue_all(new)

        informer.store.add_handler(
            Handler(on_add=enqueue_all, on_update=on_update, on_delete=enqueue_all)
        )
        if informer not in self.informers:
            self.informers.append(informer)
        return self

    async def run(self) -> None:
        """Wait for the caches, then work until cancelled; on cancel, finish in-flight keys."""
        await asyncio.gather(*(informer.wait_synced() for informer in self.informers))
        log.info("controller %s: caches synced, starting %d workers", self.name, self.workers)
        tasks = [
            asyncio.create_task(self._work(), name=f"{self.name}-worker-{n}")
            for n in range(self.workers)
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            await self.queue.shutdown_with_drain()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _work(self) -> None:
        while (key := await self.queue.get()) is not None:
            try:
                await self._process(key)
            finally:
                self.queue.done(key)

    async def _process(self, key: str) -> None:
        started = time.monotonic()
        try:
            result = await self.reconcile(key)
        except ConflictError as conflict:
            # Someone changed the object since we read it: read again and redo, not an error.
            log.debug("controller %s: %s conflicted (%s), requeueing", self.name, key, conflict)
            metrics.RECONCILE_TOTAL.labels(self.name, "conflict").inc()
            self.queue.add_rate_limited(key)
            return
        except Exception:
            log.exception("controller %s: reconcile of %s failed", self.name, key)
            metrics.RECONCILE_ERRORS.labels(self.name).inc()
            metrics.RECONCILE_TOTAL.labels(self.name, "error").inc()
            self.queue.add_rate_limited(key)
            return
        finally:
            metrics.RECONCILE_DURATION.labels(self.name).observe(time.monotonic() - started)
        self.queue.forget(key)
        if result.requeue_after is not None:
            metrics.RECONCILE_TOTAL.labels(self.name, "requeue").inc()
            self.queue.add_after(key, result.requeue_after)
        else:
            metrics.RECONCILE_TOTAL.labels(self.name, "success").inc()
