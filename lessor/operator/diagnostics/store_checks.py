"""Whether a pool's diagnostics bucket can take bundles, checked ahead of need.

A bundle is captured once, when a lease ends: finding out then that the Secret is missing or
the bucket misspelt loses it. So the pool reconciler reports the condition DiagnosticsReady:
its credentials Secret read, and a HeadBucket with them, run as a task of its own (a store that
does not answer costs a timeout there, never a pool reconcile's time) every `RECHECK` seconds,
or `RETRY` while it fails, and at once when the pool's settings change.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from lessor.bucket import BucketError
from lessor.operator.diagnostics.captures import bucket_for
from lessor.operator.runtime.client import ApiError, KubeClient
from lessor.resources.cluster import Diagnostics

RECHECK = 300.0
RETRY = 30.0


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str
    message: str
    settings: str  # what was checked (the settings as JSON)
    at: float  # time.monotonic()

    @property
    def stale_after(self) -> float:
        return self.at + (RECHECK if self.ok else RETRY)


class StoreChecks:
    def __init__(self, client: KubeClient, enqueue: Callable[[str], None]) -> None:
        self.client = client
        self._enqueue = enqueue
        self._verdicts: dict[str, Verdict] = {}
        self._running: dict[str, asyncio.Task[None]] = {}

    def verdict(self, pool_key: str, namespace: str, settings: Diagnostics) -> Verdict | None:
        """The last verdict on these settings (None before the first); a check is started
        when there is none or it is stale, and the pool is requeued when it ends."""
        fingerprint = settings.model_dump_json()
        found = self._verdicts.get(pool_key)
        if found is not None and found.settings != fingerprint:
            found = None
        stale = found is None or time.monotonic() >= found.stale_after
        if stale and pool_key not in self._running:
            task = asyncio.create_task(self._check(pool_key, namespace, settings, fingerprint))
            self._running[pool_key] = task
            task.add_done_callback(lambda _: self._done(pool_key))
        return found

    def forget(self, pool_key: str) -> None:
        self._verdicts.pop(pool_key, None)

    def _done(self, pool_key: str) -> None:
        self._running.pop(pool_key, None)
        self._enqueue(pool_key)

    async def _check(
        self, pool_key: str, namespace: str, settings: Diagnostics, fingerprint: str
    ) -> None:
        where = f"s3://{settings.bucket}/{settings.prefix}"
        try:
            bucket = await bucket_for(self.client, namespace, settings)
            await asyncio.to_thread(bucket.check)
            verdict = (True, "BucketReachable", f"bundles are stored in {where}")
        except BucketError as error:
            verdict = (False, error.reason, f"bundles cannot be stored in {where}: {error.message}")
        except ApiError as error:
            verdict = (False, "CredentialsInvalid", f"the credentials Secret: {error}")
        self._verdicts[pool_key] = Verdict(*verdict, fingerprint, time.monotonic())
