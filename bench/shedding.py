"""Load shedding (spec 7.1 "server overloaded", `--max-in-flight`): one API worker, far more
clients than it serves well, each sending GET /v1/leases in a loop with a static token. Without
a bound every request is started and all of them wait on each other; with one, what is beyond
it is answered 429 at once and what is served stays fast. Clients honour Retry-After (a refused
one waits its second before trying again). Reports, per bound: answers a second,
p50/p99 of the served requests (ms), p99 of the refused ones (ms), and how many were refused.

Usage: python -m bench.shedding [--seconds 5] [--clients 200] [--bounds 100000 32]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from bench.stack import Client, local_stack, percentiles, progress


def hammer(new_client: Callable[[], Client], clients: int, seconds: float) -> dict[str, Any]:
    served: list[float] = []
    refused: list[float] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def worker() -> None:
        client = new_client()
        ok, shed = [], []
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                status = client.call("GET", "/v1/leases")[0]
            except OSError:
                status = 0
            took = time.perf_counter() - started
            (shed if status == 429 else ok).append(took)
            if status == 429:
                time.sleep(1.0)  # as a client honouring Retry-After: 1 does
        with lock:
            served.extend(ok)
            refused.extend(shed)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ok, shed = percentiles(served, 1000, 1), percentiles(refused, 1000, 1)
    return {
        "answers_per_s": round((len(served) + len(refused)) / seconds, 1),
        "served_per_s": round(len(served) / seconds, 1),
        "served_p50_ms": ok.get("p50"),
        "served_p99_ms": ok.get("p99"),
        "refused": len(refused),
        "refused_p99_ms": shed.get("p99"),
    }


def run(
    seconds: float = 5.0, clients: int = 200, bounds: tuple[int, ...] = (100000, 32)
) -> dict[str, Any]:
    result: dict[str, Any] = {"clients": clients, "seconds": seconds, "workers": 1, "bounds": {}}
    for bound in bounds:
        progress(f"shedding: --max-in-flight={bound}, {clients} clients")
        with local_stack(api_workers=1, api_args=(f"--max-in-flight={bound}",)) as stack:
            result["bounds"][str(bound)] = hammer(stack.static, clients, seconds)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.shedding")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--bounds", type=int, nargs="+", default=[100000, 32])
    args = parser.parse_args()
    print(json.dumps(run(args.seconds, args.clients, tuple(args.bounds)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
