"""The GitHub Action (actions/lease) on the real stack, its steps run as a runner runs them
(tests/identity/actions_runner.py) with the job's OIDC token minted by GitHub's issuer laid out
as the real one, through the shipped example policy: a job leases, uses the cluster in a later
step, and its post step releases the lease; a job cancelled while it waits for a cluster
releases it at once; what the action cannot do is one `::error::` line, never a trace."""

from __future__ import annotations

import http.client
import json
import stat
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lessor.controlplane.binaries import ensure_binaries
from tests.identity.actions_runner import Job
from tests.identity.ci_issuers import GithubRunner
from tests.integration.ci_world import CiWorld, ci_world  # noqa: F401 - the fixture
from tests.integration.operator_harness import wait_for
from tests.integration.test_cli import Stack, agent, stack  # noqa: F401 - the fixtures

pytestmark = pytest.mark.integration
ACTION = Path(__file__).resolve().parents[2] / "actions" / "lease"
TRUSTED = "example-org/platform"  # the shipped policy's first rule: ci-small among its pools
ENDED = {"Releasing", "Recycling", "Released", "Expired"}


@pytest.fixture(scope="module")
def one_slot_pool(stack: Stack, ci_world: CiWorld) -> str:  # noqa: F811
    """ci-small with room for one cluster: a second lease waits in the queue."""
    pool = {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "ClusterPool",
        "metadata": {"name": "ci-small", "namespace": stack.namespace},
        "spec": {"warmTarget": 1, "maxInstances": 1, "ttl": "30m", "backend": {"type": "local"}},
    }
    stack.cluster.kubectl("apply", "-f", "-", input=json.dumps(pool))
    return "ci-small"


@pytest.fixture
def token_runner(ci_world: CiWorld) -> Iterator[GithubRunner]:  # noqa: F811
    runner = GithubRunner(ci_world.github, TRUSTED)
    server = runner.serve()
    yield runner
    server.shutdown()


def job(ci_world: CiWorld, runner: GithubRunner, workdir: Path, **inputs: str) -> Job:  # noqa: F811
    workdir.mkdir(parents=True, exist_ok=True)
    return Job(ACTION, runner, workdir, {"endpoint": ci_world.api.base, **inputs})


def lease_phase(stack: Stack, lease_id: str) -> str:  # noqa: F811
    found = stack.cluster.kubectl(
        "get", "clusterlease", lease_id, "-n", stack.namespace, "-o", "jsonpath={.status.phase}",
        check=False,
    )  # fmt: skip
    return found.stdout.strip() if found.returncode == 0 else "Deleted"


def ended(stack: Stack, lease_id: str) -> str:  # noqa: F811
    return wait_for(
        f"{lease_id} released",
        lambda: (now := lease_phase(stack, lease_id)) in ENDED | {"Deleted"} and now,
        timeout=120,
    )


