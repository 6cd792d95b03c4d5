"""`python -m lessor.controlplane start|env|stop`, run as a person would from a shell."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lessor.controlplane.processes import ProcessRecord

pytestmark = pytest.mark.e2e


def command(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lessor.controlplane", "--dir", str(directory), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def parse_env(output: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def test_start_env_stop_round_trip_leaves_nothing_running(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    started = command(directory, "start")
    try:
        assert started.returncode == 0, started.stderr
        env = parse_env(started.stdout)
        kubeconfig = env["KUBECONFIG"]
        assert (Path(kubeconfig).stat().st_mode & 0o777) == 0o600
        kubectl = str(Path(env["LESSOR_LOCALCP_BIN"]) / "kubectl")
        nodes = subprocess.run(
            [kubectl, "--kubeconfig", kubeconfig, "get", "nodes", "-o", "name"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert nodes.stdout.strip() == "node/kwok-node-0"

        again = command(directory, "start")
        assert again.returncode == 0
        assert parse_env(again.stdout) == env, "a second start reuses the running cluster"
        assert parse_env(command(directory, "env").stdout) == env
        assert command(directory, "status").returncode == 0

        state = json.loads((directory / "state.json").read_text())
        records = [ProcessRecord(**p) for p in state["processes"]]
        assert {r.name for r in records} == {
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
        }
        assert all(r.is_running() for r in records)
    finally:
        stopped = command(directory, "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not any(r.is_running() for r in records)
    assert not directory.exists()
    status = command(directory, "status")
    assert status.returncode == 1
    assert "stopped" in status.stdout


def test_env_without_a_running_cluster_says_so(tmp_path: Path) -> None:
    result = command(tmp_path / "nothing-here", "env")
    assert result.returncode == 1
    assert "no running cluster" in result.stderr
    assert "Traceback" not in result.stderr


def test_build_without_go_fails_with_a_clear_message(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": "/nonexistent", "LESSOR_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "-m", "lessor.controlplane", "build"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "`go` is not on PATH" in result.stderr
    assert "LESSOR_TEST_KUBECONFIG" in result.stderr
    assert "Traceback" not in result.stderr
