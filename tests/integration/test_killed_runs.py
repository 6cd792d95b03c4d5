"""A test run killed outright (SIGKILL, a CI timeout) leaves no process behind.

Its fixtures never run then, and the `local` clusters its operators started are meant to outlive
them; the watchdog of lessor.controlplane.watchdog, started by tests/conftest.py over the
session's temporary directory, is what stops them. This kills a real pytest run of
killed_run.py once it has a control plane, an operator and a `local` cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lessor.controlplane.processes import processes_mentioning, stop_processes_mentioning
from tests.integration.operator_harness import wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SCENARIO = Path(__file__).with_name("killed_run.py")


def command_line(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def processes_of_the_run(ready: Path) -> list[int]:
    """Every process descended from the run, wherever it runs and whatever its command line: each
    inherits the run's LESSOR_KILLED_RUN_READY. (Counting every etcd on the machine instead would
    count another session's, e.g. a parallel test worker's.)"""
    marker = f"LESSOR_KILLED_RUN_READY={ready}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return found


def test_a_killed_test_run_leaves_no_etcd_or_kube_apiserver_behind(tmp_path: Path) -> None:
    tree = tmp_path / "run"
    ready = tmp_path / "ready"
    log = tmp_path / "run.log"
    with log.open("wb") as output:
        run = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             f"--basetemp={tree}", str(SCENARIO)],
            cwd=ROOT, env={**os.environ, "LESSOR_KILLED_RUN_READY": str(ready)},
            stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for("the run's warm cluster", lambda: ready.exists() or run.poll() is not None, 400)
        assert run.poll() is None, log.read_text()[-3000:]
        started = [command_line(pid) for pid in processes_mentioning(str(tree))]
        names = [Path(argv[0]).name for argv in started if argv]
        # The run's own control plane and one `local` cluster; and the operator that started it.
        assert names.count("etcd") == 2, started
        assert names.count("kube-apiserver") == 2, started
        assert any("lessor.operator" in argv for argv in started), started
        # What the run started is found by its environment too, so the check below is not vacuous.
        assert set(processes_mentioning(str(tree))) <= set(processes_of_the_run(ready)), started

        run.kill()
        run.wait(timeout=60)

        wait_for("the run's processes to go", lambda: not processes_mentioning(str(tree)))
        wait_for("every process the run started to go", lambda: not processes_of_the_run(ready))
    finally:
        if run.poll() is None:
            run.kill()
        stop_processes_mentioning(str(tree))  # whatever a failure above left
