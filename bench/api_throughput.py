"""API throughput: requests per second and p50/p99 latency of GET /v1/leases/:id, GET
/v1/leases, GET /v1/pools and POST /v1/leases, with OIDC bearer tokens (JWKS cached), SSH
request signatures and session tokens, at 2 and 4 gunicorn workers; and, in the same run, the
cost floor: a GET and a create of a small object on the kube-apiserver at the same concurrency.

Usage: python -m bench.api_throughput [--seconds 5] [--clients 8]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from bench.stack import Client, Stack, local_stack, percentiles, progress

CREDENTIALS = ("oidc", "ssh", "session")


def load(calls: list[Callable[[], int]], seconds: float) -> dict[str, Any]:
    """One thread per call, each calling it in a loop for `seconds`."""
    latencies: list[float] = []
    failures = 0
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def worker(call: Callable[[], int]) -> None:
        nonlocal failures
        mine, bad = [], 0
        while time.monotonic() < deadline:
            started = time.perf_counter()
            status = call()
            mine.append(time.perf_counter() - started)
            bad += status >= 400
        with lock:
            latencies.extend(mine)
            failures += bad

    threads = [threading.Thread(target=worker, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    figures = percentiles(latencies, 1000, 1)
    return {"rps": round(len(latencies) / seconds, 1), "p50_ms": figures["p50"],
            "p99_ms": figures["p99"], "errors": failures}  # fmt: skip


def endpoints(stack: Stack, credential: str, lease_id: str) -> dict[str, Callable[[], int]]:
    client: Client = getattr(stack, credential)()
    return {
        "get_lease": lambda: client.call("GET", f"/v1/leases/{lease_id}")[0],
        "list_leases": lambda: client.call("GET", "/v1/leases")[0],
        "list_pools": lambda: client.call("GET", "/v1/pools")[0],
        "post_lease": lambda: client.call("POST", "/v1/leases", {"profile": "api"})[0],
    }


def run(
    seconds: float = 5.0, clients: int = 8, workers: tuple[int, ...] = (2, 4)
) -> dict[str, Any]:
    result: dict[str, Any] = {"clients": clients, "seconds": seconds, "workers": {}}
    for count in workers:
        with local_stack(api_workers=count) as stack:
            stack.pool("api", 0)
            _, lease = stack.static().call("POST", "/v1/leases", {"profile": "api"})
            get, create = stack.kube_floor()
            floor = {
                name: load([lambda call=call: (call(), 200)[1]] * clients, seconds)
                for name, call in (("get", get), ("create", create))
            }
            rows: dict[str, Any] = {"floor": floor}
            for credential in CREDENTIALS:
                progress(f"{count} workers, {credential}")
                rows[credential] = {}
                for name in ("get_lease", "list_leases", "list_pools", "post_lease"):
                    calls = [
                        endpoints(stack, credential, lease["id"])[name] for _ in range(clients)
                    ]
                    figures = load(calls, seconds)
                    base = floor["create" if name == "post_lease" else "get"]
                    figures["p50_over_floor"] = round(figures["p50_ms"] / base["p50_ms"], 1)
                    rows[credential][name] = figures
                # Created leases would slow the next listing: start each credential afresh. They
                # wait in one pool's queue, and each deletion moves everyone behind up a place
                # (a status write each): some hundreds take a minute or more to go.
                stack.cluster.kubectl(
                    "delete", "clusterleases", "--all", "-n", "bench", timeout=900
                )
                _, lease = stack.static().call("POST", "/v1/leases", {"profile": "api"})
            result["workers"][str(count)] = rows
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=8)
    arguments = parser.parse_args()
    print(json.dumps(run(arguments.seconds, arguments.clients)))
    sys.exit(0)
