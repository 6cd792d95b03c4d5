"""Executions in a leased sandbox (spec 4.5, 3.3), on the local control plane: the real
agent-sandbox controller places the sandbox, kwok runs the pod's exec as a local process (so the
lessor runner runs on this host and the tests can look at its processes and files), the real
operator and API server, and the `lessor` CLI as a user runs it.

Every response is scanned for secrets, as in test_sandbox_leases (same fixtures).
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import datetime
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import pytest

from lessor.cli.client import Client
from lessor.cli.config import Target
from lessor.cli.errors import ApiError
from lessor.cli.stream_client import StreamClient
from lessor.protocol.durations import parse_duration
from lessor.runner.runner import CAP, WINDOW
from tests.integration.answer_cutting_proxy import AnswerCuttingProxy
from tests.integration.operator_harness import CrashPoint, wait_for
from tests.integration.test_apiserver import start_api
from tests.integration.test_sandbox_attach_port_forward import refused
from tests.integration.test_sandbox_leases import (  # noqa: F401
    ALICE,
    BOB,
    CAROL,
    EXTERNAL,
    Env,
    Response,
    ScannedApi,
    env,
    metric,
    reconciled_again,
    sandbox_pool,
    scanned,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def lease(env: Env) -> Iterator[str]:  # noqa: F811
    created = env.create(ALICE, pool="sb-run", ttl="30m").body["id"]
    env.until(ALICE, created, "Ready")
    yield created
    env.release(ALICE, created)


def post(env: Env, lease: str, token: str = ALICE, **body: Any) -> Response:  # noqa: F811
    body.setdefault("idempotencyKey", str(uuid.uuid4()))
    return env.api.call("POST", f"/v1/sandbox-leases/{lease}/executions", token=token, body=body)


def execution(env: Env, lease: str, name: str) -> Response:  # noqa: F811
    return env.api.call("GET", f"/v1/sandbox-leases/{lease}/executions/{name}", token=ALICE)


def logs(env: Env, lease: str, name: str, stdout: int = 0, stderr: int = 0) -> dict[str, Any]:  # noqa: F811
    answer = env.api.call(
        "GET",
        f"/v1/sandbox-leases/{lease}/executions/{name}/logs?stdoutOffset={stdout}&stderrOffset={stderr}",
        token=ALICE,
    )
    assert answer.status == 200, answer.body
    body: dict[str, Any] = answer.body
    return body


def until_state(env: Env, lease: str, name: str, *states: str) -> dict[str, Any]:  # noqa: F811
    return wait_for(f"{name} {states}", lambda: (
        body if (body := execution(env, lease, name).body)["state"] in states else None
    ), timeout=120)  # fmt: skip


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_wait_mode_returns_the_output_and_the_exit_code(env: Env, lease: str) -> None:  # noqa: F811
    ok = post(env, lease, command=["sh", "-c", "echo out; echo err >&2"])
    assert ok.status == 200, ok.body
    body = ok.body
    assert (body["state"], body["exitCode"]) == ("Succeeded", 0)
    assert (body["stdout"], body["stderr"], body["truncated"]) == ("out\n", "err\n", False)
    assert body["startedAt"] and body["finishedAt"]
    failed = post(env, lease, command=["sh", "-c", "exit 3"]).body
    assert (failed["state"], failed["exitCode"]) == ("Failed", 3)
    missing = post(env, lease, command=["/no/such/program"]).body
    assert missing["state"] == "Failed" and "exitCode" not in missing
    # GET of the execution: the state without the output; the operator owns it.
    recorded = until_state(env, lease, body["id"], "Succeeded")
    assert "stdout" not in recorded and recorded["exitCode"] == 0
    cwd = post(env, lease, command=["pwd"], cwd="/tmp").body
    assert cwd["stdout"] == "/tmp\n"


def test_detach_answers_at_once_and_a_keyed_retry_returns_the_same_execution(
    env: Env,  # noqa: F811
    lease: str,
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    command = ["sh", "-c", f"echo once >> {marker}; sleep 1"]
    key = str(uuid.uuid4())
    first = post(env, lease, command=command, detach=True, idempotencyKey=key)
    assert first.status == 202 and first.body["state"] in ("Queued", "Running")
    assert first.headers["Location"].endswith(f"/executions/{first.body['id']}")
    again = post(env, lease, command=command, detach=True, idempotencyKey=key)
    assert again.status == 202 and again.body["id"] == first.body["id"]
    until_state(env, lease, first.body["id"], "Succeeded")
    after = post(env, lease, command=command, detach=True, idempotencyKey=key)
    assert after.body["state"] == "Succeeded", "a retry after the end reports the end"
    assert marker.read_text() == "once\n", "the command ran exactly once"
    changed = post(env, lease, command=["sh", "-c", "true"], detach=True, idempotencyKey=key)
    assert (changed.status, changed.body["code"]) == (409, "idempotency_conflict")
    changed = post(env, lease, command=command, detach=False, idempotencyKey=key)
    assert (changed.status, changed.body["code"]) == (409, "idempotency_conflict")


def test_concurrent_identical_posts_run_the_command_once(
    env: Env,  # noqa: F811
    lease: str,
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    key = str(uuid.uuid4())

    def once(_: int) -> Response:
        return post(env, lease, command=["sh", "-c", f"echo x >> {marker}"], idempotencyKey=key)

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(once, range(6)))
    assert {a.status for a in answers} == {200}, [a.body for a in answers]
    assert len({a.body["id"] for a in answers}) == 1
    assert marker.read_text() == "x\n"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1]
    return status != "Z"


def test_a_timeout_kills_the_whole_process_group(env: Env, lease: str, tmp_path: Path) -> None:  # noqa: F811
    pid_file = tmp_path / "child.pid"
    stubborn = "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
               "signal.signal(signal.SIGHUP, signal.SIG_IGN); time.sleep(300)"  # fmt: skip
    script = f"{sys.executable} -c '{stubborn}' & echo $! > {pid_file}; wait"
    body = post(env, lease, command=["sh", "-c", script], timeout="2s").body
    assert body["state"] == "TimedOut" and "exitCode" not in body
    pid = int(pid_file.read_text())
    wait_for("the stubborn child to be gone", lambda: not alive(pid), timeout=60)


def test_log_windows_resume_exactly_with_invalid_utf8_and_past_the_cap(
    env: Env,  # noqa: F811
    lease: str,
) -> None:
    size = WINDOW + 1000
    code = (f"import sys; sys.stdout.buffer.write(b'a' * {size} + b'\\xff\\xfe' + b'end'); "
            "sys.stderr.buffer.write(b'e' * 10)")  # fmt: skip
    name = post(env, lease, command=python(code), detach=True).body["id"]
    until_state(env, lease, name, "Succeeded")
    first = logs(env, lease, name)
    assert first["state"] == "Succeeded"
    assert first["stdout"]["nextOffset"] == WINDOW and first["stdout"]["more"] is True
    assert first["stdout"]["data"] == "a" * WINDOW
    assert first["stderr"] == {
        "data": "e" * 10,
        "nextOffset": 10,
        "more": False,
        "truncated": False,
    }
    offset = first["stdout"]["nextOffset"]
    second = logs(env, lease, name, offset, 10)
    assert logs(env, lease, name, offset, 10) == second, "a retry returns the same window"
    assert second["stdout"]["data"] == "a" * 1000 + "\ufffd\ufffd" + "end"
    assert second["stdout"]["nextOffset"] == size + 5, "offsets count raw bytes, not characters"
    assert second["stdout"]["more"] is False and second["stderr"]["more"] is False

    big = CAP + 100_000
    flood = post(env, lease, command=python(f"import sys; sys.stdout.write('z' * {big})")).body
    assert flood["state"] == "Succeeded" and flood["truncated"] is True
    assert len(flood["stdout"]) == CAP
    window = logs(env, lease, flood["id"], CAP, 0)
    assert window["stdout"] == {"data": "", "nextOffset": CAP, "more": False, "truncated": True}


def test_cancel_signals_the_group_and_is_safe_to_repeat(env: Env, lease: str) -> None:  # noqa: F811
    name = post(env, lease, command=["sleep", "300"], detach=True).body["id"]
    until_state(env, lease, name, "Running")
    path = f"/v1/sandbox-leases/{lease}/executions/{name}"
    cancelled = env.api.call("DELETE", path, token=ALICE)
    assert (cancelled.status, cancelled.body["state"]) == (200, "Cancelled")
    again = env.api.call("DELETE", path, token=ALICE)
    assert (again.status, again.body["state"]) == (200, "Cancelled")
    until_state(env, lease, name, "Cancelled")

    done = post(env, lease, command=["true"]).body
    until_state(env, lease, done["id"], "Succeeded")
    finished = env.api.call("DELETE", f"/v1/sandbox-leases/{lease}/executions/{done['id']}",
                            token=ALICE)  # fmt: skip
    assert (finished.status, finished.body["state"]) == (200, "Succeeded"), "no claim of a cancel"


def test_a_killed_supervisor_leaves_the_outcome_unknown_never_rerun(
    env: Env,  # noqa: F811
    lease: str,
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    key = str(uuid.uuid4())
    command = ["sh", "-c", f"echo run >> {marker}; sleep 300"]
    name = post(env, lease, command=command, detach=True, idempotencyKey=key).body["id"]
    until_state(env, lease, name, "Running")
    # The runner keeps its state in the session's directory (the env fixture's wrapper).
    state = json.loads((env.directory / "runner" / name / "state.json").read_text())
    os.kill(state["supervisor"], signal.SIGKILL)
    try:
        unknown = until_state(env, lease, name, "Unknown")
        assert "exitCode" not in unknown
        retry = post(env, lease, command=command, detach=True, idempotencyKey=key)
        assert retry.body["state"] == "Unknown"
        reconciled_again(env, env.operator, "sandboxexecution", name)
        assert marker.read_text() == "run\n", "never run a second time"
    finally:
        os.killpg(state["pgid"], signal.SIGKILL)


def test_refusals(env: Env, lease: str) -> None:  # noqa: F811
    for body, field in (
        ({"command": []}, "command"),
        ({"command": ["a"], "idempotencyKey": ""}, "idempotencyKey"),
        ({"command": ["a"], "timeout": "-1s"}, "timeout"),
        ({"command": ["a"], "cwd": "rel"}, "cwd"),
        ({"command": ["a\x00b"]}, "command"),
        ({"command": "echo hi"}, "command"),
    ):  # fmt: skip
        refused = post(env, lease, **body)
        assert refused.status == 400 and field in refused.body["detail"], (body, refused.body)
    missing_key = env.api.call("POST", f"/v1/sandbox-leases/{lease}/executions", token=ALICE,
                               body={"command": ["true"]})  # fmt: skip
    assert missing_key.status == 400 and "idempotencyKey" in missing_key.body["detail"]

    name = post(env, lease, command=["true"]).body["id"]
    assert env.api.call("GET", f"/v1/sandbox-leases/{lease}/executions/{name}",
                        token=BOB).status == 404  # fmt: skip
    assert execution(env, lease, "x" + "0" * 24).status == 404

    no_runner = env.create(ALICE, pool="sb-warm").body["id"]
    env.until(ALICE, no_runner, "Ready")
    refused = post(env, no_runner, command=["true"])
    assert refused.status == 501, refused.body
    assert execution(env, no_runner, name).status == 404, "another lease instance's execution"
    assert env.release(ALICE, no_runner).status == 204


def lessor(env: Env, tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:  # noqa: F811
    config = tmp_path / "config"
    environment = {
        **os.environ,
        "XDG_CONFIG_HOME": str(config),
        "LESSOR_ENDPOINT": env.api.api.base,
        "LESSOR_TOKEN": ALICE,
    }
    return subprocess.run(
        [sys.executable, "-m", "lessor.cli.main", *argv],
        env=environment, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_an_execution_whose_runner_never_answers_ends_unknown(env: Env) -> None:  # noqa: F811
    """A pool with a wrong runner path: the detached execution is not left Queued for the
    lease's whole life (a follower would wait that long) but ends Unknown once its start window
    (its own timeout, here 3 s) has passed, saying why."""
    env.objects.apply(sandbox_pool("sb-lost-runner", 1, runner={"path": "/no/lessor-runner"}))
    wait_for(
        "sb-lost-runner to be Healthy",
        lambda: env.objects.status("sandboxpool", "sb-lost-runner").get("phase") == "Healthy",
        timeout=120,
    )
    lost = env.create(ALICE, pool="sb-lost-runner").body["id"]
    env.until(ALICE, lost, "Ready")
    queued = post(env, lost, command=["true"], detach=True, timeout="3s")
    assert queued.status == 202 and queued.body["state"] == "Queued", queued.body
    ended = until_state(env, lost, queued.body["id"], "Unknown")
    assert "the runner did not answer for 3s" in ended["message"], ended
    assert env.release(ALICE, lost).status == 204


def test_a_lease_whose_pool_was_deleted_refuses_new_executions(env: Env) -> None:  # noqa: F811
    source = env.objects.get("sandboxpool", "sb-run")
    assert source is not None
    runner = source["spec"]["runner"]
    env.objects.apply(sandbox_pool("sb-vanishing", 1, runner=runner))
    wait_for(
        "sb-vanishing to be Healthy",
        lambda: env.objects.status("sandboxpool", "sb-vanishing").get("phase") == "Healthy",
        timeout=120,
    )
    kept = env.create(ALICE, pool="sb-vanishing").body["id"]
    env.until(ALICE, kept, "Ready")
    assert post(env, kept, command=["true"]).status == 200
    env.cluster.kubectl("delete", "sandboxpool", "sb-vanishing", "-n", env.namespace)
    refused = post(env, kept, command=["true"])
    assert (refused.status, refused.body["reason"]) == (503, "pool_unresolvable"), refused.body
    assert "sb-vanishing" in refused.body["detail"]
    env.release(ALICE, kept)


def test_the_cli_runs_execs_and_propagates_exit_codes(
    env: Env,  # noqa: F811
    lease: str,
    tmp_path: Path,
) -> None:
    ran = lessor(env, tmp_path, "run", "sb-run", "--", "sh", "-c", "echo from run; exit 7")
    assert ran.returncode == 7, ran.stderr
    assert ran.stdout == "from run\n"
    mine = env.api.call("GET", "/v1/sandbox-leases", token=ALICE).body
    assert all(row["phase"] != "Ready" or row["id"] == lease for row in mine), "run released"

    executed = lessor(env, tmp_path, "exec", lease, "--", "sh", "-c", "echo a; echo b >&2")
    assert (executed.returncode, executed.stdout, executed.stderr) == (0, "a\n", "b\n")
    timed = lessor(env, tmp_path, "exec", lease, "--timeout", "1s", "--", "sleep", "30")
    assert timed.returncode == 124
    detached = lessor(env, tmp_path, "exec", lease, "--detach", "--", "sh", "-c", "echo later")
    name = detached.stdout.strip()
    followed = lessor(env, tmp_path, "logs", lease, name, "--follow")
    assert (followed.returncode, followed.stdout) == (0, "later\n")
    long = lessor(env, tmp_path, "exec", lease, "--detach", "--", "sleep", "300").stdout.strip()
    until_state(env, lease, long, "Running")
    cancel = lessor(env, tmp_path, "cancel", "-o", "json", lease, long)
    assert json.loads(cancel.stdout)["state"] == "Cancelled"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_run_cancelled_by_a_ci_runner_stops_the_command_and_releases_the_lease(
    env: Env,  # noqa: F811
    tmp_path: Path,
    signum: signal.Signals,
) -> None:
    """What a CI system sends a cancelled job: the execution is cancelled and the lease
    released, as on Ctrl-C (they used to end `lessor run` with the lease held)."""
    before = sandbox_leases(env)
    environment = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"),
                   "LESSOR_ENDPOINT": env.api.api.base, "LESSOR_TOKEN": ALICE}  # fmt: skip
    running = subprocess.Popen(
        [sys.executable, "-m", "lessor.cli.main", "run", "sb-run", "--", "sh", "-c",
         "echo started; sleep 300"],
        env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert running.stdout is not None
        assert running.stdout.readline() == "started\n"  # the command runs in the sandbox
        running.send_signal(signum)
        _, stderr = running.communicate(timeout=120)
    finally:
        if running.poll() is None:
            running.kill()
    assert running.returncode == 130 and "released" in stderr, stderr
    [made] = sandbox_leases(env) - before
    phase = env.objects.status("sandboxlease", made).get("phase")
    assert phase in ("Releasing", "Released"), phase


# -- issue 18, item 3: the runner's answer is the tenant's, so it is bounded and validated ----

EVIL_RUNNER = r"""
import base64, json, pathlib, sys
request = json.loads(sys.stdin.readline())
mode = pathlib.Path(sys.argv[1]).read_text().strip()
done = {"state": "Succeeded", "exitCode": 0, "startedAt": "2026-01-01T00:00:00Z",
        "finishedAt": "2026-01-01T00:00:01Z"}
