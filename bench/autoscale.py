"""Fixed against autoscaled warm pools (issue 23), side by side on one recorded pattern of
arrivals: the lease wait (request to Bound, p50 and p99) and the warm cluster-seconds paid
for it, per period.

A day is compressed into `--period` seconds (windows of a twelfth of it): a lease every quarter
period, and a burst of `--burst` leases at mid-period, each held a twelfth of the period. The
pattern runs for two periods against two pools at once, on one stack, so both meet the same
load: `fixed` keeps `--fixed-warm` clusters (a hand-sized pool), `autoscale` keeps between
`--min-warm` and `--max-warm`. The first period is the autoscaler's yesterday; the second shows
what it learnt. `local` clusters, as in every test: their few seconds of start are what a
lease waits for when no cluster is warm.

Usage: python -m bench.autoscale [--period 120] [--burst 6]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from bench.stack import Stack, local_stack, percentiles, progress


def _pool(stack: Stack, name: str, policy: dict[str, Any], warm: int) -> None:
    stack.apply(
        {
            "apiVersion": "lessor.dev/v1alpha1",
            "kind": "ClusterPool",
            "metadata": {"name": name},
            "spec": {"warmTarget": warm, "ttl": "30m", "policy": policy,
                     "backend": {"type": "local"}},
        }
    )  # fmt: skip


def _lease(stack: Stack, pool: str, hold: float, waits: list[tuple[float, float]]) -> None:
    """One lease: requested, waited for, held, released; its wait recorded with its start."""
    client = stack.static()
    asked = time.monotonic()
    status, body = client.call("POST", "/v1/leases", {"profile": pool})
    if status != 202:
        progress(f"{pool}: lease refused: {status} {body}")
        return
    lease = body["id"]
    while body.get("phase") != "Bound" and time.monotonic() - asked < 300:
        status, body = client.call("GET", f"/v1/leases/{lease}?waitSeconds=10")
    waits.append((asked, time.monotonic() - asked))
    time.sleep(hold)
    client.call("DELETE", f"/v1/leases/{lease}")


def run(
    period: float = 120.0, burst: int = 6, fixed_warm: int = 2, min_warm: int = 1,
    max_warm: int = 6,
) -> dict[str, Any]:  # fmt: skip
    window = max(1, round(period / 12))
    policies = {
        "fixed": ({"mode": "fixed"}, fixed_warm),
        "autoscale": (
            {"mode": "autoscale", "minWarm": min_warm, "maxWarm": max_warm,
             "window": f"{window}s", "period": f"{round(period)}s",
             "scaleDownDelay": f"{window}s"},
            0,
        ),
    }  # fmt: skip
    # Offsets in a period: a lease each quarter, the burst at mid-period.
    pattern = sorted([period * q / 4 + window / 2 for q in range(4)] + [period / 2] * burst)
    with local_stack(with_node=True) as stack:
        for name, (policy, warm) in policies.items():
            _pool(stack, name, policy, warm)
        stack.wait_ready("fixed", fixed_warm)
        stack.wait_ready("autoscale", min_warm)
        waits: dict[str, list[tuple[float, float]]] = {name: [] for name in policies}
        warm_seconds = {name: [0.0, 0.0] for name in policies}
        start = time.monotonic()
        done = threading.Event()

        def sample() -> None:
            while not done.wait(1.0):
                day = int((time.monotonic() - start) // period)
                for name in policies:
                    if day < 2:
                        warm_seconds[name][day] += stack.ready(name)

        threading.Thread(target=sample, daemon=True).start()
        threads = []
        for day in range(2):
            progress(f"period {day + 1} of 2 ({period:g} s)")
            for offset in pattern:
                pause = start + day * period + offset - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                for name in policies:
                    thread = threading.Thread(
                        target=_lease, args=(stack, name, window, waits[name]), daemon=True
                    )
                    thread.start()
                    threads.append(thread)
        for thread in threads:
            thread.join(timeout=400)
        time.sleep(max(0.0, start + 2 * period - time.monotonic()))
        done.set()
        stack.release_all()
    result: dict[str, Any] = {
        "period_s": period, "window_s": window, "burst": burst, "leases_per_period": len(pattern),
        "fixed_warm": fixed_warm, "min_warm": min_warm, "max_warm": max_warm,
    }  # fmt: skip
    for name in policies:
        for day in range(2):
            day_waits = [w for at, w in waits[name] if int((at - start) // period) == day]
            result[f"{name} period {day + 1}"] = {
                "wait_ms": percentiles(day_waits, unit=1000.0, digits=0),
                "warm_cluster_seconds": round(warm_seconds[name][day]),
                "leases": len(day_waits),
            }
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--period", type=float, default=120.0)
    parser.add_argument("--burst", type=int, default=6)
    parser.add_argument("--fixed-warm", type=int, default=2)
    print(json.dumps(run(**vars(parser.parse_args()))))
    sys.exit(0)
