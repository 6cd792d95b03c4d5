"""A rate-limited work queue of keys with client-go's guarantees.

- A key waiting in the queue is there once, however often it was added (the dirty set).
- A key is never handed to two workers at once (the processing set); a key added while it is
  being processed is queued again when that processing is done, so no change is missed.
- Failures back off per key exponentially (5 ms doubling to 1000 s), and a global token bucket
  (10 per second, burst 100) keeps a storm of failures from hammering the API server; the
  delay used is the larger of the two.
- Delayed adds keep only the earliest deadline per key.
- Shutdown stops handing out keys; a drained shutdown also waits for those being processed.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from lessor.operator.runtime import metrics


class ExponentialFailureLimiter:
    def __init__(self, base: float = 0.005, cap: float = 1000.0) -> None:
        self.base, self.cap = base, cap
        self._failures: dict[str, int] = {}

    def when(self, key: str) -> float:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        return float(min(self.cap, self.base * 2**failures))

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)


class TokenBucketLimiter:
    """`clock` is replaceable, as client-go's limiters take a clock, so that a test decides what
    time it is rather than hoping for how much passes."""

    def __init__(
        self, rate: float = 10.0, burst: int = 100, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self._tokens = float(burst)
        self._last = clock()

    def when(self, _key: str) -> float:
        """Reserve a token and return how long until it is available."""
        now = self.clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate


class RateLimiter:
    """The larger of per-key exponential backoff and the global token bucket."""

    def __init__(
        self,
        per_key: ExponentialFailureLimiter | None = None,
        overall: TokenBucketLimiter | None = None,
    ) -> None:
        self.per_key = per_key or ExponentialFailureLimiter()
        self.overall = overall or TokenBucketLimiter()

    def when(self, key: str) -> float:
        return max(self.per_key.when(key), self.overall.when(key))

    def forget(self, key: str) -> None:
        self.per_key.forget(key)


class WorkQueue:
    def __init__(self, name: str, limiter: RateLimiter | None = None) -> None:
        self.name = name
        self.limiter = limiter or RateLimiter()
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._added_at: dict[str, float] = {}
        self._delayed: dict[str, tuple[float, asyncio.TimerHandle]] = {}
        self._wakeup = asyncio.Event()
        self._shutting_down = False

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def idle(self) -> bool:
        """Nothing waiting, delayed or in a worker: every key handed to the queue so far is done,
        and nothing will come out of it until something new is added."""
        return not (self._queue or self._delayed or self._processing)

    def add(self, key: str) -> None:
        if self._shutting_down or key in self._dirty:
            return
        metrics.QUEUE_ADDS.labels(self.name).inc()
        self._dirty.add(key)
        if key in self._processing:
            return
        self._queue.append(key)
        self._added_at[key] = time.monotonic()
        metrics.QUEUE_DEPTH.labels(self.name).set(len(self._queue))
        self._notify()

    def add_after(self, key: str, delay: float) -> None:
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        deadline = time.monotonic() + delay
        existing = self._delayed.get(key)
        if existing is not None:
            if existing[0] <= deadline:
                return
            existing[1].cancel()
        handle = asyncio.get_running_loop().call_later(delay, self._fire, key)
        self._delayed[key] = (deadline, handle)

    def _fire(self, key: str) -> None:
        self._delayed.pop(key, None)
        self.add(key)

    def add_rate_limited(self, key: str) -> None:
        metrics.QUEUE_RETRIES.labels(self.name).inc()
        self.add_after(key, self.limiter.when(key))

    def forget(self, key: str) -> None:
        self.limiter.forget(key)

    async def get(self) -> str | None:
        """The next key to process, or None once the queue is shut down."""
        while not self._queue and not self._shutting_down:
            self._wakeup.clear()
            await self._wakeup.wait()
        if not self._queue:
            return None
        key = self._queue.popleft()
        self._dirty.discard(key)
        self._processing.add(key)
        added = self._added_at.pop(key, None)
        if added is not None:
            metrics.QUEUE_LATENCY.labels(self.name).observe(time.monotonic() - added)
        metrics.QUEUE_DEPTH.labels(self.name).set(len(self._queue))
        return key

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty and not self._shutting_down:
            self._queue.append(key)
            self._added_at[key] = time.monotonic()
            metrics.QUEUE_DEPTH.labels(self.name).set(len(self._queue))
        self._notify()

    def shutdown(self) -> None:
        self._shutting_down = True
        self._queue.clear()
        for _, handle in self._delayed.values():
            handle.cancel()
        self._delayed.clear()
        self._notify()

    async def shutdown_with_drain(self) -> None:
        """Stop handing out keys and wait until every key being processed is done."""
        self.shutdown()
        while self._processing:
            self._wakeup.clear()
            await self._wakeup.wait()

    def _notify(self) -> None:
        self._wakeup.set()