if mode == "endless":  # output that never ends, whatever offset is asked for
    offset = int(request.get("stdoutOffset") or 0)
    window = {"data": base64.b64encode(b"A" * 65536).decode(), "nextOffset": offset + 65536,
              "more": True}
    quiet = {"data": "", "nextOffset": 0, "more": False}
    logs = {**done, "stdout": window, "stderr": quiet}
    print(json.dumps(logs if request["op"] == "logs" else done))
elif mode == "flood":  # an answer of 64 MiB
    chunk = "x" * 65535 + "\n"
    for _ in range(1024):
        sys.stdout.write(chunk)
    print(json.dumps(done))
elif mode == "bogus":  # values no runner gives, and fields no runner has
    print(json.dumps({"state": "Pwned", "exitCode": 0, "message": "m" * 100000,
                      "supervisor": 1, "secret": "from-the-sandbox"}))
"""


@pytest.fixture(scope="module")
def evil(env: Env) -> Iterator[tuple[str, Path]]:  # noqa: F811
    """A lease whose runner the tenant controls (as a tenant controls the files of its sandbox,
    the runner's state among them), and the file that says how it misbehaves."""
    script, mode = env.directory / "evil-runner", env.directory / "evil-mode"
    (env.directory / "evil-runner.py").write_text(EVIL_RUNNER)
    script.write_text(
        f"#!/bin/sh\nexec {sys.executable} {env.directory / 'evil-runner.py'} {mode}\n"
    )
    script.chmod(0o755)
    mode.write_text("endless")
    env.objects.apply(sandbox_pool("sb-evil", 1, runner={"path": str(script)}))
    wait_for(
        "sb-evil to be Healthy",
        lambda: env.objects.status("sandboxpool", "sb-evil").get("phase") == "Healthy",
    )
    lease = env.create(ALICE, pool="sb-evil", ttl="30m").body["id"]
    env.until(ALICE, lease, "Ready")
    yield lease, mode
    env.release(ALICE, lease)


def test_output_that_never_ends_is_cut_at_the_retention_cap(
    env: Env,  # noqa: F811
    evil: tuple[str, Path],
) -> None:
    """A runner that reports more output forever: wait mode answers once it holds CAP bytes
    (the runner's own retention), truncated, instead of reading for ever (it used to loop until
    gunicorn killed the worker)."""
    lease, mode = evil
    mode.write_text("endless")
    answer = post(env, lease, command=["true"], timeout="5s")
    assert answer.status == 200, answer.body
    assert answer.body["truncated"] is True and len(answer.body["stdout"]) == CAP


def test_an_oversized_answer_is_refused_unread(env: Env, evil: tuple[str, Path]) -> None:  # noqa: F811
    """A runner that answers with 64 MiB: the API stops reading at its bound and answers 503
    (it used to read all of it, and so would the operator, with a quadratic copy)."""
    lease, mode = evil
    mode.write_text("flood")
    answer = post(env, lease, command=["true"], detach=True)
    assert answer.status == 202 and answer.body["state"] == "Queued", answer.body
    read = env.api.call(
        "GET", f"/v1/sandbox-leases/{lease}/executions/{answer.body['id']}/logs", token=ALICE
    )
    assert (read.status, read.body["reason"]) == (503, "backend_error"), read.body
    assert "over" in read.body["detail"]


def test_an_answer_out_of_bounds_is_refused_and_never_echoed(
    env: Env,  # noqa: F811
    evil: tuple[str, Path],
) -> None:
    """A runner answering a state no runner has, a 100 kB message and fields of its own: the
    API refuses the answer (503) and echoes none of it, and the operator records none of it:
    the execution ends Unknown, saying why."""
    lease, mode = evil
    mode.write_text("bogus")
    answer = post(env, lease, command=["true"], detach=True, timeout="3s")
    assert answer.status == 202, answer.body
    path = f"/v1/sandbox-leases/{lease}/executions/{answer.body['id']}"
    read = env.api.call("GET", f"{path}/logs", token=ALICE)
    assert (read.status, read.body["reason"]) == (503, "backend_error"), read.body
    assert "out of bounds" in read.body["detail"]
    ended = until_state(env, lease, answer.body["id"], "Unknown")
    seen = json.dumps([answer.body, read.body, ended])
    assert "Pwned" not in seen and "from-the-sandbox" not in seen and "m" * 1000 not in seen
    assert "out of bounds" in ended["message"]


@contextlib.contextmanager
def api_without_exec(env: Env, lease: str) -> Iterator[Response]:  # noqa: F811
    """The API server's Role without pods/exec while the block runs: kube-apiserver refuses the
    API's calls to the runner, never the operator's. Yields the first refused wait-mode answer
    (a 503), seen once the narrowed Role is in force; the Role is whole again on exit."""
    role = json.loads(
        env.cluster.kubectl(
            "get", "role", "lessor-apiserver", "-n", env.placed.namespace, "-o", "json"
        ).stdout
    )
    narrowed = json.loads(json.dumps(role))
    for rule in narrowed["rules"]:
        rule["resources"] = [r for r in rule.get("resources", []) if r != "pods/exec"]
    env.placed.apply(narrowed)
    try:
        yield wait_for("the refusal", lambda: (
            answer if (answer := post(env, lease, command=["true"])).status == 503 else None
        ))  # fmt: skip
    finally:
        env.placed.apply({k: v for k, v in role.items() if k != "metadata"} | {
            "metadata": {"name": "lessor-apiserver"}})  # fmt: skip
        wait_for("exec back", lambda: post(env, lease, command=["true"]).status == 200)


def test_an_exec_failure_says_nothing_of_the_cluster(env: Env, lease: str) -> None:  # noqa: F811
    """When kube-apiserver refuses the exec (here the API server's Role loses pods/exec for a
    moment), the caller hears that the runner cannot be reached and the HTTP status, not
    kube-apiserver's text, which names the service account, its namespace and its rights."""
    with api_without_exec(env, lease) as answer:
        text = json.dumps(answer.body)
        for kube_words in ("forbidden", "serviceaccount", env.placed.namespace, "Handshake",
                           "pods/exec"):  # fmt: skip
            assert kube_words not in text, text
        assert "HTTP 403" in text


def test_only_the_pools_own_containers_can_be_used(env: Env) -> None:  # noqa: F811
    """A sandbox's pod may hold containers its pool's template does not offer (a sidecar a
    webhook injects, a service mesh's proxy with the mesh's credentials; here, one the
    administrator took out of the template after the pod was made): exec and attach take only
    the template's containers."""
    runner = env.objects.get("sandboxpool", "sb-run")["spec"]["runner"]  # type: ignore[index]
    spec = sandbox_pool("sb-sidecar", 1, runner=runner)
    main = spec["spec"]["template"]["spec"]["containers"][0]
    spec["spec"]["template"]["spec"]["containers"] = [main, {**main, "name": "helper"}]
    env.objects.apply(spec)
    wait_for(
        "sb-sidecar Healthy",
        lambda: env.objects.status("sandboxpool", "sb-sidecar").get("phase") == "Healthy",
    )
    lease = env.create(ALICE, pool="sb-sidecar", ttl="10m").body["id"]
    env.until(ALICE, lease, "Ready")
    try:
        spec["spec"]["template"]["spec"]["containers"] = [main]
        env.objects.apply(spec)

        def refused_helper() -> Response | None:
            answer = post(env, lease, command=["true"], container="helper")
            return answer if answer.status == 400 else None

        refused = wait_for("the template to apply", refused_helper)
        assert "helper" in refused.body["detail"]
        assert post(env, lease, command=["true"], container="main").status == 200
        client = Client(Target(endpoint=env.api.api.base, auth="token", token=ALICE))
        with pytest.raises(ApiError) as attach:
            StreamClient.open(client, f"/v1/sandbox-leases/{lease}/attach?container=helper")
        assert attach.value.status == 400 and "helper" in str(attach.value)
        path = f"/v1/sandbox-leases/{lease}/logs?container="
        logs = env.api.call("GET", path + "helper", token=ALICE)
        assert (logs.status, "helper" in logs.body["detail"]) == (400, True), logs.body
        assert env.api.call("GET", path + "main", token=ALICE).status == 200
    finally:
        env.release(ALICE, lease)


# -- issue 18, low: an execution's argv and cwd are kept out of its SandboxExecution ----------


def test_the_command_and_cwd_appear_in_no_execution_object(
    env: Env,  # noqa: F811
    lease: str,
    tmp_path: Path,
) -> None:
    """argv often carries credentials (`curl -H "Authorization: ..."`), and a custom object is
    shown whole: by `kubectl get -o yaml`, in audit logs at RequestResponse level, to anyone who
    may read SandboxExecutions. Executions run right, whether the API runs them (wait mode,
    detached) or the operator does (the API could not reach the runner), and neither their argv
    nor their cwd is in any SandboxExecution: they are in a Secret per execution, which is
    deleted once the execution has ended (owned by the lease while it lives: see
    test_a_leases_command_bytes_are_capped_and_what_it_stores_stays_under_the_cap)."""
    secret, folder = f"argv-{uuid.uuid4().hex}", f"cwd-{uuid.uuid4().hex}"
    cwd = tmp_path / folder
    cwd.mkdir()
    request = {"command": ["sh", "-c", f"echo {secret}; pwd"], "cwd": str(cwd)}
    expected = f"{secret}\n{cwd}\n"
    attached = post(env, lease, **request)
    assert (attached.status, attached.body["stdout"]) == (200, expected), attached.body
    detached = post(env, lease, **request, detach=True)
    assert detached.status == 202, detached.body
    with api_without_exec(env, lease):
        queued = post(env, lease, **request, detach=True)
        assert (queued.status, queued.body["state"]) == (202, "Queued"), queued.body
        until_state(env, lease, queued.body["id"], "Succeeded")  # the operator started it
    for name in (detached.body["id"], queued.body["id"]):
        until_state(env, lease, name, "Succeeded")
        assert logs(env, lease, name)["stdout"]["data"] == expected
    seen = env.cluster.kubectl("get", "sandboxexecutions", "-n", env.namespace, "-o", "json")
    assert secret not in seen.stdout and folder not in seen.stdout
    for name in (attached.body["id"], detached.body["id"], queued.body["id"]):
        wait_for(f"{name}-command to be deleted", lambda name=name: (
            command_secret(env, name) is None
        ))  # fmt: skip


def test_an_execution_whose_secret_changed_fails_and_runs_nothing(
    env: Env,  # noqa: F811
    lease: str,
    tmp_path: Path,
) -> None:
    """The operator starts an execution with the argv of its Secret only while that holds the
    command the execution was reserved with (its commandDigest). One changed meanwhile (here
    while the operator was down and the API could not reach the runner) fails, saying why, and
    what the Secret holds now never runs."""
    ran, other = tmp_path / "ran", tmp_path / "other"
    other.write_text(f"#!/bin/sh\ntouch {ran}\n")
    other.chmod(0o755)
    env.operator.kill(signal.SIGTERM)
    try:
        with api_without_exec(env, lease):
            queued = post(env, lease, command=["true"], detach=True)
        assert (queued.status, queued.body["state"]) == (202, "Queued"), queued.body
        secret = f"{queued.body['id']}-command"
        env.cluster.kubectl("delete", "secret", secret, "-n", env.namespace)
        env.cluster.kubectl("create", "secret", "generic", secret, "-n", env.namespace,
                            f"--from-literal=argv={other}")  # fmt: skip
    finally:
        env.operator.start()
    failed = until_state(env, lease, queued.body["id"], "Failed")
    assert "does not hold the command it was reserved with" in failed["message"], failed
    assert not ran.exists()


def refusal(env: Env, lease: str, target: str) -> tuple[int, str]:  # noqa: F811
    """Status and reason of an exec, a log read or an attach of `lease` that is refused."""
    if target == "attach":
        failed = refused(env, lease, "attach")
        return failed.status, failed.reason or ""
    if target == "exec":
        answer = post(env, lease, command=["true"])
    else:
        answer = env.api.call("GET", f"/v1/sandbox-leases/{lease}/logs", token=ALICE)
    return answer.status, answer.body.get("reason", "")


TARGETS = ("exec", "logs", "attach")


def test_a_lease_follows_its_sandboxs_replaced_pod_and_runs_executions_again(env: Env) -> None:  # noqa: F811
    """Issue 26: agent-sandbox replaces a deleted (or evicted) pod under the same name with a
    new uid. The lease records the new pod, so executions reach it, instead of going to the
    recorded one for good. Until it does (here: the operator is down), an exec, a log read and
    an attach are 409 `target_unresolved`, spending nothing, never the successor reached by its
    name; and a pool the operator has not reconciled is 503 `pool_unresolvable` to a create.
    Once the lease has ended, each is 409 `expired`."""
    lease = env.create(ALICE, pool="sb-run", ttl="30m").body["id"]
    env.until(ALICE, lease, "Ready")
    try:
        before = env.objects.status("sandboxlease", lease)["pod"]
        assert post(env, lease, command=["true"]).status == 200
        executions = len(env.objects.list("sandboxexecutions"))
        env.operator.kill(signal.SIGKILL)
        try:
            # Not --wait: kubectl would wait for the name, which the replacement takes at once.
            env.placed.cluster.kubectl(
                "delete", "pod", before["name"], "-n", env.placed.namespace, "--wait=false"
            )
            wait_for(
                "agent-sandbox's replacement",
                lambda: (
                    (pod := env.placed.get("pod", before["name"])) is not None
                    and pod["metadata"]["uid"] != before["uid"]
                ),
            )
            for target in TARGETS:
                assert refusal(env, lease, target) == (409, "target_unresolved"), target
            assert len(env.objects.list("sandboxexecutions")) == executions, "nothing spent"
            env.objects.apply(sandbox_pool("sb-unreconciled", 0))
            unserved = env.api.call(
                "POST", "/v1/sandbox-leases", token=ALICE, body={"pool": "sb-unreconciled"}
            )
            assert (unserved.status, unserved.body["reason"]) == (503, "pool_unresolvable")
            assert "not reconciled" in unserved.body["detail"]
        finally:
            env.operator.start()
            env.cluster.kubectl(
                "delete",
                "sandboxpool",
                "sb-unreconciled",
                "-n",
                env.namespace,
                "--wait=false",
                "--ignore-not-found",
            )

        def replaced() -> dict[str, Any] | None:
            pod: dict[str, Any] | None = env.objects.status("sandboxlease", lease).get("pod")
            return pod if pod and pod["uid"] != before["uid"] else None

        after = wait_for("the lease to record the new pod", replaced)
        assert after["name"] == before["name"]
        live = env.placed.get("pod", after["name"])
        assert live is not None and live["metadata"]["uid"] == after["uid"]
        again = post(env, lease, command=["sh", "-c", "echo again"])
        assert (again.status, again.body.get("stdout")) == (200, "again\n"), again.body
        assert "TargetChanged" in env.objects.events(lease)
    finally:
        env.release(ALICE, lease)
    env.until(ALICE, lease, "Released", "Expired", "Quarantined")
    for target in TARGETS:
        assert refusal(env, lease, target) == (409, "expired"), target


# -- issue 26: a create whose answer the network lost (spec 4.3, idempotency rules 3 and 4) ---


def sandbox_leases(env: Env) -> set[str]:  # noqa: F811
    return {item["metadata"]["name"] for item in env.objects.list("sandboxleases")}


@pytest.mark.parametrize(
    ("mode", "posts"),
    [("body", 1), ("headers", 2)],
    ids=["headers-arrived-body-lost", "nothing-arrived"],
)
def test_lessor_run_recovers_a_lost_answer_with_one_lease(
    env: Env,  # noqa: F811
    tmp_path: Path,
    mode: Literal["body", "headers"],
    posts: int,
) -> None:
    """Headers arrived, body lost: the lease is read from Location and the POST is not sent
    again. Nothing arrived: the same keyed POST is sent again, and the key makes it the same
    lease. Either way the command runs in one lease, and that lease is released."""
    upstream = urlsplit(env.api.api.base)
    proxy = AnswerCuttingProxy(
        (upstream.hostname or "", upstream.port or 80), mode, "POST", "/v1/sandbox-leases"
    )
    before = sandbox_leases(env)
    try:
        environment = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"),
                       "LESSOR_ENDPOINT": proxy.base, "LESSOR_TOKEN": ALICE}  # fmt: skip
        ran = subprocess.run(
            [sys.executable, "-m", "lessor.cli.main", "run", "sb-run", "--", "echo", "once"],
            env=environment, capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        assert (ran.returncode, ran.stdout) == (0, "once\n"), ran.stderr
        assert "Traceback" not in ran.stderr
        assert (proxy.cut, proxy.seen) == (True, posts)
    finally:
        proxy.close()
    [made] = sandbox_leases(env) - before
    assert env.objects.status("sandboxlease", made).get("phase") in ("Releasing", "Released")


def test_a_lease_runs_at_most_its_pools_max_executions(env: Env) -> None:  # noqa: F811
    """Spec 8's per-lifetime execution bound, set per pool (issue 26) and fixed in the lease
    when it is granted: a later change to the pool does not move it."""
    source = env.objects.get("sandboxpool", "sb-run")
    assert source is not None
    env.objects.apply(sandbox_pool("sb-two", 1, runner=source["spec"]["runner"], maxExecutions=2))
    wait_for(
        "sb-two to be Healthy",
        lambda: env.objects.status("sandboxpool", "sb-two").get("phase") == "Healthy",
        timeout=120,
    )
    lease = env.create(ALICE, pool="sb-two").body["id"]
    env.until(ALICE, lease, "Ready")
    try:
        env.objects.apply(sandbox_pool("sb-two", 1, runner=source["spec"]["runner"]))
        assert [post(env, lease, command=["true"]).status for _ in range(2)] == [200, 200]
        third = post(env, lease, command=["true"])
        assert (third.status, third.body["reason"]) == (409, "execution_limit_exhausted")
        assert "2 executions" in third.body["detail"]
        retried = post(env, lease, command=["true"], idempotencyKey="again")
        assert retried.status == 409, "a refusal spends nothing and stays a refusal"
    finally:
        env.release(ALICE, lease)
        env.cluster.kubectl("delete", "sandboxpool", "sb-two", "-n", env.namespace)


def test_the_execution_timeout_defaults_to_a_minute_caps_at_an_hour_and_ends_with_the_lease(
    env: Env,  # noqa: F811
    lease: str,
) -> None:
    """Spec 4.5 (issue 26, untested rules): 60 s by default; at most one hour; never past the
    lease's expiry (the module's lease has 30 minutes; carol's grant sets no TTL cap, so hers
    can outlast the hour)."""

    def timeout_of(lease: str, token: str, **body: Any) -> datetime.timedelta:
        made = post(env, lease, token=token, command=["true"], detach=True, **body)
        assert made.status == 202, made.body
        stored = env.objects.get("sandboxexecution", made.body["id"])
        assert stored is not None
        return parse_duration(stored["spec"]["timeout"])

    assert timeout_of(lease, ALICE) == datetime.timedelta(seconds=60)
    assert timeout_of(lease, ALICE, timeout="90s") == datetime.timedelta(seconds=90)
    expires = datetime.datetime.fromisoformat(
        env.objects.status("sandboxlease", lease)["expiresAt"]
    )
    left = expires - datetime.datetime.now(datetime.UTC)
    clamped = timeout_of(lease, ALICE, timeout="59m")
    assert left - datetime.timedelta(minutes=1) < clamped <= left, (clamped, left)

    long = env.create(CAROL, pool="sb-run", ttl="3h").body["id"]
    try:
        env.until(CAROL, long, "Ready")
        assert timeout_of(long, CAROL, timeout="2h") == datetime.timedelta(hours=1)
    finally:
        env.release(CAROL, long)


def test_a_target_whose_provenance_is_incomplete_is_refused(env: Env) -> None:  # noqa: F811
    """Spec 7.2's `provenance_incomplete` (issue 26): the record that ties a Ready lease's pod to
    it (claim, sandbox and pod, each with its uid) lost its sandbox, as a hand edit or a bug
    would do (written while the operator is down, so nothing rewrites it meanwhile): the target
    cannot be verified, so nothing runs in it, for logs and executions alike."""
    lease = env.create(ALICE, pool="sb-run", ttl="10m").body["id"]
    try:
        env.until(ALICE, lease, "Ready")
        env.operator.kill(signal.SIGKILL)
        sandbox = env.objects.status("sandboxlease", lease)["sandbox"]
        env.cluster.kubectl(
            "patch", "sandboxlease", lease, "-n", env.namespace, "--subresource=status",
            "--type=json", "-p", json.dumps([{"op": "remove", "path": "/status/sandbox"}]),
        )  # fmt: skip
        refused = post(env, lease, command=["true"])
        assert (refused.status, refused.body["reason"]) == (503, "provenance_incomplete")
        logs = env.api.call("GET", f"/v1/sandbox-leases/{lease}/logs", token=ALICE)
        assert (logs.status, logs.body["reason"]) == (503, "provenance_incomplete")
        env.cluster.kubectl(
            "patch", "sandboxlease", lease, "-n", env.namespace, "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": {"sandbox": sandbox}}),
        )  # fmt: skip
        assert post(env, lease, command=["true"]).status == 200, "restored, it runs again"
    finally:
        if env.operator.process is not None and env.operator.process.poll() is not None:
            env.operator.start()
        env.release(ALICE, lease)


