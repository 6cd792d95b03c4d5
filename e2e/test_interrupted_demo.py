"""`make demo` stopped half-way, as people stop it: Ctrl-C, or killed outright (SIGKILL, a closed
CI job). Either way no process of it is left and its temporary directory is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lessor.controlplane.processes import processes_mentioning, stop_processes_mentioning

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]


def wait_for(what: str, probe: object, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def executables(tree: Path) -> list[str]:
    names = []
    for pid in processes_mentioning(str(tree)):
        try:
            names.append(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode())
        except OSError:
            continue
    return [Path(name).name for name in names]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_a_demo_stopped_half_way_leaves_nothing(tmp_path: Path, stop: signal.Signals) -> None:
    log = tmp_path / "demo.log"
    with log.open("wb") as output:
        demo = subprocess.Popen(
            [sys.executable, str(ROOT / "e2e" / "demo.py")],
            cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)},
            stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        # Two warm `local` clusters besides the demo's own control plane: etcd three times.
        wait_for(
            "the demo's warm clusters",
            lambda: executables(tmp_path).count("etcd") >= 3 or demo.poll() is not None,
        )
        assert demo.poll() is None, log.read_text()[-3000:]
        demo.send_signal(stop)
        demo.wait(timeout=180)
        wait_for("the demo's processes to go", lambda: not executables(tmp_path), timeout=120)
        wait_for(
            "the demo's directory to go",
            lambda: not list(tmp_path.glob("lessor-demo-*")),
            timeout=30,
        )
    finally:
        if demo.poll() is None:
            demo.kill()
        stop_processes_mentioning(str(tmp_path))
