"""The `lessor` command, run as a user runs it (the installed console script, a subprocess)
against the real stack: the local control plane, the operator, and the API under gunicorn;
static tokens, and an Ed25519 key held by a real ssh-agent."""

from __future__ import annotations

import itertools
import json
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from lessor import __version__
from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.kubectl import Cluster, wait_established
from tests.integration.answer_cutting_proxy import AnswerCuttingProxy
from tests.integration.identity_provider import CLIENT_ID, Provider
from tests.integration.operator_harness import Operator, destroy_local_clusters, wait_for
from tests.integration.test_apiserver import Api, start_api
from tests.ssh_agent_process import RunningAgent, ssh_agent

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("ssh-agent") is None, reason="needs OpenSSH"),
]
CRDS = Path(__file__).resolve().parents[2] / "crds"
ALICE = "alice-" + secrets.token_hex(8)
INSTALLED = Path(sys.executable).parent / "lessor"
LESSOR = [str(INSTALLED)] if INSTALLED.exists() else [sys.executable, "-m", "lessor.cli.main"]


@dataclass
class Stack:
    cluster: Cluster
    namespace: str
    api: Api
    agent_socket: str


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningAgent]:
    with ssh_agent(tmp_path_factory.mktemp("agent"), "carol@laptop") as running:
        yield running


@pytest.fixture(scope="module")
def stack(
    control_plane: Cluster, agent: RunningAgent, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    if not isinstance(control_plane, LocalControlPlane):
        # Its operator serves `local` pools on this machine; in kind every e2e scenario drives
        # the CLI against the installed API (e2e/test_scenarios.py, e2e/test_sandboxes.py).
        pytest.skip("needs the local backend (in kind, e2e/ drives the CLI)")
    directory = tmp_path_factory.mktemp("cli")
    namespace = f"cli-{uuid.uuid4().hex[:8]}"
    kubectl = control_plane.kubectl
    kubectl("apply", "-f", str(CRDS))
    wait_established(control_plane)
    kubectl("create", "namespace", namespace)
    kubectl(
        "create", "secret", "generic", "tokens", "-n", namespace, f"--from-literal=alice={ALICE}"
    )
    policy = {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "AccessPolicy",
        "metadata": {"name": "cli", "namespace": namespace},
        "spec": {
            "auth": {
                "staticTokens": [
                    {"secretRef": {"name": "tokens", "key": "alice"}, "claims": {"sub": "alice"}}
                ],
                "sshKeys": [{"publicKey": agent.public_key, "claims": {"sub": "carol"}}],
            },
            "identity": "{sub}",
            "rules": [{"pools": ["cli-*"], "maxConcurrentLeases": 4, "maxExtensions": 2}],
        },
    }
    kubectl("apply", "-f", "-", input=json.dumps(policy))
    for name, warm in (("cli-warm", 1), ("cli-none", 0)):
        pool = {
            "apiVersion": "lessor.dev/v1alpha1",
            "kind": "ClusterPool",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"warmTarget": warm, "ttl": "30m", "backend": {"type": "local"}},
        }
        kubectl("apply", "-f", "-", input=json.dumps(pool))
    operator = Operator(
        control_plane.kubeconfig, namespace, directory / "instances", directory / "operator.log"
    ).start()
    process, api = start_api(control_plane, namespace, directory / "api.log")
    try:
        yield Stack(control_plane, namespace, api, agent.socket)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        operator.kill(signal.SIGTERM)
        destroy_local_clusters(directory / "instances")
        kubectl("delete", "namespace", namespace, "--wait=false")


