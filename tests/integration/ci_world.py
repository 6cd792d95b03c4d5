"""The CI systems' world for the tests of CI jobs (test_identity, test_ci_pipelines): their
issuers under their real names, an API server that reaches them only through a proxy that knows
just those names, the shipped example policies as they are, and the pool they grant. Import the
`ci_world` fixture (and test_cli's `stack`) into a module to use it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from lessor.controlplane.pki import CertificateAuthority
from tests.identity.ci_issuers import GITHUB, GITLAB, CiIssuer, NameRoutingProxy
from tests.integration.test_apiserver import Api, start_api
from tests.integration.test_cli import Stack

EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"


@dataclass
class CiWorld:
    api: Api
    github: CiIssuer
    gitlab: CiIssuer
    proxy: NameRoutingProxy


@pytest.fixture(scope="module")
def ci_world(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CiWorld]:
    """The CI systems' issuers under their real names, an API server that reaches them only
    through a proxy that knows just those names, the shipped example policies as they are (in
    the stack's namespace), and the pool they grant."""
    directory = tmp_path_factory.mktemp("ci")
    authority = CertificateAuthority("ci-issuers-test-ca")
    trusted = directory / "ca.pem"
    trusted.write_bytes(authority.cert_pem)
    github = CiIssuer(GITHUB, "/.well-known/jwks")
    gitlab_issuer = CiIssuer(GITLAB, "/oauth/discovery/keys")
    servers = [github.serve(authority), gitlab_issuer.serve(authority)]
    proxy = NameRoutingProxy({github.host: github.port, gitlab_issuer.host: gitlab_issuer.port})
    for name in ("accesspolicy-ci-issuer.yaml", "accesspolicy-gitlab-ci.yaml"):
        document = yaml.safe_load((EXAMPLES / name).read_text())
        document["metadata"]["namespace"] = stack.namespace  # where it is installed, only
        stack.cluster.kubectl("apply", "-f", "-", input=json.dumps(document))
    pool = {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "ClusterPool",
        "metadata": {"name": "ci-virtual", "namespace": stack.namespace},
        "spec": {"warmTarget": 1, "ttl": "30m", "backend": {"type": "local"}},
    }
    stack.cluster.kubectl("apply", "-f", "-", input=json.dumps(pool))
    environment = {
        "HTTPS_PROXY": proxy.url,
        "NO_PROXY": "127.0.0.1,localhost",
        "SSL_CERT_FILE": str(trusted),
    }
    process, api = start_api(stack.cluster, stack.namespace, directory / "api.log", env=environment)
    try:
        yield CiWorld(api, github, gitlab_issuer, proxy)
    finally:
        process.terminate()
        process.wait(timeout=60)
        proxy.close()
        for server in servers:
            server.shutdown()