def test_a_job_leases_uses_the_cluster_in_a_later_step_and_post_releases_it(
    stack: Stack,  # noqa: F811
    ci_world: CiWorld,  # noqa: F811
    token_runner: GithubRunner,
    tmp_path: Path,
) -> None:
    action = job(ci_world, token_runner, tmp_path, pool="ci-virtual", ttl="20m")
    main = action.main()
    assert main.returncode == 0, main.log
    lease_id, kubeconfig = main.outputs["lease-id"], Path(main.outputs["kubeconfig"])
    assert lease_phase(stack, lease_id) == "Bound"
    assert main.outputs["expires-at"], main.outputs
    assert token_runner.audiences[0] == "lessor", "the audience the shipped policy accepts"
    # The later steps get it through GITHUB_ENV, and the file is the job's alone.
    assert action.env == {"KUBECONFIG": str(kubeconfig), "LESSOR_LEASE_ID": lease_id}
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
    later_step = subprocess.run(
        [str(ensure_binaries() / "kubectl"), "get", "namespaces", "-o", "name"],
        env={**action.env, "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert later_step.returncode == 0 and "namespace/default" in later_step.stdout, later_step
    # The job token and the kubeconfig's credential are masked in the job's log.
    masked = main.commands("add-mask")
    assert len(masked) >= 2, main.stdout
    assert all(secret in kubeconfig.read_text() or secret.count(".") == 2 for secret in masked)

    post = action.post()
    assert post.returncode == 0, post.log
    assert f"lease {lease_id}: released" in post.stdout
    assert ended(stack, lease_id) in ENDED | {"Deleted"}
    assert not kubeconfig.exists(), "the kubeconfig goes with the lease"


def test_a_job_cancelled_while_it_waits_releases_its_lease_and_post_finds_it_gone(
    stack: Stack,  # noqa: F811
    ci_world: CiWorld,  # noqa: F811
    token_runner: GithubRunner,
    one_slot_pool: str,
    tmp_path: Path,
) -> None:
    holder = job(ci_world, token_runner, tmp_path / "holder", pool=one_slot_pool)
    held = holder.main()
    assert held.returncode == 0, held.log
    waiter = job(ci_world, token_runner, tmp_path / "waiter", pool=one_slot_pool)
    running = waiter.start("main")
    try:
        lease_id = wait_for(
            "the second lease queued", lambda: waiter.live_state().get("lease_id"), timeout=120
        )
        wait_for("its queue position shown", lambda: lease_phase(stack, lease_id) == "Pending")
        cancelled = waiter.cancel(running)
    finally:
        if running.poll() is None:
            running.kill()
    assert cancelled.returncode == 1, cancelled.log
    assert f"cancelled (SIGINT): releasing lease {lease_id}" in cancelled.stdout
    assert "Traceback" not in cancelled.log and "    at " not in cancelled.log
    assert ended(stack, lease_id) in ENDED | {"Deleted"}
    post = waiter.post()
    assert post.returncode == 0, post.log
    assert f"lease {lease_id}: " in post.stdout
    # The holder's job then ends: its post frees the pool's one cluster for the next job.
    assert holder.post().returncode == 0
    assert ended(stack, held.outputs["lease-id"]) in ENDED | {"Deleted"}


def test_what_the_action_cannot_do_is_one_error_line_and_leaves_nothing(
    ci_world: CiWorld,  # noqa: F811
    token_runner: GithubRunner,
    tmp_path: Path,
) -> None:
    def refused(step_name: str, **inputs: str) -> str:
        action = job(ci_world, token_runner, tmp_path / step_name, **inputs)
        main = action.main()
        assert main.returncode == 1, main.log
        assert "lease_id" not in main.state, "nothing for post to release"
        assert "Traceback" not in main.log and "    at " not in main.log, main.log
        (error,) = main.commands("error")
        post = action.post()
        assert post.returncode == 0 and "no lease was taken" in post.stdout, post.log
        return error

    plain = refused("plain", pool="ci-virtual", endpoint="http://lessor.example.com")
    assert "https is required" in plain
    # A pool the policy does not grant: the API's refusal, as the API words it (spec 7.1 403).
    ungranted = refused("ungranted", pool="no-such-pool")
    assert "may not lease from no-such-pool (forbidden)" in ungranted, ungranted
    assert "not a duration" in refused("ttl", pool="ci-virtual", ttl="ten minutes")
    # A job without `permissions: id-token: write` has no token request variables.
    token_runner.url = ""
    assert "id-token: write" in refused("no-permission", pool="ci-virtual")


class BusyFront:
    """In front of the API: refuses what `refusals` lists ((method, path prefix, status) each
    once, in order) as the API's load shedding does (its status, Retry-After and body), and
    passes everything else on. A stand-in only for when the refusals come: real shedding
    depends on how busy a worker is, which a test cannot time."""

    def __init__(self, api_base: str, refusals: list[tuple[str, str, int]]) -> None:
        self.refusals = refusals
        self.seen: list[str] = []
        upstream = urllib.parse.urlsplit(api_base)
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                front.seen.append(f"{self.command} {self.path}")
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                refusal = front.refusals[0] if front.refusals else None
                if refusal and self.command == refusal[0] and self.path.startswith(refusal[1]):
                    front.refusals.pop(0)
                    detail = {"error": "busy", "detail": "the server is overloaded; retry shortly"}
                    self._send(refusal[2], {"Retry-After": "1"}, json.dumps(detail).encode())
                    return
                connection = http.client.HTTPConnection(upstream.netloc, timeout=90)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                connection.request(self.command, self.path, body or None, headers)
                answer = connection.getresponse()
                self._send(answer.status, dict(answer.getheaders()), answer.read())
                connection.close()

            def _send(self, status: int, headers: dict[str, str], data: bytes) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    if name.lower() not in ("content-length", "connection", "date", "server"):
                        self.send_header(name, value)
                if "content-type" not in {name.lower() for name in headers}:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _handle  # noqa: N815 - http.server names them

            def log_message(self, *_: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_refusals_that_say_when_are_waited_out_and_a_refused_create_sent_again(
    stack: Stack,  # noqa: F811
    ci_world: CiWorld,  # noqa: F811
    token_runner: GithubRunner,
    tmp_path: Path,
) -> None:
    front = BusyFront(
        ci_world.api.base,
        [("POST", "/v1/leases", 429), ("POST", "/v1/leases", 503), ("GET", "/v1/leases/", 429)],
    )
    try:
        action = job(ci_world, token_runner, tmp_path, pool="ci-virtual", endpoint=front.base)
        main = action.main()
        assert main.returncode == 0, main.log
        assert main.stdout.count("retrying in 1s") == 3, main.stdout
        # Refused before anything was done, the create was sent again; one lease came of it.
        assert [s for s in front.seen if s.startswith("POST")] == ["POST /v1/leases"] * 3
        lease_id = main.outputs["lease-id"]
        assert lease_phase(stack, lease_id) == "Bound"
        assert action.post().returncode == 0
        assert ended(stack, lease_id) in ENDED | {"Deleted"}
    finally:
        front.server.shutdown()
