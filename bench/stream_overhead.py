"""Port-forward overhead: what a session through the API costs against a direct connection, on
the local control plane with the real agent-sandbox controller. kwok forwards the pod's port to
127.0.0.1 here, where an echo server listens, so the measured path is the whole real one:
client → API server (WebSocket) → kube-apiserver (pods/portforward) → kwok → the port.

Reported: opening a session (the upgrade until 101, including authentication, the lease and
pod checks and opening the pod's stream), a 1 KiB echo round trip in an open session against
the same echo over a direct TCP connection, and the throughput of a 16 MiB echo in one session.

Usage: python -m bench.stream_overhead
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from typing import Any

from bench.stack import TOKEN, local_stack, percentiles, progress
from lessor.cli.client import Client
from lessor.cli.config import Target
from lessor.cli.stream_client import StreamClient
from lessor.controlplane.agent_sandbox import install_agent_sandbox, run_agent_sandbox
from lessor.controlplane.cluster import FORWARDED_PORTS
from lessor.protocol.stream_frames import STDIN

EXTERNAL = ("--agent-sandbox-mode=external",)
API_ARGS = (*EXTERNAL, "--sandbox-admission-rate=1000")
PORT = FORWARDED_PORTS[0]
BULK = 16 << 20


def _echo_server(port: int) -> socket.socket:
    server = socket.create_server(("127.0.0.1", port))

    def echo(connection: socket.socket) -> None:
        with connection:
            while data := connection.recv(1 << 16):
                connection.sendall(data)

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=echo, args=(connection,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server


def _receive(session: StreamClient, size: int) -> None:
    got = 0
    while got < size:
        got += sum(len(payload) for _, payload in session.receive())


def _round_trips(session: StreamClient, samples: int) -> list[float]:
    payload, times = b"x" * 1024, []
    for _ in range(samples):
        started = time.perf_counter()
        session.send(STDIN, payload)
        _receive(session, len(payload))
        times.append(time.perf_counter() - started)
    return times


def _direct(port: int, samples: int) -> list[float]:
    payload, times = b"x" * 1024, []
    with socket.create_connection(("127.0.0.1", port)) as direct:
        for _ in range(samples):
            started = time.perf_counter()
            direct.sendall(payload)
            got = 0
            while got < len(payload):
                got += len(direct.recv(1 << 16))
            times.append(time.perf_counter() - started)
    return times


def _bulk(session: StreamClient) -> float:
    """MiB/s of BULK bytes sent in 64 KiB frames and echoed back."""
    chunk = b"y" * (1 << 16)
    started = time.perf_counter()
    sender = threading.Thread(
        target=lambda: [session.send(STDIN, chunk) for _ in range(BULK // len(chunk))]
    )
    sender.start()
    _receive(session, BULK)
    sender.join()
    return BULK / (1 << 20) / (time.perf_counter() - started)


def _measure(base: str, lease: str, samples: int) -> tuple[list[float], list[float], float]:
    client = Client(Target(endpoint=base, auth="token", token=TOKEN))
    path = f"/v1/sandbox-leases/{lease}/port-forward?port=echo"
    opening = []
    for _ in range(samples + 2):
        started = time.perf_counter()
        session = StreamClient.open(client, path)
        opening.append(time.perf_counter() - started)
        session.close()
    session = StreamClient.open(client, path)
    through = _round_trips(session, samples + 20)[20:]  # after warming up
    throughput = _bulk(session)
    session.close()
    return opening[2:], through, throughput


def run(samples: int) -> dict[str, Any]:
    with local_stack(with_node=True, operator_args=EXTERNAL, api_args=API_ARGS) as stack:
        target = stack.cluster.forward_target(PORT)
        server = _echo_server(target)
        try:
            install_agent_sandbox(stack.cluster, progress)
            with run_agent_sandbox(stack.cluster.kubeconfig, stack.work / "agent-sandbox.log"):
                lease = stack.sandbox_lease(ports=[{"name": "echo", "port": PORT}])
                opening, through, throughput = _measure(stack.base, lease, samples)
            direct = _direct(target, samples)
        finally:
            server.close()
    through_p, direct_p = percentiles(through, 1000, 2), percentiles(direct, 1000, 3)
    return {
        "session_open_ms": percentiles(opening, 1000, 1),
        "echo_1kib_ms": through_p,
        "direct_echo_1kib_ms": direct_p,
        "overhead_p50_ms": round(through_p["p50"] - direct_p["p50"], 2),
        "throughput_mib_s": round(throughput, 1),
        "note": "kwok forwards the pod port to the cluster's forward target on 127.0.0.1, "
        "where the echo server runs",
    }


def main() -> int:
    print(json.dumps(run(100), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
