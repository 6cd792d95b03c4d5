"""Leader election on a coordination.k8s.io Lease, with client-go's rules.

Only the leader reconciles; the others wait. A candidate takes the lease when it does not exist
(an atomic create) or when its holder has not renewed it for `lease_duration` (an update carrying
the resourceVersion it read, so of two candidates only one can win). The leader renews every
`retry_period`; if it cannot renew for `renew_deadline` it must assume another process has taken
over and stops leading. Because renew_deadline < lease_duration, a leader always stops acting
before anyone else may start.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable

from lessor.operator.runtime import metrics
from lessor.operator.runtime.client import ApiError, KubeClient, NotFoundError, ResourceType
from lessor.protocol.json_object import Json
from lessor.protocol.timestamps import micro_timestamp, utcnow

log = logging.getLogger(__name__)

COORDINATION_LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease")


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}_{secrets.token_hex(3)}"


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        *,
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        if not lease_duration > renew_deadline > 1.2 * retry_period:
            raise ValueError("need lease_duration > renew_deadline > 1.2 * retry_period")
        self.client = client
        self.path = COORDINATION_LEASES.path(namespace, name)
        self.collection = COORDINATION_LEASES.path(namespace)
        self.namespace, self.name = namespace, name
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.is_leader = False
        self._observed_at = 0.0
        self._observed: Json | None = None

    async def run(self, lead: Callable[[], asyncio.Task[None]]) -> None:
        """Acquire, start `lead()`, keep renewing; return when leadership is lost (the caller then
        exits) after cancelling the leading task."""
        await self._acquire()
        task = lead()
        try:
            await self._renew_until_lost()
        finally:
            self.is_leader = False
            metrics.LEADER.set(0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _acquire(self) -> None:
        while not await self._try_acquire_or_renew():
            await asyncio.sleep(self.retry_period)
        self.is_leader = True
        metrics.LEADER.set(1)
        log.info("leader election: %s became leader of %s", self.identity, self.name)

    async def _renew_until_lost(self) -> None:
        last_renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.retry_period)
            if await self._try_acquire_or_renew():
                last_renewed = time.monotonic()
            elif time.monotonic() - last_renewed >= self.renew_deadline:
                log.error("leader election: %s lost the lease %s", self.identity, self.name)
                return

    def _spec(self, acquire_time: str, transitions: int) -> Json:
        now = micro_timestamp(utcnow())
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": acquire_time or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def _try_acquire_or_renew(self) -> bool:
        try:
            current = await self.client.get(self.path)
        except NotFoundError:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec("", 0),
            }
            try:
                await self.client.create(self.collection, body)
            except ApiError:
                return False
            return True
        except ApiError as error:
            log.warning("leader election: reading %s failed: %s", self.name, error)
            return False
        spec = current.get("spec", {})
        holder = spec.get("holderIdentity") or ""
        if self._observed != spec:
            self._observed, self._observed_at = spec, time.monotonic()
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        expired = time.monotonic() - self._observed_at >= duration
        if holder and holder != self.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        acquire_time = spec.get("acquireTime", "") if holder == self.identity else ""
        if holder != self.identity:
            transitions += 1
        current["spec"] = self._spec(acquire_time, transitions)
        try:
            # The resourceVersion read above is in current["metadata"]: a concurrent writer wins.
            await self.client.replace(self.path, current)
        except ApiError:
            return False
        self._observed, self._observed_at = current["spec"], time.monotonic()
        return True

    async def release(self) -> None:
        """Give the lease up at once on a graceful shutdown, so a successor need not wait.

        Called once `run` has returned or was cancelled, so the leader's work has stopped; by
        then `is_leader` is already false, so whether to release is read from the lease itself:
        only a lease that still names this candidate is given up."""
        try:
            current = await self.client.get(self.path)
            if current.get("spec", {}).get("holderIdentity") != self.identity:
                return
            current["spec"]["holderIdentity"] = ""
            current["spec"]["leaseDurationSeconds"] = 1
            await self.client.replace(self.path, current)
        except ApiError as error:
            log.warning("leader election: release of %s failed: %s", self.name, error)
        self.is_leader = False
        metrics.LEADER.set(0)
