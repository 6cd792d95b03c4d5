"""A person logs in to a real OpenID provider running in kind (ORY Hydra behind its login and
consent pages, e2e/kind/identity.py) with the CLI's browser flow, leases a cluster with the
session, and is refused once the installed policy tightens; the provider's lack of a device
flow is said as such. The integration tests (tests/integration/test_identity.py) cover the
rest against the same provider on the local control plane; this proves the installed chart's
API reaches an https issuer by its issuer alone, with its `caBundle`, from a pod.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.installation import NAMESPACE, Installation, wait_for
from e2e.kind import identity
from e2e.people import LESSOR
from lessor.controlplane.binaries import ensure_binaries
from tests.identity import form_browser
from tests.identity.login_consent import User

pytestmark = pytest.mark.skipif(
    os.environ.get("LESSOR_E2E_CLUSTER") != "kind",
    reason="the provider runs as a pod in kind; on the local control plane "
    "tests/integration/test_identity.py logs in to it",
)
PERSON = User()


class Sso:
    def __init__(self, installation: Installation, provider: identity.KindProvider, work: Path):
        self.installation = installation
        self.provider = provider
        self.client_id = f"lessor-cli-{secrets.token_hex(4)}"
        self.trust = work / "ca.pem"  # the person's trust store: the provider's CA
        self.trust.write_bytes(provider.ca_pem)
        self.policy: dict[str, Any] = {
            "apiVersion": "lessor.dev/v1alpha1",
            "kind": "AccessPolicy",
            "metadata": {"name": "hydra-sso", "namespace": NAMESPACE},
            "spec": {
                "auth": {
                    "oidc": {  # by issuer alone, as a platform team writes it
                        "issuer": provider.issuer,
                        "audience": [self.client_id],
                        "caBundle": provider.ca_pem.decode(),
                        "requiredClaims": {"email_verified": "true"},
                    }
                },
                "identity": "{email}",
                "rules": [{"pools": ["e2e-*"], "maxTtl": "1h", "maxConcurrentLeases": 1}],
            },
        }

    def apply(self, policy: dict[str, Any]) -> None:
        self.installation.apply(policy)

    def accepts(self, token: str) -> bool:
        call = urllib.request.Request(  # noqa: S310 - the installation's endpoint
            f"{self.installation.endpoint}/v1/pools", headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(call, timeout=30) as answer:  # noqa: S310
                return bool(answer.status == 200)
        except OSError:
            return False


@pytest.fixture(scope="module")
def sso(
    configured: Installation, tmp_path_factory: pytest.TempPathFactory, monkeypatch_module: Any
) -> Iterator[Sso]:
    work = tmp_path_factory.mktemp("identity")
    provider = identity.install(configured)
    state = Sso(configured, provider, work)
    # This process's own calls to the provider (the admin API is plain http; the issuer not).
    monkeypatch_module.setenv("SSL_CERT_FILE", str(state.trust))
    provider.hydra.public_client(state.client_id)
    state.apply(state.policy)
    token = provider.hydra.tokens(
        state.client_id, PERSON.username, PERSON.password, "openid email"
    )["id_token"]
    wait_for("the API trusting the provider", lambda: state.accepts(token), timeout=180)
    try:
        yield state
    finally:
        configured.kubectl("delete", "accesspolicy", "hydra-sso", "-n", NAMESPACE)
        identity.uninstall(configured)


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def run(sso: Sso, home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("LESSOR_")}
    return subprocess.run(
        [*LESSOR, *args], capture_output=True, text=True, timeout=600, check=False,
        env={
            **inherited, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
            "SSL_CERT_FILE": str(sso.trust),
            "BROWSER": f"{sys.executable} {Path(form_browser.__file__)} %s",
            "LESSOR_TEST_USER": PERSON.username, "LESSOR_TEST_PASSWORD": PERSON.password,
            **env,
        },
    )  # fmt: skip


def test_a_person_logs_in_at_the_provider_leases_and_is_refused_once_the_policy_tightens(
    sso: Sso, tmp_path: Path
) -> None:
    home = tmp_path / "dana"
    made = run(
        sso, home, "config", "set", "sso", "--endpoint", sso.installation.endpoint,
        "--auth", "oidc", "--oidc-issuer", sso.provider.issuer,
        "--oidc-client-id", sso.client_id, "--oidc-scope", "openid", "--oidc-scope", "email",
        "--oidc-scope", "offline_access",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    login = run(sso, home, "login")
    assert login.returncode == 0, login.stderr
    assert f"as {PERSON.email} (oidc)" in login.stdout

    leased = run(sso, home, "lease", "e2e-warm", "--ttl", "10m", "-o", "json")
    assert leased.returncode == 0, leased.stderr
    lease = json.loads(leased.stdout)
    assert lease["phase"] == "Bound"
    namespaces = subprocess.run(
        [str(ensure_binaries() / "kubectl"), "--kubeconfig", lease["kubeconfig"], "get", "ns"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert namespaces.returncode == 0 and "kube-system" in namespaces.stdout, namespaces.stderr
    assert run(sso, home, "release", lease["id"]).returncode == 0

    device = run(sso, home, "login", "--device")
    assert device.returncode == 3 and "offers no device flow" in device.stderr, device.stderr

    session = json.loads((home / ".config" / "lessor" / "sessions.json").read_text())
    token = session[sso.installation.endpoint]["token"]
    tightened = json.loads(json.dumps(sso.policy))
    tightened["spec"]["auth"]["oidc"]["requiredClaims"]["email"] = "ops@example.com"
    sso.apply(tightened)
    wait_for("the session refused", lambda: not sso.accepts(token), timeout=120)
    refused = run(sso, home, "lease", "e2e-warm", "--no-wait")
    assert refused.returncode == 3, (refused.stdout, refused.stderr)
    assert "could not be renewed" in refused.stderr and "lessor login" in refused.stderr