@dataclass
class User:
    """One person's machine: a home directory, a config directory, an environment."""

    home: Path
    stack: Stack

    @property
    def env(self) -> dict[str, str]:
        inherited = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("LESSOR_") and k != "SSH_AUTH_SOCK"
        }
        return {
            **inherited,
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "SSH_AUTH_SOCK": self.stack.agent_socket,
        }

    def run(self, *args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*LESSOR, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env={**self.env, **env},
            timeout=300,
            check=False,
        )

    def json(self, *args: str) -> Any:
        result = self.run(*args, "-o", "json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def target(self, auth: str) -> None:
        extra = ["--token-stdin"] if auth == "token" else []
        result = self.run(
            "config",
            "set",
            auth,
            "--endpoint",
            self.stack.api.base,
            "--auth",
            auth,
            *extra,
            stdin=ALICE + "\n",
        )
        assert result.returncode == 0, result.stderr
        assert self.run("config", "use", auth).returncode == 0


@pytest.fixture
def user(stack: Stack, tmp_path: Path) -> User:
    return User(tmp_path, stack)


def phase(stack: Stack, lease_id: str) -> str:
    body = stack.api.call("GET", f"/v1/leases/{lease_id}", token=ALICE).body
    return str(body.get("phase"))


def test_token_login_then_lease_ensure_extend_release_and_logout(user: User) -> None:
    user.target("token")
    login = user.run("login")
    assert login.returncode == 0, login.stderr
    assert f"logged in to {user.stack.api.base} as alice (token)" in login.stdout
    sessions = user.home / ".config" / "lessor" / "sessions.json"
    assert stat.S_IMODE(sessions.stat().st_mode) == 0o600
    session_token = json.loads(sessions.read_text())[user.stack.api.base]["token"]
    assert ALICE not in sessions.read_text()

    first = user.json(
        "lease",
        "cli-warm",
        "--name",
        "pr-1",
        "--ensure",
        "--ttl",
        "20m",
        "--metadata-json",
        '{"job": 1}',
    )
    assert (first["phase"], first["reused"], first["kind"]) == ("Bound", False, "Cluster")
    assert "kubeconfig" in first["capabilities"]
    kubeconfig = Path(first["kubeconfig"])
    assert kubeconfig == user.home / ".kube" / f"lessor-{first['id']}"
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
    namespaces = subprocess.run(
        [str(ensure_binaries() / "kubectl"), "--kubeconfig", str(kubeconfig), "get", "ns"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "kube-system" in namespaces.stdout, namespaces.stderr

    again = user.json(
        "lease",
        "cli-warm",
        "--name",
        "pr-1",
        "--ensure",
        "--metadata-json",
        '{"job": 2}',
        "--kubeconfig",
        str(user.home / "again.yaml"),
    )
    assert (again["id"], again["reused"]) == (first["id"], True)
    kept = user.stack.api.call("GET", f"/v1/leases/{first['id']}", token=ALICE).body
    assert kept["metadata"] == {"job": 1}, "a reused lease keeps its original metadata"
    duplicate = user.run("lease", "cli-warm", "--name", "pr-1", "--no-wait")
    assert duplicate.returncode == 6 and "alias_active" in duplicate.stderr

    status = user.json("status")
    assert status["session"]["identity"] == "alice"
    assert [(row["id"], row["alias"]) for row in status["leases"]] == [(first["id"], "pr-1")]
    shown = user.run("status").stdout
    assert "alice via token" in shown and first["id"] in shown and "cli-warm" in shown

    extended = user.json("extend", first["id"], "--ttl", "10m")
    assert extended["expires_at"] > first["expires_at"]
    released = user.run("release", first["id"])
    assert released.returncode == 0, released.stderr
    wait_for("Released", lambda: phase(user.stack, first["id"]) == "Released")
    assert user.json("status")["leases"] == []

    logout = user.run("logout")
    assert logout.returncode == 0 and "logged out" in logout.stdout
    assert user.stack.api.base not in json.loads(sessions.read_text())
    # Spec 4.7: the stored credentials go too.
    assert "removed the stored token of target token" in logout.stdout
    assert ALICE not in (user.home / ".config" / "lessor" / "config.json").read_text()
    assert "no token" in user.run("lease", "cli-warm").stderr
    # Every worker refuses it once its two-second "not revoked" cache is gone (docs/api.md).
    wait_for(
        "the session revoked on the server",
        lambda: user.stack.api.call("GET", "/v1/leases", token=session_token).status == 401,
    )


def test_ssh_agent_signs_requests_and_the_login(user: User) -> None:
    user.target("ssh")
    assert user.json("status")["leases"] == [], "each request signed by the agent's key"
    login = user.run("login")
    assert login.returncode == 0, login.stderr
    assert "as carol (ssh)" in login.stdout
    created = user.json("lease", "cli-none", "--no-wait")
    assert created["phase"] == "Pending" and created["queue_position"] >= 1
    assert not (user.home / ".kube").exists(), "--no-wait writes no kubeconfig"
    assert user.run("release", created["id"]).returncode == 0


def test_progress_in_place_on_a_terminal_and_plain_lines_elsewhere(user: User) -> None:
    user.target("token")
    primary, secondary = os.openpty()
    started = subprocess.Popen(
        [*LESSOR, "lease", "cli-warm"],
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        # A terminal that takes escape codes, whatever runs the tests (TERM=dumb, NO_COLOR).
        env={k: v for k, v in {**user.env, "TERM": "xterm"}.items() if k != "NO_COLOR"},
        close_fds=True,
    )
    os.close(secondary)
    seen = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # EIO: the terminal's last writer exited
            break
        if not chunk:
            break
        seen += chunk
    assert started.wait(timeout=60) == 0, seen
    os.close(primary)
    text = seen.decode(errors="replace")
    assert re.search(r"\r\x1b\[2K. lease [a-z0-9][a-z0-9-]*: (Pending|Bound)", text), text
    leased = re.search(r"lease\s+([a-z0-9][a-z0-9-]*)", text)
    assert leased is not None and "kubeconfig" in text

    # A CI log gets plain lines on stderr, one per change of the phase; stdout only the result.
    piped = user.run("lease", "cli-warm")
    assert piped.returncode == 0, piped.stderr
    assert "\r" not in piped.stdout + piped.stderr and "\x1b" not in piped.stdout + piped.stderr
    assert piped.stdout.splitlines()[0].startswith("lease ")
    lines = piped.stderr.splitlines()
    assert lines and all(re.fullmatch(r"lessor: lease \S+: \w+.* \(\d+s\)", x) for x in lines)
    said = [(line.rsplit(" (", 1)[0], int(line.rsplit("(", 1)[1][:-2])) for line in lines]
    for (before, at), (text, now) in itertools.pairwise(said):
        # A line is repeated only as the heartbeat (30 s): never once per poll.
        assert text != before or now - at >= 29, lines
    for lease_id in (leased.group(1), piped.stdout.split()[1]):
        assert user.run("release", lease_id).returncode == 0


def test_giving_up_releases_the_lease_it_created(user: User) -> None:
    user.target("token")
    timed_out = user.run("lease", "cli-none", "--wait-timeout", "2s")
    assert timed_out.returncode == 5, timed_out.stderr
    found = re.search(r"released lease ([a-z0-9][a-z0-9-]*)", timed_out.stderr)
    assert found and "not Bound within 2s" in timed_out.stderr
    wait_for("Released", lambda: phase(user.stack, found.group(1)) == "Released")

    # Interrupted while it waits: on a terminal it shows the lease it waits for, which is how
    # the test knows the lease was made (and the CLI knows its id) before pressing Ctrl-C.
    primary, secondary = os.openpty()
    waiting = subprocess.Popen(
        [*LESSOR, "lease", "cli-none"],
        stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary, env=user.env,
    )  # fmt: skip
    os.close(secondary)
    shown = b""
    while not re.search(rb"lease [a-z0-9][a-z0-9-]*: Pending", shown):
        chunk = os.read(primary, 4096)  # the hang guard is the test's timeout
        assert chunk, shown
        shown += chunk
    waiting.send_signal(signal.SIGINT)
    while chunk := _read_or_eof(primary):
        shown += chunk
    os.close(primary)
    assert waiting.wait(timeout=60) == 130, shown
    interrupted = re.search(r"interrupted; released lease ([a-z0-9][a-z0-9-]*)", shown.decode())
    assert interrupted, shown
    wait_for("Released", lambda: phase(user.stack, interrupted.group(1)) == "Released")


def _read_or_eof(terminal: int) -> bytes:
    try:
        return os.read(terminal, 4096)
    except OSError:  # EIO: the terminal's last writer exited
        return b""


def test_server_refusals_are_one_line_with_their_exit_code(user: User) -> None:
    missing = user.run(
        "lease", "no-such-pool", "--endpoint", user.stack.api.base, LESSOR_TOKEN=ALICE
    )
    assert missing.returncode == 4 and missing.stderr.startswith("lessor: not found")
    refused = user.run("lease", "cli-warm", "--endpoint", user.stack.api.base, LESSOR_TOKEN="wrong")
    assert refused.returncode == 3
    assert refused.stderr.strip() == "lessor: unauthorized: invalid credentials (unauthenticated)"
    oidc = user.run(
        "config",
        "set",
        "sso",
        "--endpoint",
        user.stack.api.base,
        "--auth",
        "oidc",
        "--oidc-issuer",
        "https://login.example.com",
        "--oidc-client-id",
        "lessor",
    )
    assert oidc.returncode == 0
    needs_login = user.run("release", "lease-x", "--target", "sso")
    assert needs_login.returncode == 3 and "run `lessor login`" in needs_login.stderr


@pytest.fixture(scope="module")
def provider(stack: Stack) -> Iterator[Provider]:
    """An OpenID provider the stack trusts, with the CLI's client id as the audience."""
    state = Provider()
    server = state.serve()
    policy = {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "AccessPolicy",
        "metadata": {"name": "sso", "namespace": stack.namespace},
        "spec": {
            "auth": {
                "oidc": {
                    "issuer": state.url,
                    "audience": [CLIENT_ID],
                    "jwksUrl": f"{state.url}/jwks",
                }
            },
            "identity": "{sub}",
            "rules": [{"pools": ["cli-*"]}],
        },
    }
    stack.cluster.kubectl("apply", "-f", "-", input=json.dumps(policy))
    wait_for(
        "the API server trusting the provider",
        lambda: stack.api.call("GET", "/v1/pools", token=state.id_token()).status == 200,
        timeout=120,
    )
    yield state
    server.shutdown()


def _oidc_target(user: User, provider: Provider) -> None:
    result = user.run(
        "config", "set", "sso", "--endpoint", user.stack.api.base, "--auth", "oidc",
        "--oidc-issuer", provider.url, "--oidc-client-id", CLIENT_ID,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert user.run("config", "use", "sso").returncode == 0


def test_oidc_browser_login_with_pkce_and_a_loopback_redirect(
    user: User, provider: Provider, tmp_path: Path
) -> None:
    _oidc_target(user, provider)
    # The "browser" follows the provider's redirect to the CLI's loopback listener, as one would.
    browser = tmp_path / "browser.py"
    browser.write_text("import sys, urllib.request\nurllib.request.urlopen(sys.argv[1]).read()\n")
    login = user.run("login", BROWSER=f"{sys.executable} {browser} %s")
    assert login.returncode == 0, login.stderr
    assert "as dana (oidc)" in login.stdout
    assert provider.exchanged[-1] == "authorization_code"
    assert user.json("status")["session"]["identity"] == "dana"
    lease = user.json("lease", "cli-none", "--no-wait")
    assert user.run("release", lease["id"]).returncode == 0


def test_oidc_device_login_for_headless_hosts(user: User, provider: Provider) -> None:
    _oidc_target(user, provider)
    login = subprocess.Popen(
        [*LESSOR, "login", "--device"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=user.env,
    )  # fmt: skip
    assert login.stderr is not None
    line = login.stderr.readline()
    found = re.search(r"visit (\S+) and enter the code (\w+)", line)
    assert found, line
    with urllib.request.urlopen(found.group(1), timeout=10) as approved:  # the person approves
        assert json.loads(approved.read())["approved"] is True
    stdout, stderr = login.communicate(timeout=60)
    assert login.returncode == 0, stderr
    assert "as dana (oidc)" in stdout and provider.exchanged[-1] == "device_code"


def test_a_device_code_that_expires_unapproved_is_one_line(user: User, provider: Provider) -> None:
    _oidc_target(user, provider)
    provider.device_lifetime = 2
    try:
        expired = user.run("login", "--device")
    finally:
        provider.device_lifetime = 120
    assert expired.returncode == 5, expired.stderr
    assert "the device code expired before the login was approved" in expired.stderr
    assert not (user.home / ".config" / "lessor" / "sessions.json").exists()


class Recorder:
    """An endpoint that is not the configured one (a typo, a phishing link, a tunnel), which
    answers 401 to everything and keeps every Authorization header it is sent."""

    def __init__(self) -> None:
        self.headers: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _refuse(self) -> None:
                recorder.headers.append(self.headers.get("Authorization") or "")
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = b'{"error": "unauthorized", "detail": "no", "reason": "unauthenticated"}'
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = _refuse  # noqa: N815

            def log_message(self, *_: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    found = Recorder()
    yield found
    found.server.shutdown()


def test_a_signature_offered_to_another_endpoint_cannot_be_replayed(
    user: User, recorder: Recorder
) -> None:
    """Issue 18, item 1: `lessor login --endpoint` of an ssh target at an endpoint it was not
    configured for offers that endpoint a signature; replayed at once to the real deployment
    (fresh timestamp, unused nonce), it is refused: it names the endpoint it was offered to."""
    user.target("ssh")
    offered = user.run("login", "--endpoint", recorder.url)
    assert offered.returncode == 3, offered.stderr
    assert recorder.headers and all(h.startswith("Lessor-SSH ") for h in recorder.headers)
    for header in recorder.headers:
        replayed = user.stack.api.call("POST", "/v1/login", headers={"Authorization": header})
        assert replayed.status == 401, replayed.body
    assert user.run("login").returncode == 0, "the configured endpoint still takes the key"


def test_a_stored_token_is_never_sent_to_another_endpoint(user: User, recorder: Recorder) -> None:
    """Issue 18 (low): `--endpoint` overrides the address of a token target for one run; the
    target's stored token stays with the target's own endpoint."""
    user.target("token")
    moved = user.run("release", "lease-x", "--endpoint", recorder.url)
    assert moved.returncode in (2, 3), moved.stderr
    assert ALICE not in " ".join(recorder.headers), "the stored token went elsewhere"
    explicit = user.run(
        "release", "lease-x", "--endpoint", recorder.url, LESSOR_TOKEN="for-this-run"
    )
    assert "Bearer for-this-run" in recorder.headers, explicit.stderr


# -- issue 26: a create whose answer the network lost (spec 4.3, rules 3 and 4) --------------


def active_leases(stack: Stack) -> set[str]:
    return {row["id"] for row in stack.api.call("GET", "/v1/leases", token=ALICE).body}


def through_proxy(proxy: AnswerCuttingProxy) -> dict[str, str]:
    return {"LESSOR_ENDPOINT": proxy.base, "LESSOR_TOKEN": ALICE}


@pytest.fixture
def proxy(stack: Stack, request: pytest.FixtureRequest) -> Iterator[AnswerCuttingProxy]:
    upstream = urlsplit(stack.api.base)
    cutting = AnswerCuttingProxy(
        (upstream.hostname or "", upstream.port or 80), request.param, "POST", "/v1/leases"
    )
    yield cutting
    cutting.close()


@pytest.mark.parametrize("proxy", ["body"], indirect=True)
def test_a_lease_whose_answer_was_cut_after_its_headers_is_read_from_location(
    user: User, proxy: AnswerCuttingProxy
) -> None:
    before = active_leases(user.stack)
    leased = user.run("lease", "cli-warm", "-o", "json", **through_proxy(proxy))
    assert leased.returncode == 0, leased.stderr
    lease = json.loads(leased.stdout)
    assert (proxy.cut, proxy.seen) == (True, 1), "the POST was received: never sent again"
    assert active_leases(user.stack) - before == {lease["id"]}
    assert lease["phase"] == "Bound" and Path(lease["kubeconfig"]).exists()
    assert user.run("release", lease["id"], **through_proxy(proxy)).returncode == 0


@pytest.mark.parametrize("proxy", ["headers"], indirect=True)
def test_an_unkeyed_lease_whose_answer_never_came_is_not_sent_twice(
    user: User, proxy: AnswerCuttingProxy
) -> None:
    """A cluster lease has no idempotency key (spec 4.1): sending it again could make a second
    lease, so the command says what happened and where to look instead."""
    before = active_leases(user.stack)
    leased = user.run("lease", "cli-warm", **through_proxy(proxy))
    assert leased.returncode != 0 and "Traceback" not in leased.stderr
    assert "cannot reach" in leased.stderr and "`lessor status`" in leased.stderr
    assert proxy.seen == 1
    for lease in active_leases(user.stack) - before:  # the one the server did make
        user.stack.api.call("DELETE", f"/v1/leases/{lease}", token=ALICE)


def test_version_names_the_endpoints_version_and_metadata_comes_from_a_file(user: User) -> None:
    """Issue 26 (untested rules): spec 4.7's `version` against an endpoint, and `lease
    --metadata-json @path`."""
    user.target("token")
    shown = user.json("version")
    shown.pop("commit", None)  # there when the CLI runs from a checkout, not from a wheel
    assert shown == {"client": __version__, "endpoint": user.stack.api.base, "server": __version__}
    assert f"endpoint {user.stack.api.base}: lessor {__version__}" in user.run("version").stdout

    document = user.home / "meta.json"
    document.write_text('{"job": "nightly", "attempt": 2}')
    leased = user.json("lease", "cli-none", "--no-wait", "--metadata-json", f"@{document}")
    try:
        stored = user.stack.api.call("GET", f"/v1/leases/{leased['id']}", token=ALICE).body
        assert stored["metadata"] == {"job": "nightly", "attempt": 2}
        missing = user.run("lease", "cli-none", "--no-wait", "--metadata-json", "@/no/such")
        assert missing.returncode == 2 and "Traceback" not in missing.stderr
        assert "--metadata-json" in missing.stderr
    finally:
        user.run("release", leased["id"])


def test_release_and_extend_take_an_alias_and_refuse_what_names_no_lease(user: User) -> None:
    """Issue 26: the server resolves an alias where an id goes, and the CLI, which tells the
    two kinds of lease apart by the id's form, looks an alias up first. A LEASE argument that
    could be no id nor alias never reaches a request's path."""
    user.target("token")
    alias = f"job-{uuid.uuid4().hex[:6]}"
    leased = user.json("lease", "cli-warm", "--name", alias)
    extended = user.json("extend", alias, "--ttl", "5m")
    assert extended["id"] == leased["id"]
    released = user.run("release", alias)
    assert released.returncode == 0 and f"released lease {leased['id']}" in released.stdout
    wait_for("Released", lambda: phase(user.stack, leased["id"]) == "Released")
    missing = user.run("release", "no-such-lease")
    assert missing.returncode == 4 and "no lease of yours is named" in missing.stderr
    crafted = user.run("release", "../login")
    assert crafted.returncode == 2 and "no lease id or alias" in crafted.stderr


def test_get_kubeconfig_and_wait_come_back_to_a_lease_and_release_removes_what_they_wrote(
    user: User,
) -> None:
    user.target("token")
    lease = user.json("lease", "cli-warm", "--no-wait", "--name", "back-1")["id"]
    waited = user.run("wait", "back-1", "--for", "Bound", "--timeout", "5m")
    assert (waited.returncode, waited.stdout.strip()) == (0, f"lease {lease} is Bound")
    listed = {row["id"]: row for row in user.json("get")}
    assert (listed[lease]["phase"], listed[lease]["alias"]) == ("Bound", "back-1")
    one = user.json("get", "back-1")
    assert (one["id"], one["kind"], one["profile"]) == (lease, "Cluster", "cli-warm")
    assert "kubeconfig" not in one, "a credential is never printed"
    assert "Bound" in [event["reason"] for event in one["events"]], one["events"]
    described = user.run("get", lease).stdout
    assert "lessor kubeconfig" in described
    assert re.search(r"^Events:\nTYPE +REASON +AGE +MESSAGE\n", described, re.MULTILINE)
    assert re.search(r"^Normal +Bound +\d+[smhd] +bound to ", described, re.MULTILINE), described

    kubectl = str(ensure_binaries() / "kubectl")

    def reaches(*where: str) -> bool:
        ran = subprocess.run(
            [kubectl, *where, "get", "ns"], capture_output=True, text=True, timeout=60,
            check=False, env={**user.env, "KUBECONFIG": str(user.home / ".kube" / "config")},
        )  # fmt: skip
        return "kube-system" in ran.stdout

    written = Path(user.json("kubeconfig", "back-1")["kubeconfig"])
    assert written == user.home / ".kube" / f"lessor-{lease}"
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert reaches("--kubeconfig", str(written))
    mine = {
        "apiVersion": "v1", "kind": "Config", "current-context": "mine",
        "clusters": [{"name": "mine", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "mine", "user": {"token": "x"}}],
        "contexts": [{"name": "mine", "context": {"cluster": "mine", "user": "mine"}}],
    }  # fmt: skip
    config = user.home / ".kube" / "config"
    config.write_text(json.dumps(mine))  # JSON is YAML
    merged = user.json("kubeconfig", lease, "--merge")
    context = f"lessor-{lease}"
    assert (merged["kubeconfig"], merged["context"]) == (str(config), context)
    assert reaches("--context", context)
    assert "current-context: mine" in config.read_text(), "the current context is left alone"
    wide = user.run("get", "-o", "wide").stdout
    assert str(written) in wide and f"context {context} in {config}" in wide
    wrong = user.run("wait", lease, "--for", "Ready")
    assert wrong.returncode == 2 and "Bound" in wrong.stderr, "a cluster lease is never Ready"

    released = user.run("release", "back-1")
    assert released.returncode == 0, released.stderr
    assert f"removed {written}" in released.stdout
    assert f"removed context {context} of {config}" in released.stdout
    assert not written.exists()
    kept = config.read_text()
    assert "mine" in kept and context not in kept
    assert user.run("wait", lease, "--for", "Released", "--timeout", "3m").returncode == 0
    ended = user.run("wait", lease, "--for", "Bound", "--timeout", "1m")
    assert ended.returncode == 1 and "ended Released, never Bound" in ended.stderr

    queued = user.json("lease", "cli-none", "--no-wait")["id"]
    late = user.run("wait", queued, "--for", "Bound", "--timeout", "2s")
    assert late.returncode == 5 and "Pending after 2s" in late.stderr
    assert user.run("kubeconfig", queued).returncode == 1
    assert user.run("release", queued).returncode == 0


class KubeconfigTamperingFront:
    """The real API behind a front that adds an exec plugin to every kubeconfig it answers with:
    what a malicious or compromised server hands out (review N11), or a cluster whose published
    kubeconfig was tampered with. The real server cannot be made to do it (it hands out what its
    backends publish, and theirs never has a plugin), so this is the one stand-in: everything
    else is the real API's answer, passed through unchanged."""

    def __init__(self, upstream: str, marker: Path) -> None:
        self.tampered = 0
        front = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                skipped = ("host", "content-length", "connection")
                headers = {k: v for k, v in self.headers.items() if k.lower() not in skipped}
                request = urllib.request.Request(
                    upstream + self.path, data=body or None, method=self.command, headers=headers
                )
                try:
                    with urllib.request.urlopen(request, timeout=120) as answer:
                        status, answered, data = answer.status, answer.headers, answer.read()
                except urllib.error.HTTPError as error:
                    status, answered, data = error.code, error.headers, error.read()
                document = json.loads(data) if data.startswith(b"{") else None
                if isinstance(document, dict) and document.get("kubeconfig"):
                    kubeconfig = yaml.safe_load(document["kubeconfig"])
                    plugin = {"apiVersion": "client.authentication.k8s.io/v1",
                              "command": "touch", "args": [str(marker)]}  # fmt: skip
                    kubeconfig["users"][0]["user"]["exec"] = plugin
                    document["kubeconfig"] = yaml.safe_dump(kubeconfig)
                    data = json.dumps(document).encode()
                    front.tampered += 1
                self.send_response(status)
                for name, value in answered.items():
                    if name.lower() not in ("content-length", "connection", "date", "server"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PATCH = _forward  # noqa: N815

            def log_message(self, *_: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_a_kubeconfig_with_an_exec_plugin_from_the_server_is_refused(user: User) -> None:
    """Review N11: kubectl runs a kubeconfig's exec plugin, so a server (or a tampered cluster)
    could run any program on the user's machine. `lease`, `with-lease` and `kubeconfig` refuse
    it in one line naming it and the lease, write nothing, and a lease this command made is
    released; --allow-unsafe-kubeconfig takes it as it is."""
    marker = user.home / "the-plugin-ran"
    front = KubeconfigTamperingFront(user.stack.api.base, marker)
    through = {"LESSOR_ENDPOINT": front.url, "LESSOR_TOKEN": ALICE}
    kube = user.home / ".kube"
    try:
        refused = user.run("lease", "cli-warm", **through)
        assert refused.returncode == 1, refused.stderr
        said = refused.stderr.splitlines()[-1]  # after the progress lines: one line
        found = re.search(r"; released lease ([a-z0-9][a-z0-9-]*)$", said)
        assert found and "users[0].user.exec" in said, refused.stderr
        assert f"kubeconfig for lease {found[1]}" in said and "--allow-unsafe-kubeconfig" in said
        wait_for("Released", lambda: phase(user.stack, found[1]) == "Released")

        wrapped = user.run("with-lease", "cli-warm", "--", "touch", str(marker), **through)
        assert wrapped.returncode == 1 and "users[0].user.exec" in wrapped.stderr, wrapped.stderr
        assert not marker.exists(), "the command never ran with that kubeconfig"
        allowed = user.run(
            "with-lease", "cli-warm", "--allow-unsafe-kubeconfig", "--",
            "sh", "-c", 'grep -q "command: touch" "$KUBECONFIG"', **through,
        )  # fmt: skip
        assert allowed.returncode == 0, allowed.stderr

        taken = user.run("lease", "cli-warm", "--allow-unsafe-kubeconfig", "-o", "json", **through)
        assert taken.returncode == 0, taken.stderr
        lease = json.loads(taken.stdout)["id"]
        written = Path(json.loads(taken.stdout)["kubeconfig"])
        assert "exec" in yaml.safe_load(written.read_text())["users"][0]["user"]
        written.unlink()
        for flags in ((), ("--merge",), ("--kubeconfig", str(user.home / "kc"))):
            again = user.run("kubeconfig", lease, *flags, **through)
            assert again.returncode == 1 and "users[0].user.exec" in again.stderr, again.stderr
        assert sorted(p.name for p in kube.iterdir()) == [], "nothing was written"
        assert not (user.home / "kc").exists()
        kept = user.run("kubeconfig", lease, "--allow-unsafe-kubeconfig", **through)
        assert kept.returncode == 0 and written.exists(), kept.stderr
        assert user.run("release", lease, **through).returncode == 0
    finally:
        front.server.shutdown()
    assert front.tampered >= 4 and not marker.exists()


class HtmlProxy:
    """A proxy in front of the API that answers with its own HTML page (a 502 of a load balancer,
    or a 200 of a captive portal), and keeps the User-Agent of every request."""

    def __init__(self, status: int) -> None:
        self.agents: list[str] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                proxy.agents.append(self.headers.get("User-Agent") or "")
                body = b"<html><head><title>502 Bad Gateway</title></head><body>" + b"x" * 5000
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_a_proxys_html_page_is_one_line_naming_the_url_and_the_pages_title(user: User) -> None:
    # A wrong URL's HTML 404 is not "no such lease" (exit 4): it is the endpoint that is wrong.
    for status, code in ((502, 1), (200, 1), (404, 1)):
        proxy = HtmlProxy(status)
        try:
            shown = user.run("get", "--endpoint", proxy.url, LESSOR_TOKEN=ALICE)
        finally:
            proxy.server.shutdown()
        assert shown.returncode == code
        assert len(shown.stderr.splitlines()) == 1 and "<" not in shown.stderr, shown.stderr
        assert f"{proxy.url}/v1/leases answered HTTP {status} with text/html" in shown.stderr
        assert "502 Bad Gateway" in shown.stderr
        assert proxy.agents and proxy.agents[0].startswith("lessor/"), "a User-Agent is sent"


def test_verbose_shows_each_exchange_and_never_a_credential(user: User) -> None:
    shown = user.run("get", "-v", "--endpoint", user.stack.api.base, LESSOR_TOKEN=ALICE)
    assert shown.returncode == 0, shown.stderr
    assert f"lessor: > GET {user.stack.api.base}/v1/leases (0 bytes, Bearer)" in shown.stderr
    assert re.search(
        r"lessor: < 200 in [\d.]+s, request id [0-9a-f]{32}, trace [0-9a-f]{32}", shown.stderr
    )
    assert ALICE not in shown.stderr + shown.stdout
    quiet = user.run("get", "--endpoint", user.stack.api.base, LESSOR_TOKEN=ALICE)
    assert quiet.stderr == "", "nothing without -v"
    traced = user.run(
        "get", "--endpoint", user.stack.api.base, LESSOR_TOKEN=ALICE, LESSOR_DEBUG="1"
    )
    assert "lessor: > GET" in traced.stderr


def _bash_completes(user: User, line: str) -> list[str]:
    """What bash offers at the end of `line`, with the script `lessor completion bash` prints
    loaded, as a user's shell runs it at Tab."""
    words = line.split(" ")
    script = (
        "source <(lessor completion bash)\n"
        f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        f"COMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}\n"
        f"_python_argcomplete lessor {words[-1]!r} {words[-2]!r}\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    path = f"{INSTALLED.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    ran = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=60, check=False,
        # The default 5 s is for a person at a Tab; a loaded CI machine gets longer, so that
        # what is asserted is what is completed, not how fast.
        env={**user.env, "PATH": path, "LESSOR_COMPLETION_TIMEOUT": "60"},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    return [word.strip() for word in ran.stdout.splitlines() if word.strip()]


@pytest.mark.skipif(not INSTALLED.exists(), reason="completes the installed `lessor` command")
def test_bash_completes_commands_flags_pools_and_your_lease_ids_and_aliases(user: User) -> None:
    user.target("token")
    assert _bash_completes(user, "lessor rel") == ["release"]
    assert "--output" in _bash_completes(user, "lessor get --o")
    assert _bash_completes(user, "lessor lease cli-") == ["cli-none", "cli-warm"]
    lease = user.json("lease", "cli-none", "--no-wait", "--name", "tab-1")["id"]
    try:
        assert set(_bash_completes(user, "lessor release ")) >= {lease, "tab-1"}
        assert _bash_completes(user, "lessor wait tab") == ["tab-1"]
    finally:
        assert user.run("release", lease).returncode == 0
    assert {"bash", "fish", "zsh"} <= set(_bash_completes(user, "lessor completion "))


def test_every_printing_command_speaks_json_yaml_and_jsonpath(user: User) -> None:
    user.target("token")
    as_json = user.json("config", "list")
    as_yaml = user.run("config", "list", "-o", "yaml")
    assert as_yaml.returncode == 0 and yaml.safe_load(as_yaml.stdout) == as_json
    names = user.run("config", "list", "-o", "jsonpath={[*].name}")
    assert names.stdout.strip() == "token"
    current = user.json("config", "current")
    assert (current["name"], current["endpoint"]) == ("token", user.stack.api.base)
    assert yaml.safe_load(user.run("config", "view", "-o", "yaml").stdout)["current"] == "token"
    endpoint = user.run("status", "-o", "jsonpath={.endpoint}")
    assert endpoint.stdout.strip() == user.stack.api.base, endpoint.stderr
    for bad in ("xml", "jsonpath={.items[", "wide"):
        refused = user.run("config", "list", "-o", bad)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, bad


def test_the_cli_installed_alone_leases_a_cluster_without_the_server_stack(
    user: User, tmp_path: Path
) -> None:
    """`pip install lessor` is the client alone (issue 20): a fresh virtual environment with
    this checkout's wheel, its dependencies from the index, and nothing of the server stack."""
    root = Path(__file__).resolve().parents[2]
    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = str(environment / "bin" / "python")
    pip = [python, "-m", "pip", "--quiet", "--disable-pip-version-check"]
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "--wheel-dir", str(wheels), str(root)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = wheels.glob("lessor-*.whl")
    done = subprocess.run(
        [*pip, "install", str(wheel)], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for server_only in ("kubernetes", "gevent", "gunicorn", "falcon", "boto3", "kr8s"):
        found = subprocess.run([python, "-c", f"import {server_only}"], check=False)
        assert found.returncode != 0, f"{server_only} came with the client"
    installed = subprocess.run(
        [python, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    packages = {p["name"].lower() for p in json.loads(installed.stdout)} - {"pip", "setuptools"}
    assert len(packages) <= 12, sorted(packages)

    lessor = str(environment / "bin" / "lessor")
    ci = {**user.env, "LESSOR_ENDPOINT": user.stack.api.base, "LESSOR_TOKEN": ALICE}
    leased = subprocess.run(
        [lessor, "lease", "cli-warm", "-o", "json"], capture_output=True, text=True, env=ci,
        timeout=300, check=False,
    )  # fmt: skip
    assert leased.returncode == 0, leased.stderr
    lease = json.loads(leased.stdout)
    namespaces = subprocess.run(
        [str(ensure_binaries() / "kubectl"), "--kubeconfig", lease["kubeconfig"], "get", "ns"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "kube-system" in namespaces.stdout, namespaces.stderr
    released = subprocess.run([lessor, "release", lease["id"]], env=ci, check=False)
    assert released.returncode == 0
    server = subprocess.run([lessor, "apiserver"], capture_output=True, text=True, check=False)
    assert server.returncode == 2 and "pip install 'lessor[server]'" in server.stderr
