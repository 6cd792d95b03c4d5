"""Every benchmark, one after the other, into one JSON document: `python -m bench.run`.

Writes bench/results/<date>.json, prints a table for people, and draws the latency
distributions into bench/results/<date>.png (bench/plot.py). A benchmark reports; it never
passes or fails. `--quick` shrinks every benchmark to check that they all run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from bench import (
    api_throughput,
    burst,
    cli_latency,
    execution_overhead,
    lease_latency,
    operator_scale,
    plot,
    stream_overhead,
)
from bench.stack import progress

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    memory = next(
        (
            line.split()[1]
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        ),
        "0",
    )
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(int(memory) / 1024 / 1024, 1),
        "python": platform.python_version(),
        "system": platform.platform(),
    }


# Issue 19's goals on this machine kind (2 cores), shown beside each figure until it is met.
GOALS = {
    "lease 1": "p50 <= 60 ms",
    "lease 10": "p50 <= 150, p99 <= 500 ms",
    "lease 50": "p50 <= 500 ms",
    "oidc get_lease": ">= 1500 rps",
    "ssh get_lease": ">= 600 rps",
    "oidc post_lease": ">= 300 rps",
    "burst": "<= 4 s",
    "operator drained": "<= 30 s",
    "operator rss": "<= 250 MiB",
}


def table(results: dict[str, Any]) -> str:
    """Every figure with its multiple of the kube-apiserver floor measured in the same run
    (what a figure could at best be) and, until it is met, its goal."""
    lines = [f"{'figure':<56}{'value (multiple of the floor)':<52}goal"]

    def row(name: str, value: object, goal: str = "") -> None:
        lines.append(f"{name:<56}{value!s:<52}{GOALS.get(goal, '')}".rstrip())

    latency = results["lease_latency"]
    floor = latency["floor_ms"]
    row(
        "kube-apiserver floor: GET / create p50 (ms)",
        f"{floor['get']['p50']} / {floor['create']['p50']}",
    )
    for key, how in (("clients", "long polls"), ("polling_clients", "GET every 20 ms")):
        for clients, figures in latency.get(key, {}).items():
            row(
                f"lease latency, {clients} clients, {how}: p50/p90/p99/max (ms)",
                f"{figures['p50']} / {figures['p90']} / {figures['p99']} / {figures['max']}"
                f"  ({figures['p50_over_create_floor']}x create)",
                f"lease {clients}" if key == "clients" else "",
            )
    cli = results["cli_latency"]
    row("lessor --help p50 (ms)", cli["help_ms"]["p50"])
    row(
        "lessor lease to kubeconfig: p50/max (ms)",
        f"{cli['lease_ms']['p50']} / {cli['lease_ms']['max']}",
    )
    for workers, rows in results["api_throughput"]["workers"].items():
        for credential in ("oidc", "ssh", "session"):
            for endpoint, figures in rows[credential].items():
                base = rows["floor"]["create" if endpoint == "post_lease" else "get"]
                row(
                    f"{workers} workers, {credential}, {endpoint}: rps, p50/p99 ms",
                    f"{figures['rps']}, {figures['p50_ms']} / {figures['p99_ms']}"
                    f"  ({round(base['rps'] / max(figures['rps'], 0.1), 1)}x fewer rps)"
                    + (f" {figures['errors']} FAILED" if figures.get("errors") else ""),
                    f"{credential} {endpoint}",
                )
    b = results["burst"]
    creates = b["leases"] * floor["create"]["p50"] / 1000  # one create per lease, in a row
    row(
        f"burst: {b['leases']} leases all Bound (s)",
        f"{b['all_bound_s']}  ({round(b['all_bound_s'] / creates, 1)}x {b['leases']} creates)",
        "burst",
    )
    row("burst: leases per second", b["leases_per_second"])
    s = results["operator_scale"]
    row(
        f"operator with {s['leases']} leases, {s['pools']} pools: RSS (MiB)",
        s["rss_mib_at_drain"],
        "operator rss",
    )
    writes = s["leases"] * floor["create"]["p50"] / 1000  # one status write per lease, in a row
    row(
        "operator: drained after start (s)",
        f"{s['drained_s']}  ({round(s['drained_s'] / writes, 1)}x {s['leases']} writes)",
        "operator drained",
    )
    queue = s["queue_latency_s"]["clusterlease"]
    row(
        "operator: lease queue latency p50/p99 (s, bucket bound)",
        f"{queue['p50']} / {queue['p99']}",
    )
    execution = results["execution_overhead"]
    row(
        "execution `true`: API p50/p99, local, overhead ms",
        f"{execution['through_api_ms']['p50']} / {execution['through_api_ms']['p99']}; "
        f"{execution['local_ms']['p50']}; {execution['overhead_p50_ms']}",
    )
    stream = results["stream_overhead"]
    row(
        "port-forward: session open p50 ms; 1 KiB echo p50 ms (direct); MiB/s",
        f"{stream['session_open_ms']['p50']}; {stream['echo_1kib_ms']['p50']} "
        f"({stream['direct_echo_1kib_ms']['p50']}); {stream['throughput_mib_s']}",
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: check they all run")
    args = parser.parse_args()
    quick = args.quick
    results: dict[str, Any] = {"date": datetime.date.today().isoformat(), "machine": machine()}
    progress("1/6 lease latency")
    results["lease_latency"] = lease_latency.run((1, 3) if quick else (1, 10, 50))
    progress("1/6 lessor lease")
    results["cli_latency"] = cli_latency.run(3 if quick else 10)
    progress("2/6 API throughput (and 6/6 the cost floor)")
    results["api_throughput"] = api_throughput.run(1.0 if quick else 5.0, 4 if quick else 8)
    progress("3/6 burst")
    results["burst"] = burst.run(10 if quick else 200)
    progress("4/6 operator scale")
    results["operator_scale"] = operator_scale.run(*((20, 200) if quick else (1000, 10000)))
    progress("5/6 execution overhead")
    results["execution_overhead"] = execution_overhead.run(5 if quick else 30)
    progress("5/6 port-forward overhead")
    results["stream_overhead"] = stream_overhead.run(10 if quick else 100)
    RESULTS.mkdir(exist_ok=True)
    stem = results["date"] + ("-quick" if quick else "")
    (RESULTS / f"{stem}.json").write_text(json.dumps(results, indent=1) + "\n")
    plot.draw(results, RESULTS / f"{stem}.png")
    print(table(results))
    print(f"\nwritten: bench/results/{stem}.json and .png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
