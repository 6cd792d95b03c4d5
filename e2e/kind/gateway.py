"""A Gateway API gateway in kind, Traefik built here, for TLS passthrough to leased clusters.

lessor can expose a leased cluster's API through a Gateway: a TLSRoute per cluster, matched by
SNI under one wildcard listener in Passthrough mode, so the cluster's own certificate reaches the
client. To prove that in kind, a Gateway API implementation must run there, and no registry is
reachable here, so Traefik is built from its Go module at the pinned version (`traefik` in
versions.json) and packed on lessor's Debian python base, as vcluster's image is.

The module zip of Traefik v3.7.13 does not build as it is: the nested module
`pkg/config/dynamic/ext` its go.mod replaces by a directory is left out of the zip (written here),
the pinned fork of go-http-auth is refused by the module proxy (the fork's previous pseudo-version
is used), and lego's registry of ACME DNS providers imports 13 providers whose dependencies the
proxy refuses (a copy of lego with those dropped; the gateway uses no ACME). Each edit must find
its exact text, so a new version fails here instead of building something else.

The CRDs are the Gateway API's standard channel (`gatewayApi`, the version Traefik's go.mod
requires), whose TLSRoute is gateway.networking.k8s.io/v1, the version Traefik watches.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from e2e.kind.cluster import KindCluster
from e2e.kind.components import module_dir, require_go
from e2e.kind.lessor_image import say
from e2e.kind.sandboxes import build_image
from lessor.controlplane.binaries import Progress, build_once, cache_root, run_go
from lessor.controlplane.errors import ControlPlaneError
from lessor.controlplane.kubectl import ExistingCluster, wait_established
from lessor.operator.backends.instance_namespace import NAMESPACE_LABEL, POD_SECURITY

Kubectl = Callable[..., subprocess.CompletedProcess[str]]

MODULE = "github.com/traefik/traefik/v3"
GATEWAY_API = "sigs.k8s.io/gateway-api"
GROUP = "gateway.networking.k8s.io"
LEGO = "github.com/go-acme/lego/v5"
MISSING_GO = "the Go toolchain (go 1.26 or newer) is needed to build Traefik's image"

NAMESPACE = "lessor-gateway"
NAME = "clusters"
SECTION = "tls"
PORT = 8443
PING_PORT = 9000
DOMAIN = "clusters.lessor.test"
GATEWAY_CLASS = "lessor-traefik"
CONTROLLER_NAME = "traefik.io/gateway-controller"
READY_TIMEOUT = 300.0

EXT_GO_MOD = "module github.com/traefik/traefik/dynamic/ext\n\ngo 1.26.0\n"
EXT_GO = """package ext

// HTTP is a dynamic.HTTP extension.
type HTTP struct{}

