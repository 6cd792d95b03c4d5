"""Wall time of the `lessor` command as a person or a CI job sees it: `lessor --help`
(interpreter start-up included), and `lessor lease <pool>` from process start until it exits
with the kubeconfig written, against a warm `local` pool; one lease at a time, each released
before the next once the pool is warm again.

Usage: python bench/cli_latency.py [--leases 10] [--warm 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.stack import local_stack

LESSOR = Path(sys.executable).parent / "lessor"


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    return time.perf_counter() - started, result.stdout


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_s": round(statistics.median(ordered), 3),
        "p90_s": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
        "max_s": round(ordered[-1], 3),
        "min_s": round(ordered[0], 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--leases", type=int, default=10)
    parser.add_argument("--warm", type=int, default=2)
    args = parser.parse_args()
    command = [str(LESSOR)] if LESSOR.exists() else [sys.executable, "-m", "lessor.cli.main"]
    results: dict[str, Any] = {"benchmark": "cli_latency", "leases": args.leases, "warm": args.warm}
    with tempfile.TemporaryDirectory() as home, local_stack() as stack:
        env = {**os.environ, "HOME": home, "XDG_CONFIG_HOME": f"{home}/config"}
        env.update(LESSOR_ENDPOINT=stack.base, LESSOR_TOKEN=stack.token)
        results["help"] = summary([timed([*command, "--help"], env)[0] for _ in range(10)])
        stack.pool("bench", args.warm)
        leases = []
        for _ in range(args.leases):
            stack.wait_ready("bench", args.warm)
            took, out = timed([*command, "lease", "bench", "-o", "json"], env)
            leases.append(took)
            lease = json.loads(out)
            assert Path(lease["kubeconfig"]).exists()
            subprocess.run(
                [*command, "release", lease["id"]], env=env, check=True, capture_output=True
            )
        results["lease"] = summary(leases)
    print(json.dumps(results))
    print(
        f"lessor --help p50 {results['help']['p50_s']} s; lessor lease (to kubeconfig written) "
        f"p50 {results['lease']['p50_s']} s, max {results['lease']['max_s']} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
