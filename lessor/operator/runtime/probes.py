"""The operator's probes and metrics port: /healthz, /readyz and /metrics on aiohttp.web.

aiohttp (already the operator's HTTP client) parses the requests, so a query string, a HEAD or
a keep-alive connection is answered as any HTTP server would; prometheus_client's own handler
serves /metrics, with the exposition format (OpenMetrics or text) and gzip negotiated from the
scraper's headers. The port shares the event loop with every reconciler, so two bounds stay
(review N18): at most HTTP_CONNECTIONS connections at once, a connection beyond them closed
unread; and a connection that has not sent a whole request within HTTP_REQUEST_SECONDS, or
sits idle that long, is closed (aiohttp's keep-alive timer, which runs from the connection's
first byte since 3.14.4).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

HTTP_CONNECTIONS = 16
HTTP_REQUEST_SECONDS = 5.0


class _TurnedAway(asyncio.Protocol):
    """A connection beyond the bound: closed before a byte of it is read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class ProbeServer:
    """Serves the probes and metrics of a process whose readiness `ready` tells."""

    def __init__(self, ready: Callable[[], bool]) -> None:
        self._ready = ready
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", make_aiohttp_handler())
        self._runner = web.AppRunner(
            app,
            access_log=None,  # probes every few seconds would drown the reconcilers' lines
            handle_signals=False,  # the manager drains on SIGTERM
            keepalive_timeout=HTTP_REQUEST_SECONDS,
        )
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The port bound (the one asked for, or the kernel's choice for 0)."""
        assert self._server is not None, "not started"
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self, host: str, port: int) -> None:
        await self._runner.setup()
        handlers = self._runner.server
        assert handlers is not None

        def connection() -> asyncio.Protocol:
            if len(handlers.connections) >= HTTP_CONNECTIONS:
                return _TurnedAway()
            return handlers()

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(connection, host, port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._runner.cleanup()

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        if self._ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="caches syncing\n")
