"""Identity as it is in the field, on the real stack: a person logs in to a real OpenID provider
(ORY Hydra, built here: tests/identity/hydra.py) through its login and consent pages, leases
with the session, renews it with the provider's refresh token, and is cut off when the policy
tightens or the provider revokes the grant; the provider rotates its keys under a running API
server; and CI jobs lease with the tokens GitHub Actions and GitLab mint, through the shipped
example policies unchanged (issuers laid out as the real ones: tests/identity/ci_issuers.py).
"""

from __future__ import annotations

import json
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest

from tests.identity import form_browser
from tests.identity.ci_issuers import (
    GithubRunner,
    gitlab,
)
from tests.identity.hydra import IdentityProvider
from tests.identity.login_consent import User as Person
from tests.integration.ci_world import CiWorld, ci_world  # noqa: F401 - the fixture
from tests.integration.operator_harness import wait_for
from tests.integration.test_apiserver import Api
from tests.integration.test_cli import (  # noqa: F401 - the fixtures
    LESSOR,
    Stack,
    User,
    agent,
    stack,
    user,
)

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "manifests" / "examples"
PERSON = Person()
BROWSER = f"{sys.executable} {Path(form_browser.__file__)} %s"


@dataclass
class Sso:
    """The stack's API trusting Hydra by issuer alone, for one client of its own."""

    provider: IdentityProvider
    client_id: str
    policy: dict[str, Any]
    stack: Stack

    def id_token(self) -> dict[str, Any]:
        scope = "openid offline_access email"
        return self.provider.hydra.tokens(self.client_id, PERSON.username, PERSON.password, scope)

    def apply(self, policy: dict[str, Any]) -> None:
        self.stack.cluster.kubectl("apply", "-f", "-", input=json.dumps(policy))

    def person(self, **extra: str) -> dict[str, str]:
        """What a person's shell has for a browser login: the browser, and what they type."""
        return {
            "BROWSER": BROWSER,
            "LESSOR_TEST_USER": PERSON.username,
            "LESSOR_TEST_PASSWORD": PERSON.password,
            **extra,
        }


def authenticates(api: Api, token: str) -> bool:
    return api.call("GET", "/v1/pools", token=token).status == 200


def everywhere(api: Api, token: str) -> bool:
    """Accepted by each of the server's workers (each keeps its own keys): a run of requests."""
    return all(authenticates(api, token) for _ in range(8))


@pytest.fixture(scope="module")
def sso(stack: Stack, identity_provider: IdentityProvider) -> Iterator[Sso]:  # noqa: F811
    client_id = f"lessor-cli-{secrets.token_hex(4)}"
    identity_provider.hydra.public_client(client_id)
    policy = {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "AccessPolicy",
        "metadata": {"name": "hydra", "namespace": stack.namespace},
        "spec": {
            "auth": {
                "oidc": {  # by issuer only: no jwksUrl
                    "issuer": identity_provider.issuer,
                    "audience": [client_id],
                    "requiredClaims": {"email_verified": "true"},
                }
            },
            "identity": "{email}",
            "rules": [{"pools": ["cli-*"], "maxConcurrentLeases": 4}],
        },
    }
    state = Sso(identity_provider, client_id, policy, stack)
    state.apply(policy)
    token = state.id_token()["id_token"]
    wait_for("the API trusting Hydra", lambda: authenticates(stack.api, token), timeout=120)
    yield state
    stack.cluster.kubectl("delete", "accesspolicy", "hydra", "-n", stack.namespace)


