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
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.stack import TOKEN, local_stack, percentiles

LESSOR = Path(sys.executable).parent / "lessor"


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    return time.perf_counter() - started, result.stdout


def run(leases: int = 10, warm: int = 2) -> dict[str, Any]:
    command = [str(LESSOR)] if LESSOR.exists() else [sys.executable, "-m", "lessor.cli.main"]
    results: dict[str, Any] = {"backend": "local", "leases": leases, "warm": warm}
    with tempfile.TemporaryDirectory() as home, local_stack() as stack:
        env = {**os.environ, "HOME": home, "XDG_CONFIG_HOME": f"{home}/config"}
        env.update(LESSOR_ENDPOINT=stack.base, LESSOR_TOKEN=TOKEN)
        helps = [timed([*command, "--help"], env)[0] for _ in range(10)]
        results["help_ms"] = percentiles(helps, 1000, 1)
        stack.pool("cli", warm)
        samples = []
        for _ in range(leases):
            stack.wait_ready("cli", warm)
            took, out = timed([*command, "lease", "cli", "-o", "json"], env)
            samples.append(took)
            lease = json.loads(out)
            assert Path(lease["kubeconfig"]).exists()
            subprocess.run(
                [*command, "release", lease["id"]], env=env, check=True, capture_output=True
            )
        results["lease_ms"] = percentiles(samples, 1000, 1)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--leases", type=int, default=10)
    parser.add_argument("--warm", type=int, default=2)
    arguments = parser.parse_args()
    print(json.dumps(run(arguments.leases, arguments.warm)))
    sys.exit(0)
