"""ORY Hydra and its login-and-consent pages as a pod in kind, the identity provider of
e2e/test_identity.py, deployed as a platform team runs theirs: https on an address both the
API pods and people reach (a NodePort on the node's address, with a certificate for it from a
CA the test holds, which the AccessPolicy's `caBundle` and the person's trust store name).

The image is the binary the integration tests run (tests/identity/hydra.py, built once into
the cache, static) and the pages' one standard-library file, on lessor's python base, loaded
into kind as vcluster's image is. Hydra's admin API gets a NodePort too: the tests' automation
registers the CLI's client and rotates keys through it, as a deployer's would.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.installation import Installation
from e2e.kind import lessor_image
from e2e.kind.lessor_image import say
from e2e.kind.sandboxes import build_image
from lessor.controlplane.pki import CertificateAuthority
from tests.identity import login_consent
from tests.identity.hydra import HYDRA, Hydra, config, hydra_binary

NAMESPACE = "lessor-identity"
IMAGE = f"lessor-e2e/identity:{HYDRA}"
PUBLIC, ADMIN, PAGES = 4444, 4445, 3000
RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "seccompProfile": {"type": "RuntimeDefault"},
}


@dataclass(frozen=True)
class KindProvider:
    hydra: Hydra  # its issuer and admin API, as the host reaches them
    ca_pem: bytes  # what signed the issuer's certificate

    @property
    def issuer(self) -> str:
        return self.hydra.issuer


def image() -> str:
    pages = b"#!/usr/bin/python3\n" + Path(login_consent.__file__).read_bytes()
    files = {"hydra": hydra_binary().read_bytes(), "login-consent": pages}
    dockerfile = (
        "COPY hydra /usr/local/bin/hydra\nCOPY login-consent /usr/local/bin/login-consent\n"
        "USER 65532:65532\n"
    )
    return build_image(IMAGE, lessor_image.python_base(say), files, dockerfile, say)


def install(installation: Installation) -> KindProvider:
    assert installation.cluster is not None, "the provider runs in kind only"
    kubectl = installation.kubectl
    tag = image()
    installation.cluster.load(tag)
    kubectl("create", "namespace", NAMESPACE)
    ports = _services(installation)
    address = kubectl(
        "get", "nodes", "-o",
        "jsonpath={.items[0].status.addresses[?(@.type=='InternalIP')].address}",
    ).stdout.strip()  # fmt: skip
    authority = CertificateAuthority("lessor-e2e-identity-ca")
    pair = authority.issue(address, server_names=(address,))
    issuer = f"https://{address}:{ports[PUBLIC]}"
    pages = f"http://{address}:{ports[PAGES]}"
    settings = config(issuer, pages, PUBLIC, ADMIN, (pair.cert_pem, pair.key_pem))
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "hydra-config", "namespace": NAMESPACE},
        "stringData": {"hydra.json": json.dumps(settings)},
    }
    kubectl("apply", "-f", "-", input=json.dumps(secret))
    kubectl("apply", "-f", "-", input=json.dumps(_deployment(tag)))
    kubectl("rollout", "status", "deployment/hydra", "-n", NAMESPACE, "--timeout=300s")
    hydra = Hydra(issuer, f"http://{address}:{ports[ADMIN]}")
    hydra.wait_ready()
    return KindProvider(hydra, authority.cert_pem)


def uninstall(installation: Installation) -> None:
    installation.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


def _services(installation: Installation) -> dict[int, int]:
    """A NodePort per address (the issuer, the admin API, the pages); their node ports."""
    found = {}
    for name, port in (("hydra-public", PUBLIC), ("hydra-admin", ADMIN), ("pages", PAGES)):
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "type": "NodePort",
                "selector": {"app": "hydra"},
                "ports": [{"port": port, "targetPort": port}],
            },
        }
        applied = installation.kubectl("apply", "-f", "-", "-o", "json", input=json.dumps(service))
        found[port] = int(json.loads(applied.stdout)["spec"]["ports"][0]["nodePort"])
    return found


def _deployment(tag: str) -> dict[str, Any]:
    hydra = {
        "name": "hydra",
        "image": tag,
        "imagePullPolicy": "Never",
        "args": ["hydra", "serve", "all", "--dev", "--config", "/etc/hydra/hydra.json"],
        "volumeMounts": [{"name": "config", "mountPath": "/etc/hydra", "readOnly": True}],
        "readinessProbe": {"httpGet": {"path": "/health/ready", "port": ADMIN}},
        "securityContext": RESTRICTED,
    }
    pages = {
        "name": "pages",
        "image": tag,
        "imagePullPolicy": "Never",
        "args": ["login-consent", f"--hydra-admin=http://127.0.0.1:{ADMIN}", f"--port={PAGES}"],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": PAGES}},
        "securityContext": RESTRICTED,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "hydra", "namespace": NAMESPACE},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "hydra"}},
            "template": {
                "metadata": {
                    "labels": {"app": "hydra"},
                    # A new secret each install: the pod restarts with the config it names.
                    "annotations": {"lessor.dev/e2e-install": secrets.token_hex(4)},
                },
                "spec": {
                    "containers": [hydra, pages],
                    "volumes": [{"name": "config", "secret": {"secretName": "hydra-config"}}],
                },
            },
        },
    }
