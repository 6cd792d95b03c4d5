"""The integration and e2e suites on a busy machine: how issue 24 is checked, and re-checked.

    python -m bench.suite_under_load hog        # one clone, beside a CPU hog on every core
    python -m bench.suite_under_load parallel   # two clones at once (two control planes)
    python -m bench.suite_under_load both       # two clones at once, beside the CPU hog

Each clone is a fresh `git clone` of this repository's HEAD in a temporary directory, running
`tox run -e integration,e2e` there, as CI runs it. The hog is `stress-ng --cpu N` (Debian's
stress-ng), or N Python busy loops where stress-ng is missing; it stops with the suites. The
result, one JSON document on stdout: for each clone its exit code, its duration and the last
summary line of each tox environment. Like every benchmark it reports and never fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"^=+ (.* in [\d.]+s.*) =+$")


@contextlib.contextmanager
def cpu_hog() -> Iterator[str]:
    cores = os.cpu_count() or 1
    if shutil.which("stress-ng"):
        argv = ["stress-ng", "--cpu", str(cores), "--timeout", "4h", "--quiet"]
        hogs = [subprocess.Popen(argv)]
        described = f"stress-ng --cpu {cores}"
    else:
        loop = [sys.executable, "-c", "while True: pass"]
        hogs = [subprocess.Popen(loop) for _ in range(cores)]
        described = f"{cores} Python busy loops"
    try:
        yield described
    finally:
        for hog in hogs:
            hog.terminate()
            hog.wait(timeout=60)


def start_clone(work: Path, name: str) -> tuple[subprocess.Popen[bytes], Path, float]:
    clone = work / name
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    log = work / f"{name}.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "tox", "run", "-e", "integration,e2e"],
            cwd=clone,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    return process, log, time.monotonic()


def outcome(process: subprocess.Popen[bytes], log: Path, started: float) -> dict[str, Any]:
    code = process.wait()
    text = log.read_text(errors="replace")
    return {
        "exit_code": code,
        "minutes": round((time.monotonic() - started) / 60, 1),
        "summaries": [m.group(1) for line in text.splitlines() if (m := SUMMARY.match(line))],
        "log": str(log),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("hog", "parallel", "both"))
    parser.add_argument(
        "--keep", action="store_true", help="keep the clones and their logs (kept on a failure)"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lessor-under-load-"))
    with contextlib.ExitStack() as stack:
        if args.mode == "hog":
            load = stack.enter_context(cpu_hog())
            runs = [start_clone(work, "clone")]
        else:
            load = "the other clone"
            if args.mode == "both":
                load += " and " + stack.enter_context(cpu_hog())
            runs = [start_clone(work, f"clone-{n}") for n in (1, 2)]
        results = [outcome(*run) for run in runs]
    print(json.dumps({"mode": args.mode, "load": load, "clones": results}, indent=1))
    if not args.keep and all(result["exit_code"] == 0 for result in results):
        shutil.rmtree(work, ignore_errors=True)  # a failure keeps the clones and their logs
    return 0


if __name__ == "__main__":
    sys.exit(main())
