"""Warm lease latency: POST /v1/leases until GET shows Bound with a kubeconfig, with 1, 10 and
50 clients at once against a warm pool, plus the cost floor (a GET and a create of a small
object on the kube-apiserver itself) measured in the same run.

Each client waits as `lessor lease` does, with long polls (`?waitSeconds=20`: the answer comes
when the lease changes); `polling_clients` has the same levels with a GET every 20 ms, how a
client waited before the API could hold a GET (and the figures of 2026-11-25 and earlier).

The pool uses the test-only `namespace` backend so that 50 warm instances fit on one machine
(50 `local` clusters would need 15 GiB); binding does not depend on the backend, which only
decides how long a *replacement* takes. `bench/cli_latency.py` measures `lessor lease` with
`local` clusters.

`clients_without_replacements` has the long-poll levels again from a pool whose `maxInstances`
is its warm target: a bound cluster is not replaced while the round runs, and each round starts
once the pool is whole again (the released clusters torn down and replaced). It is what lessor
costs alone; `clients` adds the backend's replacement work on the same 2 cores (for the
`namespace` backend: a namespace, a ServiceAccount and a token per replacement, and a
namespace deletion per release, all kube-apiserver's work).

Usage: python -m bench.lease_latency
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from bench.stack import Stack, local_stack, percentiles, progress

POLL_SECONDS = 0.02
LONG_POLL = "?waitSeconds=20"


def one_lease(
    stack: Stack, pool: str, samples: list[float], lock: threading.Lock, long_poll: bool = True
) -> None:
    client = stack.static()
    started = time.perf_counter()
    status, created = client.call("POST", "/v1/leases", {"profile": pool})
    assert status == 202, created
    query = LONG_POLL if long_poll else ""
    while True:
        _, lease = client.call("GET", f"/v1/leases/{created['id']}{query}")
        if lease.get("phase") == "Bound" and lease.get("kubeconfig"):
            break
        if not long_poll:
            time.sleep(POLL_SECONDS)
    with lock:
        samples.append(time.perf_counter() - started)


def concurrent(
    stack: Stack,
    pool: str,
    clients: int,
    total: int,
    *,
    until: float | None = None,
    long_poll: bool = True,
    whole: int = 0,
    window: tuple[Callable[[], None], Callable[[], None]] | None = None,
) -> list[float]:
    """Rounds of `clients` leases at once, each round released before the next (the pool
    refills in between), until `total` were measured or the monotonic clock passes `until`.
    Each round starts once `clients` clusters are ready, or `whole` if more. `window`: called
    as a round starts and once its last lease is Bound (bench.profile counts in between)."""
    samples: list[float] = []
    lock = threading.Lock()
    while len(samples) < total and (until is None or time.monotonic() < until):
        stack.wait_ready(pool, max(clients, whole))
        threads = [
            threading.Thread(target=one_lease, args=(stack, pool, samples, lock, long_poll))
            for _ in range(clients)
        ]
        if window:
            window[0]()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if window:
            window[1]()
        stack.release_all()
    return samples


def floor(stack: Stack, repeats: int = 200) -> dict[str, Any]:
    get, create = stack.kube_floor()
    result = {}
    for name, call in (("get", get), ("create", create)):
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            call()
            samples.append(time.perf_counter() - started)
        result[name] = percentiles(samples, 1000, 2)
    return result


def run(levels: tuple[int, ...] = (1, 10, 50)) -> dict[str, Any]:
    with local_stack(with_node=True, operator_args=("--test-backends",)) as stack:
        most = max(levels)
        stack.pool("latency", most, backend="namespace")
        stack.pool("alone", most, backend="namespace", max_instances=most)
        stack.wait_ready("latency", most)
        stack.wait_ready("alone", most)
        result: dict[str, Any] = {"backend": "namespace", "floor_ms": floor(stack)}
        variants = (
            ("clients", "latency", True),
            ("clients_without_replacements", "alone", True),
            ("polling_clients", "latency", False),
        )
        for key, pool, long_poll in variants:
            result[key] = {}
            whole = most if pool == "alone" else 0
            for clients in levels:
                how = "long polls" if long_poll else f"a GET every {POLL_SECONDS * 1000:.0f} ms"
                progress(f"lease latency with {clients} concurrent clients, {how}, pool {pool}")
                conflicts = stack.lease_conflicts()
                total = max(50, clients * 2)
                samples = concurrent(stack, pool, clients, total, long_poll=long_poll, whole=whole)
                result[key][str(clients)] = {
                    **percentiles(samples, 1000, 1),
                    "reconcile_conflicts": stack.lease_conflicts() - conflicts,
                    "samples_ms": [round(s * 1000, 1) for s in samples],
                }
    floor_create = result["floor_ms"]["create"]["p50"]
    for row in (value for key, *_ in variants for value in result[key].values()):
        row["p50_over_create_floor"] = round(row["p50"] / floor_create, 1)
    return result


if __name__ == "__main__":
    print(json.dumps(run()))
    sys.exit(0)
