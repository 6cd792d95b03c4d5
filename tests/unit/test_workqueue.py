"""The work queue's guarantees, which every reconciler relies on."""

from __future__ import annotations

import asyncio

import pytest

from lessor.operator.runtime.workqueue import (
    ExponentialFailureLimiter,
    RateLimiter,
    TokenBucketLimiter,
    WorkQueue,
)


def run(coroutine):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coroutine, timeout=60))


def test_a_key_waits_in_the_queue_once() -> None:
    async def scenario() -> list[str]:
        queue = WorkQueue("t")
        for key in ("a", "b", "a", "a"):
            queue.add(key)
        assert len(queue) == 2
        return [await queue.get(), await queue.get()]  # type: ignore[list-item]

    assert run(scenario()) == ["a", "b"]


def test_a_key_added_while_processing_runs_again_after_done_never_concurrently() -> None:
    async def scenario() -> None:
        queue = WorkQueue("t")
        queue.add("a")
        assert await queue.get() == "a"
        queue.add("a")
        assert len(queue) == 0, "not handed to a second worker while being processed"
        queue.done("a")
        assert len(queue) == 1
        assert await queue.get() == "a"
        queue.done("a")
        assert len(queue) == 0

    run(scenario())


def test_delayed_adds_keep_the_earliest_deadline() -> None:
    async def scenario() -> float:
        queue = WorkQueue("t")
        loop = asyncio.get_running_loop()
        started = loop.time()
        queue.add_after("a", 5.0)
        queue.add_after("a", 0.1)
        queue.add_after("a", 3.0)
        assert await queue.get() == "a"
        return loop.time() - started

    assert run(scenario()) < 1.0


def test_per_key_backoff_doubles_and_forget_resets_it() -> None:
    limiter = ExponentialFailureLimiter(base=0.005, cap=1000.0)
    assert [limiter.when("k") for _ in range(4)] == [0.005, 0.01, 0.02, 0.04]
    assert limiter.when("other") == 0.005, "per key"
    limiter.forget("k")
    assert limiter.when("k") == 0.005
    capped = ExponentialFailureLimiter(base=1.0, cap=8.0)
    assert [capped.when("k") for _ in range(6)][-1] == 8.0


def test_the_global_bucket_throttles_a_storm_of_failures() -> None:
    # Time stands still: every request falls in the same instant, however slow the machine.
    limiter = RateLimiter(overall=TokenBucketLimiter(rate=10.0, burst=5, clock=lambda: 100.0))
    delays = [limiter.when(f"key-{n}") for n in range(8)]
    assert delays[:5] == [0.005] * 5, "within the burst only the per-key backoff applies"
    assert delays[5:] == pytest.approx([0.1, 0.2, 0.3]), "beyond it, one key per 1/rate"


def test_a_drained_shutdown_waits_for_work_in_flight() -> None:
    async def scenario() -> list[str]:
        queue = WorkQueue("t")
        log: list[str] = []
        queue.add("a")
        queue.add("b")
        key = await queue.get()

        async def finish() -> None:
            await asyncio.sleep(0.2)
            log.append("done")
            queue.done(key)  # type: ignore[arg-type]

        worker = asyncio.create_task(finish())
        await queue.shutdown_with_drain()
        log.append("drained")
        await worker
        assert await queue.get() is None, "nothing more is handed out"
        queue.add("c")
        assert len(queue) == 0, "nothing more is accepted"
        return log

    assert run(scenario()) == ["done", "drained"]


@pytest.mark.parametrize("workers", [1, 4])
def test_workers_never_process_one_key_twice_at_once(workers: int) -> None:
    async def scenario() -> int:
        queue = WorkQueue("t")
        active: set[str] = set()
        overlaps = 0
        processed = 0

        async def worker() -> None:
            nonlocal overlaps, processed
            while (key := await queue.get()) is not None:
                if key in active:
                    overlaps += 1
                active.add(key)
                await asyncio.sleep(0.001)
                if processed < 50:
                    queue.add(key)  # re-added while it is being processed
                active.discard(key)
                processed += 1
                queue.done(key)

        tasks = [asyncio.create_task(worker()) for _ in range(workers)]
        for key in ("x", "y", "z"):
            queue.add(key)
        while processed < 50:
            await asyncio.sleep(0.01)
        await queue.shutdown_with_drain()
        await asyncio.gather(*tasks)
        return overlaps

    assert run(scenario()) == 0
