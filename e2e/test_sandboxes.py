"""Agent sandboxes as their users meet them, in real containers: a SandboxPool of an image with
python3 and lessor-runner, leased with `lessor lease`, commands run with `lessor exec` and
`lessor run`, the sandbox's own process reached with `lessor attach` and `lessor port-forward`.

Only on kind, where agent-sandbox's controller runs as a pod and the sandboxes are containers
(e2e/kind/sandboxes.py). On the local control plane kwok stands in for them, and the
integration modules test_sandbox_* cover the same API there."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from typing import IO, Any

import pytest

from e2e.installation import Installation, wait_for
from e2e.kind.sandboxes import RUNNER_PATH
from e2e.people import ALICE, LESSOR, Person

pytestmark = pytest.mark.e2e
POOL = "e2e-sandbox"


@pytest.fixture(scope="module")
def sandbox_pool(configured: Installation) -> Installation:
    if configured.sandbox_image is None:
        pytest.skip("sandboxes are containers only on kind (LESSOR_E2E_CLUSTER=kind)")
    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    configured.apply(
        {
            "apiVersion": "lessor.dev/v1alpha1",
            "kind": "SandboxPool",
            "metadata": {"name": POOL},
            "spec": {
                "warm": 1,
                "runner": {"path": RUNNER_PATH},
                "ports": [{"name": "http", "port": 8080}],
                "template": {
                    "spec": {
                        "automountServiceAccountToken": False,
                        "terminationGracePeriodSeconds": 1,
                        # lessor-sandboxes enforces Pod Security `restricted`.
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": 65532,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [
                            {
                                "name": "sandbox",
                                "image": configured.sandbox_image,
                                "imagePullPolicy": "Never",
                                # The sandbox's own process, the one attach reaches: a web
                                # server whose request log is its output.
                                "command": ["python3", "-u", "-m", "http.server", "8080",
                                            "--directory", "/tmp"],  # noqa: S108
                                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                                "securityContext": restricted,
                            }
                        ],
                    }
                },
            },
        }
    )  # fmt: skip
    wait_for(
        "a warm sandbox",
        lambda: ((configured.get("sandboxpool", POOL) or {}).get("status") or {}).get("ready"),
        timeout=300,
    )
    return configured


@pytest.fixture
def alice(sandbox_pool: Installation, tmp_path: Any) -> Person:
    return Person(sandbox_pool, tmp_path / "alice", ALICE)


@pytest.fixture
def sandbox(alice: Person) -> Iterator[str]:
    lease = alice.json("lease", POOL, "--wait-timeout", "5m")
    assert lease["phase"] == "Ready", lease
    yield str(lease["id"])
    released = alice.run("release", lease["id"])
    assert released.returncode == 0, released.stderr
    # A Releasing sandbox holds its slot of the grant until its teardown is verified.
    wait_for("no sandbox of alice's left", lambda: not active(alice), timeout=300)


def active(person: Person) -> list[dict[str, Any]]:
    status, leases = person.http("GET", "/v1/sandbox-leases")
    assert status == 200, leases
    return [lease for lease in leases if lease["phase"] not in ("Released", "Expired")]


def test_commands_run_in_the_sandbox_container(alice: Person, sandbox: str) -> None:
    script = "echo out; echo err >&2; id -u; tr '\\0' ' ' < /proc/1/cmdline; echo; exit 3"
    result = alice.run("exec", sandbox, "--", "sh", "-c", script)
    assert result.returncode == 3, result.stderr
    lines = result.stdout.splitlines()
    # The container's user, and its PID 1 is the pool's command: no stand-in on the host.
    assert lines[:2] == ["out", "65532"] and "http.server 8080" in lines[2], result.stdout
    assert result.stderr.strip() == "err"
    tail = alice.run("logs", sandbox)
    assert tail.returncode == 0 and "Serving HTTP on" in tail.stdout, tail.stderr


def test_run_leases_runs_and_releases(alice: Person) -> None:
    result = alice.run("run", POOL, "--", "python3", "-c", "print(6 * 7)")
    assert result.returncode == 0 and result.stdout.strip() == "42", result.stderr
    # The release is an intent the operator acts on a moment later; the pool's 30 min TTL is
    # far beyond this wait, so the lease ending within it is the release `run` made.
    wait_for("the sandbox released and torn down", lambda: not active(alice), timeout=300)


class Output:
    """Lines of a running command's stream, read in the background."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.read: list[str] = []  # the lines taken from the queue, for a failure's message
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line)

    def until(self, pattern: str, timeout: float = 120) -> re.Match[str]:
        found: list[re.Match[str]] = []

        def seen() -> bool:
            while not self.lines.empty():
                line = self.lines.get()
                self.read.append(line)
                match = re.search(pattern, line)
                if match:
                    found.append(match)
            return bool(found)

        try:
            wait_for(f"a line matching {pattern!r}", seen, timeout=timeout)
        except AssertionError as timeout_error:
            raise AssertionError(f"{timeout_error}; read: {self.read[-20:]}") from None
        return found[0]

    def seen(self, pattern: str, within: float) -> bool:
        """Whether a line matching `pattern` arrives within `within` seconds."""
        try:
            self.until(pattern, timeout=within)
        except AssertionError:
            return False
        return True


def test_port_forward_reaches_the_sandbox_and_attach_sees_its_output(
    alice: Person, sandbox: str
) -> None:
    written = alice.run("exec", sandbox, "--", "sh", "-c", "echo hello from the sandbox > /tmp/hi")
    assert written.returncode == 0, written.stderr

    def lessor(*argv: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*LESSOR, *argv], env=alice.env(), text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip

    started = [lessor("attach", sandbox), lessor("port-forward", sandbox, ":http")]
    attach, forward = started
    try:
        assert attach.stdout and attach.stderr and forward.stdout
        attached = [Output(attach.stdout), Output(attach.stderr)]
        port = Output(forward.stdout).until(r"Forwarding from 127\.0\.0\.1:(\d+) -> ")[1]
        url = f"http://127.0.0.1:{port}/hi"

        def requested_and_seen() -> bool:
            with urllib.request.urlopen(url, timeout=30) as answer:
                assert answer.read() == b"hello from the sandbox\n"
            # http.server logs each request on its stderr, which attach relays once its stream
            # is open: output written before that is not attach's to see, so ask again.
            return attached[1].seen(r'"GET /hi HTTP/1\.1" 200', within=5)

        wait_for("attach relaying the sandbox's log of a request", requested_and_seen)
    finally:
        for process in started:
            process.send_signal(signal.SIGINT)
        for process in started:
            assert process.wait(timeout=60) == 130