// Router is a dynamic.Router extension.
type Router struct{}
"""
HTTP_AUTH = "github.com/abbot/go-http-auth => github.com/containous/go-http-auth"
HTTP_AUTH_PINNED = "v0.4.1-0.20260804094822-b975dcaa8c48"
HTTP_AUTH_SERVED = "v0.4.1-0.20200324110947-a37a7636d23e"
# lego's providers whose dependencies the proxy refuses, with the names its factory matches.
DROPPED_DNS_PROVIDERS = {
    "alidns": '"alidns"',
    "aliesa": '"aliesa"',
    "azion": '"azion"',
    "dnsimple": '"dnsimple"',
    "edgedns": '"edgedns", "fastdns"',
    "edgeone": '"edgeone"',
    "huaweicloud": '"huaweicloud"',
    "oraclecloud": '"oraclecloud"',
    "regfish": '"regfish"',
    "sakuracloud": '"sakuracloud"',
    "tencentcloud": '"tencentcloud"',
    "ucloud": '"ucloud"',
    "yandexcloud": '"yandexcloud"',
}


def pins() -> dict[str, str]:
    data: dict[str, str] = json.loads(
        resources.files("e2e.kind").joinpath("versions.json").read_text()
    )
    return {"traefik": data["traefik"], "gatewayApi": data["gatewayApi"]}


def image() -> str:
    return f"lessor-traefik:{pins()['traefik']}"


def _replace_once(text: str, old: str, new: str, where: Path) -> str:
    """`old` replaced by `new`, or an error when `old` is not there exactly once."""
    found = text.count(old)
    if found != 1:
        raise ControlPlaneError(f"patching {where}: expected once, found {found} times: {old!r}")
    return text.replace(old, new)


def _writable_copy(source: Path, target: Path) -> Path:
    """A copy of a module from the read-only module cache that can be edited."""
    shutil.copytree(source, target, copy_function=shutil.copyfile)
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    return target


def _patched_lego(go: str, version: str, work: Path, progress: Progress) -> Path:
    """lego without the DNS providers the module proxy cannot build."""
    lego = _writable_copy(module_dir(go, f"{LEGO}@{version}", progress), work / "lego")
    registry = lego / "providers" / "dns" / "zz_gen_dns_providers.go"
    text = registry.read_text()
    for package, names in DROPPED_DNS_PROVIDERS.items():
        text = _replace_once(text, f'\t"{LEGO}/providers/dns/{package}"\n', "", registry)
        case = f"\tcase {names}:\n\t\treturn {package}.NewDNSProvider()\n"
        text = _replace_once(text, case, "", registry)
    registry.write_text(text)
    return lego


def _patched_traefik(go: str, version: str, work: Path, progress: Progress) -> Path:
    source = _writable_copy(module_dir(go, f"{MODULE}@{version}", progress), work / "traefik")
    ext = source / "pkg" / "config" / "dynamic" / "ext"
    if ext.exists():
        raise ControlPlaneError(f"{MODULE}@{version} ships {ext.name} now: drop its patch")
    ext.mkdir()
    (ext / "go.mod").write_text(EXT_GO_MOD)
    (ext / "ext.go").write_text(EXT_GO)
    go_mod = source / "go.mod"
    text = go_mod.read_text()
    text = _replace_once(
        text, f"\t{HTTP_AUTH} {HTTP_AUTH_PINNED}\n", f"\t{HTTP_AUTH} {HTTP_AUTH_SERVED}\n", go_mod
    )
    lego = re.search(rf"^\t{re.escape(LEGO)} (v\S+)$", text, re.MULTILINE)
    if lego is None:
        raise ControlPlaneError(f"{go_mod} requires no {LEGO}")
    patched = _patched_lego(go, lego.group(1), work, progress)
    go_mod.write_text(f"{text}\nreplace {LEGO} => ../{patched.name}\n")
    return source


def ensure_traefik(progress: Progress = say) -> Path:
    """The directory holding `traefik`, built into the cache on first use (minutes)."""
    version = pins()["traefik"]
    target = cache_root() / "traefik" / f"traefik-{version}"

    def build(go: str, work: Path, out: Path) -> None:
        source = _patched_traefik(go, version, work, progress)
        ldflags = f"-s -w -X {MODULE}/pkg/version.Version={version}"
        command = ["build", "-trimpath", "-ldflags", ldflags, "-o", str(out / "traefik"),
                   "./cmd/traefik"]  # fmt: skip
        run_go(go, command, source, progress)

    return build_once(
        target,
        (target / "traefik").is_file,
        build,
        what=f"Traefik {version}",
        missing_go=MISSING_GO,
        progress=progress,
    )


def build(base: str, progress: Progress = say) -> str:
    """`lessor-traefik:<version>` on `base` (lessor's Debian python base), unless built from
    the same binary already."""
    binary = (ensure_traefik(progress) / "traefik").read_bytes()
    dockerfile = (
        "COPY traefik /usr/local/bin/traefik\n"
        "USER 65532:65532\n"
        'ENTRYPOINT ["/usr/local/bin/traefik"]\n'
    )
    return build_image(image(), base, {"traefik": binary}, dockerfile, progress)


def gateway_api_crds(progress: Progress = say) -> list[dict[str, Any]]:
    """The CRDs of the Gateway API's standard channel at the pinned version, from the module
    (its kustomization's list; the ValidatingAdmissionPolicy it also lists, which guards CRD
    upgrades, is left out)."""
    version = pins()["gatewayApi"]
    crd_dir = module_dir(require_go(), f"{GATEWAY_API}@{version}", progress) / "config" / "crd"
    listed = yaml.safe_load((crd_dir / "kustomization.yaml").read_text())["resources"]
    crds = [
        document
        for name in listed
        for document in yaml.safe_load_all((crd_dir / name).read_text())
        if document and document["kind"] == "CustomResourceDefinition"
    ]
    served = {
        (crd["metadata"]["name"], entry["name"])
        for crd in crds
        for entry in crd["spec"]["versions"]
        if entry["served"]
    }
    if (f"tlsroutes.{GROUP}", "v1") not in served:
        raise ControlPlaneError(f"{GATEWAY_API}@{version}'s standard channel serves no TLSRoute v1")
    return crds


@dataclass(frozen=True)
class Gateway:
    """The Gateway a TLSRoute names as its parent, and where the host machine reaches it."""

    name: str
    namespace: str
    section: str
    address: str
    port: int


def _rbac() -> list[dict[str, Any]]:
    """Traefik's reference RBAC for the Gateway provider, less what this gateway never reads:
    pods (OpenTelemetry attributes only) and TCPRoutes (experimental channel only)."""
    resources = ["gatewayclasses", "gateways", "httproutes", "grpcroutes", "tlsroutes",
                 "referencegrants", "backendtlspolicies"]  # fmt: skip
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "lessor-gateway-traefik"},
        "rules": [
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
            {
                "apiGroups": [""],
                "resources": ["services", "secrets", "configmaps"],
                "verbs": ["get", "list", "watch"],
            },
            {
                "apiGroups": ["discovery.k8s.io"],
                "resources": ["endpointslices"],
                "verbs": ["list", "watch"],
            },
            {"apiGroups": [GROUP], "resources": resources, "verbs": ["get", "list", "watch"]},
            {
                "apiGroups": [GROUP],
                "resources": [f"{resource}/status" for resource in resources],
                "verbs": ["update"],
            },
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "lessor-gateway-traefik"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "lessor-gateway-traefik",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "traefik", "namespace": NAMESPACE}],
    }
    return [role, binding]


def _deployment(tag: str) -> dict[str, Any]:
    """One Traefik, as Pod Security `restricted` admits it."""
    labels = {"app.kubernetes.io/name": "traefik"}
    args = [
        "--providers.kubernetesgateway",
        f"--entrypoints.{SECTION}.address=:{PORT}",
        f"--entrypoints.traefik.address=:{PING_PORT}",
        "--ping",
        "--global.checknewversion=false",
        "--global.sendanonymoususage=false",
    ]
    container = {
        "name": "traefik",
        "image": tag,
        "imagePullPolicy": "Never",
        "args": args,
        "ports": [
            {"name": SECTION, "containerPort": PORT},
            {"name": "traefik", "containerPort": PING_PORT},
        ],
        "readinessProbe": {"httpGet": {"path": "/ping", "port": PING_PORT}, "periodSeconds": 2},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "traefik", "namespace": NAMESPACE},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": "traefik",
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65532,
                        "runAsGroup": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                },
            },
        },
    }


def manifests(tag: str) -> list[dict[str, Any]]:
    """The namespace, Traefik running `tag`, its NodePort Service, and the Gateway."""
    restricted = {f"{POD_SECURITY}{mode}": "restricted" for mode in ("enforce", "warn")}
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": restricted},
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "traefik", "namespace": NAMESPACE},
        },
        *_rbac(),
        _deployment(tag),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "traefik", "namespace": NAMESPACE},
            "spec": {
                "type": "NodePort",
                "selector": {"app.kubernetes.io/name": "traefik"},
                "ports": [{"name": SECTION, "port": PORT, "targetPort": SECTION}],
            },
        },
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "GatewayClass",
            "metadata": {"name": GATEWAY_CLASS},
            "spec": {"controllerName": CONTROLLER_NAME},
        },
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Gateway",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {
                "gatewayClassName": GATEWAY_CLASS,
                "listeners": [
                    {
                        "name": SECTION,
                        "port": PORT,
                        "protocol": "TLS",
                        "hostname": f"*.{DOMAIN}",
                        "tls": {"mode": "Passthrough"},
                        "allowedRoutes": {
                            "namespaces": {
                                "from": "Selector",
                                "selector": {"matchLabels": {NAMESPACE_LABEL: "true"}},
                            },
                            "kinds": [{"kind": "TLSRoute"}],
                        },
                    }
                ],
            },
        },
    ]


def _apply(kubectl: Kubectl, documents: list[dict[str, Any]]) -> None:
    """Server-side: the CRDs are too big for the last-applied annotation."""
    listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": documents})
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=listed)


def _not_programmed(gateway: dict[str, Any]) -> str | None:
    """What the Gateway and its listener still lack of Programmed=True, or None."""

    def programmed(conditions: list[dict[str, Any]]) -> str:
        found = [c for c in conditions if c["type"] == "Programmed"]
        return found[0]["status"] if found else "not set"

    status = gateway.get("status", {})
    current = [
        c
        for c in status.get("conditions", [])
        if c.get("observedGeneration") == gateway["metadata"]["generation"]
    ]
    listeners = [
        listener for listener in status.get("listeners", []) if listener["name"] == SECTION
    ]
    states = {
        "Gateway": programmed(current),
        f"listener {SECTION}": programmed(listeners[0]["conditions"] if listeners else []),
    }
    if all(state == "True" for state in states.values()):
        return None
    return ", ".join(f"{what} Programmed: {state}" for what, state in states.items())


def _wait_programmed(kubectl: Kubectl, progress: Progress) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    said = None
    while True:
        got = kubectl("get", "gateway", NAME, "-n", NAMESPACE, "-o", "json").stdout
        pending = _not_programmed(json.loads(got))
        if pending is None:
            return
        if pending != said:
            progress(f"  waiting for Gateway {NAMESPACE}/{NAME}: {pending}")
            said = pending
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"Gateway {NAMESPACE}/{NAME} not programmed in {READY_TIMEOUT:.0f}s: {pending}"
            )
        time.sleep(1)


def install(kubectl: Kubectl, cluster: KindCluster, base: str, progress: Progress = say) -> Gateway:
    """Traefik serving the Gateway `clusters` in the cluster, its listener programmed; applying
    again on the same cluster changes nothing."""
    tag = build(base, progress)
    cluster.load(tag)
    crds = gateway_api_crds(progress)
    _apply(kubectl, crds)
    host = ExistingCluster.from_kubeconfig(cluster.kubeconfig, cluster.kubectl)
    wait_established(host, *(crd["metadata"]["name"] for crd in crds))
    _apply(kubectl, manifests(tag))
    progress(f"waiting for Traefik in {NAMESPACE}")
    kubectl("rollout", "status", "deployment/traefik", "-n", NAMESPACE, "--timeout=240s")
    _wait_programmed(kubectl, progress)
    node_port = kubectl(
        "get", "service", "traefik", "-n", NAMESPACE, "-o",
        f"jsonpath={{.spec.ports[?(@.name=='{SECTION}')].nodePort}}",
    ).stdout  # fmt: skip
    address = kubectl(
        "get", "nodes", "-o",
        "jsonpath={.items[0].status.addresses[?(@.type=='InternalIP')].address}",
    ).stdout.strip()  # fmt: skip
    gateway = Gateway(NAME, NAMESPACE, SECTION, address, int(node_port))
    progress(f"Gateway {NAMESPACE}/{NAME} programmed; *.{DOMAIN} on {address}:{node_port}")
    return gateway


if __name__ == "__main__":
    from e2e.kind.lessor_image import python_base

    print(build(python_base(say)))
