"""Burst: 200 lease requests at once against a pool with 200 warm instances; the time until
all are Bound and the bind throughput (leases per second) over time. The pool uses the
test-only `namespace` backend: 200 `local` clusters (300 MiB each) do not fit on one machine.

Usage: python -m bench.burst [--leases 200]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from bench.stack import local_stack, progress


def run(leases: int = 200) -> dict[str, Any]:
    with local_stack(with_node=True, operator_args=("--test-backends",)) as stack:
        # maxInstances: a pool holds 100 by default (issue 40), and the burst needs `leases`.
        stack.pool("burst", leases, backend="namespace", max_instances=leases)
        progress(f"waiting for {leases} warm namespace instances")
        stack.wait_ready("burst", leases)
        gate = threading.Barrier(leases + 1)
        created: list[str] = []
        lock = threading.Lock()

        def request() -> None:
            client = stack.static()
            gate.wait()
            status, body = client.call("POST", "/v1/leases", {"profile": "burst"})
            assert status == 202, body
            with lock:
                created.append(body["id"])

        threads = [threading.Thread(target=request) for _ in range(leases)]
        for thread in threads:
            thread.start()
        conflicts = stack.lease_conflicts()
        gate.wait()
        started = time.perf_counter()
        bound_at: dict[str, float] = {}
        watcher = stack.static()
        while len(bound_at) < leases and time.perf_counter() - started < 600:
            for lease in watcher.call("GET", "/v1/leases")[1]:
                if lease["phase"] == "Bound" and lease["id"] not in bound_at:
                    bound_at[lease["id"]] = time.perf_counter() - started
            time.sleep(0.05)
        for thread in threads:
            thread.join()
        accepted = time.perf_counter() - started
        conflicts = stack.lease_conflicts() - conflicts
        stack.release_all()
    times = sorted(bound_at.values())
    per_second: dict[str, int] = {}
    for moment in times:
        key = str(int(moment))
        per_second[key] = per_second.get(key, 0) + 1
    return {
        "backend": "namespace",
        "leases": leases,
        "bound": len(times),
        "all_bound_s": round(times[-1], 2) if times else None,
        "all_accepted_s": round(accepted, 2),
        "leases_per_second": round(len(times) / times[-1], 1) if times else None,
        "reconcile_conflicts": conflicts,
        "bound_per_second": per_second,
        "bound_at_s": [round(t, 3) for t in times],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--leases", type=int, default=200)
    print(json.dumps(run(parser.parse_args().leases)))
    sys.exit(0)
