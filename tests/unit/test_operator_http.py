"""The operator's probes and metrics port shares the event loop with every reconciler (review
N18): a flood of connections is turned away beyond a bound, and a client that trickles its
request is cut off, so neither can hold the loop's file descriptors or slots."""

from __future__ import annotations

import asyncio
import contextlib

from lessor.operator.runtime import manager as runtime
from lessor.operator.runtime.manager import Manager


async def _healthz(port: int) -> bytes:
    """The answer to a probe; b"" when the connection is closed (or reset) unanswered."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        return await asyncio.wait_for(reader.read(), timeout=10)
    except ConnectionResetError:
        return b""
    finally:
        writer.close()


def test_a_flood_is_turned_away_and_a_trickle_is_cut_off() -> None:
    async def scenario() -> None:
        served = Manager(elector=None, http_host="127.0.0.1", http_port=0)
        server = await asyncio.start_server(served._serve_http, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        idle = [
            await asyncio.open_connection("127.0.0.1", port)
            for _ in range(runtime.HTTP_CONNECTIONS)
        ]
        for _, writer in idle:
            writer.write(b"GET /healthz HTTP/1.1\r\n")  # and never the end of the headers
        await asyncio.sleep(0.2)
        turned_away = await _healthz(port)
        assert turned_away == b"", "beyond the bound a connection is closed unread"
        for reader, _ in idle:  # cut off (the ceiling only catches a connection held for good)
            with contextlib.suppress(ConnectionResetError):
                assert await asyncio.wait_for(reader.read(), timeout=120) == b""
        assert b"200 OK" in await _healthz(port), "served again once they are gone"
        server.close()
        await server.wait_closed()

    asyncio.run(scenario())
