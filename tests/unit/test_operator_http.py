"""The operator's probes and metrics port (lessor/operator/runtime/probes.py), served by a real
aiohttp server on loopback. It shares the event loop with every reconciler (review N18): a
flood of connections is turned away beyond a bound, and a client that trickles its request is
cut off, so neither can hold the loop's file descriptors or slots. And it answers as an HTTP
server: a query string, a HEAD and a keep-alive connection work as a scraper expects."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest

from lessor.operator.runtime import metrics, probes
from lessor.operator.runtime.probes import ProbeServer


@contextlib.asynccontextmanager
async def _serving(ready: Callable[[], bool] = lambda: True) -> AsyncIterator[int]:
    server = ProbeServer(ready)
    await server.start("127.0.0.1", 0)
    try:
        yield server.port
    finally:
        await server.stop()


async def _healthz(port: int) -> bytes:
    """The answer to a probe; b"" when the connection is closed (or reset) unanswered."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    try:
        return await asyncio.wait_for(reader.read(), timeout=10)
    except ConnectionResetError:
        return b""
    finally:
        writer.close()


def test_a_flood_is_turned_away_and_a_trickle_is_cut_off() -> None:
    async def scenario() -> None:
        async with _serving() as port:
            idle = [
                await asyncio.open_connection("127.0.0.1", port)
                for _ in range(probes.HTTP_CONNECTIONS)
            ]
            for _, writer in idle:
                writer.write(b"GET /healthz HTTP/1.1\r\n")  # and never the end of the headers
            await asyncio.sleep(0.2)
            assert await _healthz(port) == b"", "beyond the bound a connection is closed unread"
            for reader, _ in idle:  # cut off (the ceiling only catches a connection held for good)
                with contextlib.suppress(ConnectionResetError):
                    assert await asyncio.wait_for(reader.read(), timeout=120) == b""
            assert b"200 OK" in await _healthz(port), "served again once they are gone"

    asyncio.run(scenario())


def test_a_scraper_gets_the_metrics_however_it_asks() -> None:
    async def scenario() -> None:
        async with _serving() as port, aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{port}"
            metrics.LEADER.set(1)
            only = {"name[]": "lessor_leader", "_": "a query string is not a different path"}
            async with http.get(f"{base}/metrics", params=only) as answer:
                assert answer.status == 200
                assert (await answer.read()).splitlines()[-1] == b"lessor_leader 1.0"
            openmetrics = {"Accept": "application/openmetrics-text; version=1.0.0"}
            async with http.get(f"{base}/metrics", headers=openmetrics) as answer:
                assert answer.content_type == "application/openmetrics-text"
                assert (await answer.read()).endswith(b"# EOF\n")
            async with http.get(f"{base}/metrics", headers={"Accept-Encoding": "gzip"}) as answer:
                assert answer.headers["Content-Encoding"] == "gzip"
                assert b"# TYPE lessor_leader gauge" in await answer.read()
            async with http.head(f"{base}/healthz") as answer:
                assert answer.status == 200
            async with http.get(f"{base}/nothing-here") as answer:
                assert answer.status == 404

    asyncio.run(scenario())


@pytest.mark.parametrize(("synced", "status"), [(False, 503), (True, 200)])
def test_readiness_follows_the_caches(synced: bool, status: int) -> None:
    async def scenario() -> None:
        async with _serving(lambda: synced) as port, aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/readyz") as answer:
                assert answer.status == status
            async with http.get(f"http://127.0.0.1:{port}/healthz") as answer:
                assert answer.status == 200, "liveness does not wait for the caches"

    asyncio.run(scenario())