# -- issue 40 (review N2): what a tenant stores through executions is bounded ------------------


@dataclass(frozen=True)
class Stored:
    """What one lease holds in the cluster because of its executions, as kube-apiserver has it."""

    reserved: int  # spec.executionsReserved: the budget spent
    executions: frozenset[str]
    secrets: dict[str, int]  # each command Secret's name, and the bytes of command and cwd it holds


def stored(env: Env, lease: str) -> Stored:  # noqa: F811
    obj = env.objects.get("sandboxlease", lease)
    assert obj is not None
    executions = frozenset(
        item["metadata"]["name"]
        for item in env.objects.list("sandboxexecutions")
        if item["spec"]["lease"]["name"] == lease
    )
    listed = env.cluster.kubectl("get", "secrets", "-n", env.namespace, "-o", "json",
                                 "-l", f"lessor.dev/sandbox-lease={lease}")  # fmt: skip
    secrets = {
        item["metadata"]["name"]: sum(len(base64.b64decode(v)) for v in item["data"].values())
        for item in json.loads(listed.stdout)["items"]
    }
    return Stored(obj["spec"].get("executionsReserved", 0), executions, secrets)


def limited_api(env: Env, log: str, *flags: str) -> tuple[subprocess.Popen[bytes], ScannedApi]:  # noqa: F811
    """An API server of its own with `flags`, as the API server's ServiceAccount; its answers
    are scanned for secrets with the module's."""
    process, api = start_api(
        env.cluster, env.namespace, env.directory / log, (*EXTERNAL, *flags),
        env.directory / "lessor-apiserver.kubeconfig",
    )  # fmt: skip
    return process, ScannedApi(api, env.api.seen)


