"""The operator's calls to the lessor runner in a sandbox pod (lessor.runner.runner), over the
Kubernetes pods/exec WebSocket: one JSON request on stdin, one JSON answer on stdout.

kr8s's own `exec` sends stdin only on the v5 channel protocol, which it does not offer; the
runner reads a single line and needs no end-of-input, so stdin on v4 is enough and this is the
channel protocol done by hand: one byte of channel (0 stdin, 1 stdout, 2 stderr, 3 the final
status) before each frame's payload.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from lessor.operator.runtime.client import JSON, KubeClient

PROTOCOL = "v4.channel.k8s.io"
STDIN, STDOUT, STATUS = 0, 1, 3


class RunnerUnavailableError(Exception):
    """The pod could not be exec'd into, or the runner did not answer with JSON."""


async def call_runner(
    client: KubeClient,
    namespace: str,
    pod: str,
    container: str | None,
    *,
    path: str,
    request: JSON,
    timeout: float = 15.0,
) -> JSON:
    params: dict[str, Any] = {"command": path, "stdin": "true", "stdout": "true",
                              "stderr": "true"}  # fmt: skip
    if container:
        params["container"] = container
    output = b""
    try:
        async with (
            asyncio.timeout(timeout),
            client.api.open_websocket(
                version="v1",
                namespace=namespace,
                url=f"pods/{pod}/exec",
                params=params,
                subprotocols=[PROTOCOL],
            ) as ws,
        ):
            await ws.send_bytes(bytes([STDIN]) + json.dumps(request).encode() + b"\n")
            while True:
                frame = await ws.receive_bytes()
                if not frame:
                    continue
                if frame[0] == STDOUT:
                    output += frame[1:]
                elif frame[0] == STATUS:
                    break
    except Exception as error:  # transport, handshake and timeout errors of several libraries
        if not output:
            raise RunnerUnavailableError(f"exec into {pod} failed: {error!r}") from error
    try:
        answer: JSON = json.loads(output.decode().strip().splitlines()[-1])
    except (ValueError, IndexError) as error:
        raise RunnerUnavailableError(f"the runner in {pod} did not answer with JSON") from error
    return answer
