"""`lessor with-lease` on the real stack: the command runs with the lease's kubeconfig, the
lease is released however the command ends (exit, SIGINT, SIGTERM, SIGHUP), the command's
status is the exit status, and the keepalive holds the lease past its first TTL."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lessor.controlplane.binaries import ensure_binaries
from tests.integration.operator_harness import wait_for
from tests.integration.test_cli import (  # noqa: F401 - the fixtures
    ALICE,
    LESSOR,
    Stack,
    User,
    agent,
    phase,
    stack,
    user,
)

pytestmark = pytest.mark.integration
ENDING = {"Releasing", "Recycling", "Released"}  # a release, on its way or done


def _released(stack: Stack, lease_id: str) -> str:  # noqa: F811
    """The phase the lease moves to once released (never Bound)."""
    return wait_for(
        f"{lease_id} released",
        lambda: (now := phase(stack, lease_id)) in ENDING | {"Expired"} and now,
        timeout=120,
    )


def test_the_command_runs_with_the_lease_and_its_status_is_the_exit_status(
    user: User,  # noqa: F811
    tmp_path: Path,
) -> None:
    user.target("token")
    record = tmp_path / "seen"
    kubectl = ensure_binaries() / "kubectl"
    script = (
        f'{kubectl} get ns >/dev/null && echo "$LESSOR_LEASE_ID $KUBECONFIG" > {record}; exit 7'
    )
    result = user.run("with-lease", "cli-warm", "--ttl", "10m", "--", "sh", "-c", script)
    assert result.returncode == 7, result.stderr
    lease_id, kubeconfig = record.read_text().split()
    assert f"released lease {lease_id}" in result.stderr
    assert _released(user.stack, lease_id) in ENDING
    assert not Path(kubeconfig).exists(), "the lease's kubeconfig is removed with it"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_is_passed_on_and_the_lease_released_after_the_command_ends(
    user: User,  # noqa: F811
    tmp_path: Path,
    signum: signal.Signals,
) -> None:
    """What a CI runner does to a cancelled job: a signal to lessor, which passes it on; the
    command ends as it chooses (here exit 42), and only then is the lease released."""
    user.target("token")
    ready = tmp_path / "ready"
    child = (
        "import os, signal, sys, time\n"
        f"signal.signal({int(signum)}, lambda *_: sys.exit(42))\n"
        f"open({str(ready)!r}, 'w').write(os.environ['LESSOR_LEASE_ID'])\n"
        "time.sleep(300)\n"
    )
    running = subprocess.Popen(
        [*LESSOR, "with-lease", "cli-warm", "--", sys.executable, "-c", child],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=user.env,
    )  # fmt: skip
    try:
        wait_for("the command running", ready.exists, timeout=180)
        lease_id = ready.read_text()
        assert phase(user.stack, lease_id) == "Bound"
        running.send_signal(signum)
        _, stderr = running.communicate(timeout=120)
    finally:
        if running.poll() is None:
            running.kill()
    assert running.returncode == 42, stderr
    assert _released(user.stack, lease_id) in ENDING, stderr


def test_the_keepalive_holds_the_lease_past_its_first_ttl(
    user: User,  # noqa: F811
    tmp_path: Path,
) -> None:
    user.target("token")
    record = tmp_path / "lease"
    # A 30 s lease and a 45 s command: without the keepalive the lease expires under it. With
    # it, extended 20 s before each expiry (the least margin), by 30 s: twice, the policy's
    # maxExtensions, before the command ends.
    script = f'echo "$LESSOR_LEASE_ID" > {record}; sleep 45'
    result = user.run("with-lease", "cli-warm", "--ttl", "30s", "--", "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    lease_id = record.read_text().strip()
    body = user.stack.api.call("GET", f"/v1/leases/{lease_id}", token=ALICE).body
    assert body["phase"] in ENDING, body  # released by the command's end, not Expired
    assert "warning" not in result.stderr, result.stderr


def test_what_cannot_run_is_said_before_any_lease(user: User) -> None:  # noqa: F811
    user.target("token")
    missing = user.run("with-lease", "cli-warm")
    assert missing.returncode == 2 and "give the command after --" in missing.stderr
    absent = user.run("with-lease", "cli-warm", "--", "/nonexistent/command")
    assert absent.returncode == 2 and "cannot run /nonexistent/command" in absent.stderr
    assert "lease" not in absent.stderr.replace("with-lease", ""), "no lease was made for it"