def _hydra_target(someone: User, sso: Sso) -> None:
    result = someone.run(
        "config", "set", "hydra", "--endpoint", someone.stack.api.base, "--auth", "oidc",
        "--oidc-issuer", sso.provider.issuer, "--oidc-client-id", sso.client_id,
        "--oidc-scope", "openid", "--oidc-scope", "offline_access", "--oidc-scope", "email",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert someone.run("config", "use", "hydra").returncode == 0


def _stored_session(someone: User) -> dict[str, Any] | None:
    path = someone.home / ".config" / "lessor" / "sessions.json"
    stored = json.loads(path.read_text()) if path.exists() else {}
    entry: dict[str, Any] | None = stored.get(someone.stack.api.base)
    return entry


def _no_browser(tmp_path: Path) -> tuple[str, Path]:
    """A BROWSER that records being opened: what a renewal must never do."""
    marker = tmp_path / "browser-opened"
    script = tmp_path / "no-browser.py"
    script.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('opened')\n")
    return f"{sys.executable} {script} %s", marker


def test_a_browser_login_at_the_provider_leases_renews_and_ends_when_the_policy_tightens(
    user: User,  # noqa: F811
    sso: Sso,
    tmp_path: Path,
) -> None:
    _hydra_target(user, sso)
    visited = tmp_path / "visited"
    logins_before = sso.provider.pages.logins
    # A 10 s session: shorter than the CLI's 30 s margin, so the next command renews it.
    login = user.run("login", "--ttl", "10s", **sso.person(LESSOR_TEST_BROWSER_LOG=str(visited)))
    assert login.returncode == 0, login.stderr
    assert f"as {PERSON.email} (oidc)" in login.stdout
    assert "renews itself" in login.stdout
    pages = visited.read_text().splitlines()
    assert any(page.endswith("/login") for page in pages), pages  # the provider's login page
    assert any(page.endswith("/consent") for page in pages), pages
    assert pages[-1].endswith("/callback"), pages  # back at the CLI's loopback listener
    assert sso.provider.pages.logins == logins_before + 1
    first = _stored_session(user)
    assert first is not None and first["refresh_token"]

    # The session ended: the next command renews it with the refresh token, no browser.
    browser, opened = _no_browser(tmp_path)
    lease = user.run("lease", "cli-warm", "-o", "json", BROWSER=browser)
    assert lease.returncode == 0, lease.stderr
    leased = json.loads(lease.stdout)
    assert leased["phase"] == "Bound"
    assert not opened.exists(), "a renewal opened the browser"
    assert sso.provider.pages.logins == logins_before + 1, "a renewal went through the pages"
    renewed = _stored_session(user)
    assert renewed is not None and renewed["token"] != first["token"]
    assert renewed["refresh_token"] != first["refresh_token"]  # Hydra rotates them
    assert user.run("release", leased["id"], BROWSER=browser).returncode == 0

    # The policy tightens: the session (from a token it no longer accepts) is refused on its
    # next use, and a renewal gives a token the policy refuses too: one line, log in again.
    tightened = json.loads(json.dumps(sso.policy))
    tightened["spec"]["auth"]["oidc"]["requiredClaims"]["email"] = "ops@example.com"
    sso.apply(tightened)
    try:
        wait_for(
            "the tightened policy ending the session",
            lambda: not authenticates(user.stack.api, renewed["token"]),
            timeout=60,
        )
        refused = user.run("lease", "cli-none", "--no-wait", BROWSER=browser)
        assert refused.returncode == 3, (refused.stdout, refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "could not be renewed" in refused.stderr and "lessor login" in refused.stderr
        assert _stored_session(user) is None
        assert not opened.exists()
    finally:
        sso.apply(sso.policy)
    wait_for(
        "the policy restored", lambda: authenticates(user.stack.api, sso.id_token()["id_token"])
    )


def test_a_refresh_token_the_provider_revoked_asks_for_a_login_again(
    user: User,  # noqa: F811
    sso: Sso,
    tmp_path: Path,
) -> None:
    _hydra_target(user, sso)
    login = user.run("login", "--ttl", "10s", **sso.person())
    assert login.returncode == 0, login.stderr
    sso.provider.hydra.revoke_consent(PERSON.username)  # an administrator cuts the grant
    browser, opened = _no_browser(tmp_path)
    refused = user.run("lease", "cli-none", "--no-wait", BROWSER=browser)
    assert refused.returncode == 3, (refused.stdout, refused.stderr)
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert "refused to renew the login (invalid_grant)" in refused.stderr, refused.stderr
    assert "run `lessor login`" in refused.stderr
    assert _stored_session(user) is None, "a refresh token that is refused is not kept"
    assert not opened.exists()


def test_the_providers_key_rotation_is_followed_without_a_restart(sso: Sso) -> None:
    api = sso.stack.api
    before = sso.id_token()
    assert authenticates(api, before["id_token"])
    old_kid = jwt.get_unverified_header(before["id_token"])["kid"]
    new_kid = f"rotated-{secrets.token_hex(4)}"
    sso.provider.hydra.add_signing_key(new_kid)
    after = sso.id_token()
    assert jwt.get_unverified_header(after["id_token"])["kid"] == new_kid
    # Each worker refetches an issuer's keys at most every 30 s (an unknown kid cannot make it
    # hammer the provider): the new key is accepted within that, with no restart.
    wait_for("the new key accepted", lambda: everywhere(api, after["id_token"]), timeout=120)
    assert authenticates(api, before["id_token"]), "the old key's tokens stand until they expire"
    # Hydra v2.3.0 names the old key in ID tokens it issues on a refresh after a rotation, and
    # signs them with the new one (ory/hydra#3573): lessor tries the issuer's other keys.
    refreshed = sso.provider.hydra.token_request({
        "grant_type": "refresh_token", "refresh_token": before["refresh_token"],
        "client_id": sso.client_id,
    })  # fmt: skip
    assert jwt.get_unverified_header(refreshed["id_token"])["kid"] == old_kid
    wait_for("the refreshed token accepted", lambda: everywhere(api, refreshed["id_token"]))


def test_a_provider_without_the_device_flow_says_so(user: User, sso: Sso) -> None:  # noqa: F811
    """Hydra v2.3.0 has no device authorization grant (it came after it): the CLI says so and
    points at the browser, instead of failing somewhere in the protocol."""
    _hydra_target(user, sso)
    refused = user.run("login", "--device")
    assert refused.returncode == 3, refused.stderr
    assert "offers no device flow; log in with a browser" in refused.stderr
    assert _stored_session(user) is None


class ForeignDiscovery:
    """A provider whose discovery document names another issuer."""

    def __init__(self) -> None:
        url: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = json.dumps({
                    "issuer": "https://elsewhere.example",
                    "authorization_endpoint": f"{url[0]}/auth",
                    "token_endpoint": f"{url[0]}/token",
                }).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        url.append(self.url)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_bad_logins_get_one_line_and_store_nothing(
    user: User,  # noqa: F811
    sso: Sso,
    tmp_path: Path,
) -> None:
    config = user.home / ".config" / "lessor" / "config.json"
    base = ["config", "set", "bad", "--endpoint", user.stack.api.base, "--auth", "oidc"]
    http = user.run(*base, "--oidc-issuer", "http://login.example.com", "--oidc-client-id", "x")
    assert http.returncode == 2 and "is not https" in http.stderr, http.stderr
    assert not config.exists(), "a refused target is not saved"

    def login_at(issuer: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        made = user.run(*base, "--oidc-issuer", issuer, "--oidc-client-id", sso.client_id)
        assert made.returncode == 0, made.stderr
        return user.run("--target", "bad", "login", *args, **env)

    foreign = ForeignDiscovery()
    try:
        other = login_at(foreign.url)
        assert other.returncode == 3 and "is of another issuer" in other.stderr, other.stderr
    finally:
        foreign.server.shutdown()
    silent = login_at(f"http://127.0.0.1:{_closed_port()}")
    assert silent.returncode == 1 and "did not answer" in silent.stderr, silent.stderr

    # The person closes the browser: the login gives up at its timeout, and its loopback
    # listener is gone.
    closed = login_at(sso.provider.issuer, "--timeout", "3s", BROWSER="true %s")
    assert closed.returncode == 5, closed.stderr
    assert "no answer from the browser login within 3s" in closed.stderr
    redirect = re.search(r"redirect_uri=http%3A%2F%2F127\.0\.0\.1%3A(\d+)", closed.stderr)
    assert redirect, closed.stderr
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", int(redirect.group(1))), timeout=5).close()

    # The person gives up with Ctrl-C while the browser is open: the same, at once.
    made = user.run(*base, "--oidc-issuer", sso.provider.issuer, "--oidc-client-id", sso.client_id)
    assert made.returncode == 0, made.stderr
    waiting = subprocess.Popen(
        [*LESSOR, "--target", "bad", "login"], stderr=subprocess.PIPE, text=True,
        env={**user.env, "BROWSER": "true %s"},
    )  # fmt: skip
    assert waiting.stderr is not None
    printed = waiting.stderr.readline() + waiting.stderr.readline()  # the line, then the URL
    port = re.search(r"redirect_uri=http%3A%2F%2F127\.0\.0\.1%3A(\d+)", printed)
    assert port, printed
    waiting.send_signal(signal.SIGINT)
    assert waiting.wait(timeout=60) == 130, waiting.stderr.read()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", int(port.group(1))), timeout=5).close()

    # The person refuses consent at the provider.
    denied = login_at(sso.provider.issuer, **sso.person(LESSOR_TEST_CHOICE="deny"))
    assert denied.returncode == 3, denied.stderr
    assert "login refused by the identity provider" in denied.stderr
    assert _stored_session(user) is None


def test_a_github_actions_job_leases_through_the_shipped_policy(
    user: User,  # noqa: F811
    ci_world: CiWorld,  # noqa: F811
) -> None:
    runner = GithubRunner(ci_world.github, "example-org/widgets")
    server = runner.serve()
    job = {
        "GITHUB_ACTIONS": "true",
        "ACTIONS_ID_TOKEN_REQUEST_URL": runner.url,
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN": runner.request_token,
        "LESSOR_ENDPOINT": ci_world.api.base,
    }
    try:
        login = user.run("login", "--ci", "--ttl", "10s", **job)
        assert login.returncode == 0, login.stderr
        assert "as github/example-org/widgets (oidc)" in login.stdout
        assert runner.audiences == ["lessor"]  # what the shipped policy's audience is
        # Keys found as GitHub publishes them: nothing at the derived default, then discovery.
        paths = set(ci_world.github.paths)
        assert {"/.well-known/jwks.json", "/.well-known/openid-configuration"} <= paths
        assert "/.well-known/jwks" in paths
        # The 10 s session has ended by the next command: renewed from the runner, as a long
        # job would need.
        lease = user.run("lease", "ci-virtual", "-o", "json", **job)
        assert lease.returncode == 0, lease.stderr
        leased = json.loads(lease.stdout)
        assert leased["phase"] == "Bound"
        assert len(runner.audiences) == 2
        assert user.run("release", leased["id"], **job).returncode == 0
        # Another org's repository matches no rule of the policy: the pool is not there for
        # it (a pool not granted is a 404, as another tenant's object is).
        stranger = GithubRunner(ci_world.github, "someone-else/tool")
        stranger_server = stranger.serve()
        try:
            outsider = {
                **job,
                "ACTIONS_ID_TOKEN_REQUEST_URL": stranger.url,
                "ACTIONS_ID_TOKEN_REQUEST_TOKEN": stranger.request_token,
            }
            assert user.run("login", "--ci", **outsider).returncode == 0
            refused = user.run("lease", "ci-virtual", "--no-wait", **outsider)
            assert refused.returncode == 4 and "no pool" in refused.stderr, refused.stderr
        finally:
            stranger_server.shutdown()
    finally:
        server.shutdown()


def test_a_gitlab_ci_job_leases_through_the_shipped_policy(
    user: User,  # noqa: F811
    ci_world: CiWorld,  # noqa: F811
) -> None:
    token = ci_world.gitlab.token("lessor", **gitlab("example-org/widgets"))
    job = {"GITLAB_CI": "true", "LESSOR_ID_TOKEN": token, "LESSOR_ENDPOINT": ci_world.api.base}
    login = user.run("login", "--ci", **job)
    assert login.returncode == 0, login.stderr
    assert "as gitlab/example-org/widgets (oidc)" in login.stdout
    assert "/oauth/discovery/keys" in ci_world.gitlab.paths
    lease = user.run("lease", "ci-virtual", "--no-wait", "-o", "json", **job)
    assert lease.returncode == 0, lease.stderr
    assert user.run("release", json.loads(lease.stdout)["id"], **job).returncode == 0
    missing = user.run("login", "--ci", **{**job, "LESSOR_ID_TOKEN": ""})
    assert missing.returncode == 3 and "id_tokens:" in missing.stderr, missing.stderr