def test_a_command_over_16_kib_is_refused_and_nothing_is_stored(env: Env, lease: str) -> None:  # noqa: F811
    """Each command is kept in a Secret while it runs, so what one request may store is small:
    16 KiB of arguments in all, however they are split (large input belongs in a file in the
    sandbox). A longer command is a 400 that says so, and reserves nothing: no budget spent, no
    Secret, no execution."""
    before = stored(env, lease)
    for command in (["echo", "a" * 17 * 1024], ["echo", *["b" * 1024] * 17]):
        refused = post(env, lease, command=command)
        assert (refused.status, refused.body.get("code")) == (400, "invalid_request"), (
            refused.status, str(refused.body)[:300],
        )  # fmt: skip
        assert "16 KiB" in refused.body["detail"] and "file" in refused.body["detail"]
    after = stored(env, lease)
    assert after.reserved == before.reserved, "a refusal spends nothing"
    assert after.executions == before.executions
    assert set(after.secrets) <= set(before.secrets), "and stores nothing"
    fits = post(env, lease, command=["true", "c" * (16 * 1024 - len("true"))])
    assert (fits.status, fits.body["state"]) == (200, "Succeeded"), fits.body


def test_execution_creates_are_rate_limited_per_principal(env: Env, lease: str) -> None:  # noqa: F811
    """A caller in a loop spends its bucket, then gets 429 `rate_limited` with Retry-After, and
    that refusal reserves nothing; a keyed retry of an execution that exists is still answered
    (it writes nothing). A token every 1,000 s: none comes back while the test runs."""
    process, api = limited_api(
        env, "executions-limited.log",
        "--execution-admission-rate=0.001", "--execution-admission-burst=2",
    )  # fmt: skip

    def create(key: str) -> Response:
        body = {"command": ["true"], "detach": True, "idempotencyKey": key}
        return api.call("POST", f"/v1/sandbox-leases/{lease}/executions", token=ALICE, body=body)

    try:
        first = str(uuid.uuid4())
        made = [create(first), create(str(uuid.uuid4()))]
        assert [m.status for m in made] == [202, 202], [m.body for m in made]
        before = stored(env, lease)
        refused = create(str(uuid.uuid4()))
        assert (refused.status, refused.body["code"]) == (429, "rate_limited"), refused.body
        assert int(refused.headers["Retry-After"]) >= 1
        assert stored(env, lease).reserved == before.reserved, "a refusal reserves nothing"
        again = create(first)
        assert (again.status, again.body["id"]) == (202, made[0].body["id"]), again.body
        assert metric(api.api, "lessor_execution_admission_rate_limited_total") == 1
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def test_wait_mode_beyond_the_callers_share_of_waits_is_answered_at_once(
    env: Env,  # noqa: F811
    lease: str,
) -> None:
    """Review N6: a wait-mode execution holds its request while its command runs, set aside
    from the worker's bound of requests in flight, so it is one of the caller's waits
    (--max-waits-per-identity, 1 here): while one waits, the next wait-mode request is
    answered at once with 202, as a detached one, and runs all the same (poll it)."""
    process, api = limited_api(env, "waits-limited.log", "--max-waits-per-identity=1")
    path = f"/v1/sandbox-leases/{lease}/executions"

    def create(command: list[str], key: str = "") -> Response:
        body = {"command": command, "idempotencyKey": key or str(uuid.uuid4())}
        return api.call("POST", path, token=ALICE, body=body)

    key = str(uuid.uuid4())
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(create, ["sleep", "60"], key)
            running = wait_for("the first one waiting for its command", lambda: next(
                (e for e in env.objects.list("sandboxexecutions")
                 if e["spec"]["idempotencyKey"] == key
                 and e.get("status", {}).get("state") == "Running"),
                None,
            ))  # fmt: skip
            answered = create(["true"])
            assert answered.status == 202, answered.body
            assert answered.body["state"] in ("Queued", "Running", "Succeeded"), answered.body
            assert metric(api.api, 'lessor_waits_declined_total{bound="identity",kind="execution"}')
            assert until_state(env, lease, answered.body["id"], "Succeeded")["exitCode"] == 0
            cancel = f"{path}/{running['metadata']['name']}"
            assert api.call("DELETE", cancel, token=ALICE).status == 200
            assert waiting.result(timeout=120).body["state"] == "Cancelled"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def test_a_lease_runs_at_most_16_executions_at_once(env: Env, lease: str) -> None:  # noqa: F811
    """Review N6: the operator asks the runner about every running execution every few
    seconds through pods/exec, so one lease runs at most 16 at once; the 17th is refused with
    429 `concurrency_limit` (no Retry-After: it clears when one ends), and once one ends
    another is admitted."""
    process, api = limited_api(
        env, "running-limited.log",
        "--execution-admission-rate=1000", "--execution-admission-burst=1000",
    )  # fmt: skip
    path = f"/v1/sandbox-leases/{lease}/executions"

    def create() -> Response:
        body = {"command": ["sleep", "600"], "detach": True, "idempotencyKey": str(uuid.uuid4())}
        return api.call("POST", path, token=ALICE, body=body)

    made: list[str] = []
    try:
        while len(made) < 16:
            answer = create()
            assert answer.status == 202, answer.body
            made.append(answer.body["id"])
        refused = create()
        assert (refused.status, refused.body["code"]) == (429, "concurrency_limit"), refused.body
        assert "Retry-After" not in refused.headers and "16" in refused.body["detail"]
        assert api.call("DELETE", f"{path}/{made.pop()}", token=ALICE).status == 200
        admitted = wait_for("a 17th admitted once one ended", lambda: (
            answer if (answer := create()).status == 202 else None
        ))  # fmt: skip
        made.append(admitted.body["id"])
    finally:
        for name in made:
            api.call("DELETE", f"{path}/{name}", token=ALICE)
        for name in made:
            until_state(env, lease, name, "Cancelled", "Failed", "Succeeded")
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def test_a_leases_command_bytes_are_capped_and_what_it_stores_stays_under_the_cap(
    env: Env,  # noqa: F811
) -> None:
    """The etcd fill of review N2, scaled down: a tenant sends commands as long as allowed,
    detached and still running (so that every Secret stays), until its lease has stored the
    cap of command bytes (here 64 KiB): the next one is 409 `execution_limit_exhausted`, and the
    Secrets the cluster holds for the lease, listed from kube-apiserver, stay under the cap.
    The cap counts bytes, not executions: a short command still fits."""
    cap = 64 * 1024
    process, api = limited_api(env, "bytes-limited.log", f"--max-command-bytes-per-lease={cap}")
    filler = env.create(ALICE, pool="sb-run", ttl="10m").body["id"]
    command = ["sh", "-c", "sleep 300", "p" * 15000]
    size = len("\0".join(command).encode())

    def create(argv: list[str]) -> Response:
        body = {"command": argv, "detach": True, "idempotencyKey": str(uuid.uuid4())}
        return api.call("POST", f"/v1/sandbox-leases/{filler}/executions", token=ALICE, body=body)

    running: list[str] = []
    try:
        env.until(ALICE, filler, "Ready")
        while len(running) <= cap // size and (answer := create(command)).status == 202:
            running.append(answer.body["id"])
        assert len(running) == cap // size, answer.body
        assert (answer.status, answer.body["reason"]) == (409, "execution_limit_exhausted")
        assert str(cap) in answer.body["detail"] and "file" in answer.body["detail"]
        held = stored(env, filler)
        assert sum(held.secrets.values()) <= cap, held
        assert sorted(held.secrets) == sorted(f"{name}-command" for name in running)
        owner = env.objects.get("sandboxlease", filler)["metadata"]["uid"]  # type: ignore[index]
        for name in held.secrets:
            secret = env.objects.get("secret", name)
            assert secret is not None
            assert [o["uid"] for o in secret["metadata"]["ownerReferences"]] == [owner]
        assert create(["true"]).status == 202, "a command that still fits is accepted"
    finally:
        for name in running:
            api.call("DELETE", f"/v1/sandbox-leases/{filler}/executions/{name}", token=ALICE)
        env.release(ALICE, filler)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def command_secret(env: Env, execution: str) -> dict[str, Any] | None:  # noqa: F811
    return env.objects.get("secret", f"{execution}-command")


def test_a_finished_executions_command_secret_is_deleted(env: Env, lease: str) -> None:  # noqa: F811
    """An execution's command is needed only until it has run: once it is terminal (here it
    succeeded, and it was cancelled) the operator deletes its Secret, and a keyed retry is
    still answered with the execution and its output."""
    key = str(uuid.uuid4())
    done = post(env, lease, command=["sh", "-c", "echo done"], idempotencyKey=key)
    assert (done.status, done.body["state"]) == (200, "Succeeded"), done.body
    cancelled = post(env, lease, command=["sleep", "300"], detach=True).body["id"]
    until_state(env, lease, cancelled, "Running")
    path = f"/v1/sandbox-leases/{lease}/executions/{cancelled}"
    assert env.api.call("DELETE", path, token=ALICE).body["state"] == "Cancelled"
    for name in (done.body["id"], cancelled):
        wait_for(f"{name}-command to be deleted", lambda name=name: (
            command_secret(env, name) is None
        ), timeout=120)  # fmt: skip
    retry = post(env, lease, command=["sh", "-c", "echo done"], idempotencyKey=key)
    assert (retry.status, retry.body["id"], retry.body["stdout"]) == (
        200, done.body["id"], "done\n",
    ), retry.body  # fmt: skip


def test_an_operator_killed_right_after_deleting_a_command_secret_finishes_the_execution(
    env: Env,  # noqa: F811
    lease: str,
    tmp_path: Path,
) -> None:
    """The operator deletes the Secret before it records the terminal state. SIGKILLed right
    after the delete, the next operator finds the execution not yet recorded as ended and
    without its Secret: it asks the runner, records the real outcome (not "its command Secret
    does not exist"), and the command never runs again."""
    marker, record = tmp_path / "ran", tmp_path / "crash.jsonl"
    env.operator.kill(signal.SIGTERM)
    env.operator.start(CrashPoint("after", 1, "secrets", record))
    try:
        name = post(env, lease, command=["sh", "-c", f"echo once >> {marker}"],
                    detach=True).body["id"]  # fmt: skip
        crashed = env.operator.process
        assert crashed is not None
        wait_for("the operator to die after deleting a command Secret",
                 lambda: crashed.poll() is not None, timeout=120)  # fmt: skip
        assert json.loads(record.read_text().splitlines()[0])["write"] == "DELETE secrets"
    finally:
        if env.operator.process is not None and env.operator.process.poll() is None:
            env.operator.kill(signal.SIGKILL)
        env.operator.start()
    ended = until_state(env, lease, name, "Succeeded", "Failed", "Unknown")
    assert ended["state"] == "Succeeded", ended
    assert command_secret(env, name) is None
    reconciled_again(env, env.operator, "sandboxexecution", name)
    assert marker.read_text() == "once\n", "never run a second time"
