"""Each backend's defaults are declared once, in its CRD model (lessor.resources.cluster): the
operator renders a pool without a settings block from that model's defaults, and the places
that cannot import the model (the kind node's preloaded images, the examples and the docs) are
held equal to it here, so that an image bump is one value and a forgotten copy fails a test."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.kind.components import KindVersions
from lessor.operator.backends import apiserver_manifests
from lessor.operator.backends.apiserver import ApiserverBackend
from lessor.operator.backends.base import InstanceRef
from lessor.operator.backends.k3s import K3sBackend
from lessor.operator.backends.vcluster import VclusterBackend
from lessor.resources.cluster import (
    ApiserverBackendConfig,
    Backend,
    K3sBackendConfig,
    VclusterBackendConfig,
)

ROOT = Path(__file__).resolve().parents[2]
INSTANCE = InstanceRef(namespace="lessor-system", name="ci-x7k2p", uid="0f1e2d3c-aaaa")
OWN = "lessor-ci-x7k2p-own"
K3S, VCLUSTER, APISERVER = K3sBackendConfig(), VclusterBackendConfig(), ApiserverBackendConfig()
DEFAULT_IMAGES = (
    K3S.image,
    VCLUSTER.image,
    VCLUSTER.kubernetes_image,
    VCLUSTER.coredns_image,
    APISERVER.image,
    APISERVER.etcd_image,
)


def pod(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    [statefulset] = [m for m in manifests if m["kind"] == "StatefulSet"]
    spec: dict[str, Any] = statefulset["spec"]["template"]["spec"]
    return spec


def images(spec: dict[str, Any]) -> list[str]:
    return [c["image"] for c in spec.get("initContainers", []) + spec["containers"]]


def test_a_k3s_pool_without_settings_runs_the_models_defaults() -> None:
    manifests = K3sBackend(None, Backend(type="k3s")).render(INSTANCE, OWN)  # type: ignore[arg-type]
    spec = pod(manifests)
    assert images(spec) == [K3S.image, K3S.image], "k3s and its publisher sidecar"
    requests = spec["containers"][0]["resources"]["requests"]
    assert requests == {"cpu": K3S.cpu, "memory": K3S.memory}
    assert spec["containers"][0]["resources"]["limits"]["memory"] == K3S.memory_limit
    [statefulset] = [m for m in manifests if m["kind"] == "StatefulSet"]
    [claim] = statefulset["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == K3S.storage_size


def test_a_vcluster_pool_without_settings_runs_the_models_defaults() -> None:
    backend = VclusterBackend(None, Backend(type="vcluster"))  # type: ignore[arg-type]
    manifests = backend.render(INSTANCE, OWN)
    spec = pod(manifests)
    assert images(spec) == [VCLUSTER.kubernetes_image, VCLUSTER.image]
    [secret] = [m for m in manifests if m["kind"] == "Secret"]
    configuration = yaml.safe_load(secret["stringData"]["config.yaml"])
    assert configuration["controlPlane"]["coredns"]["deployment"]["image"] == VCLUSTER.coredns_image
    requests = spec["containers"][0]["resources"]["requests"]
    assert requests == {"cpu": VCLUSTER.cpu, "memory": VCLUSTER.memory}
    assert backend.pod_security == VCLUSTER.pod_security


def test_an_apiserver_pool_without_settings_runs_the_models_defaults() -> None:
    backend = ApiserverBackend(None, Backend(type="apiserver"))  # type: ignore[arg-type]
    pki = {"ca.crt": b"ca", "apiserver.crt": b"crt"}
    spec = pod(apiserver_manifests.render(INSTANCE, backend.settings, backend.placement, pki))
    assert images(spec) == [APISERVER.etcd_image, APISERVER.image]
    requests = spec["containers"][1]["resources"]["requests"]
    assert requests == {"cpu": APISERVER.cpu, "memory": APISERVER.memory}


def test_the_apiserver_backends_default_images_are_those_the_kind_node_holds() -> None:
    """The e2e's apiserver pools run these defaults in kind, where no registry is reachable:
    they must be the images kubeadm of the pinned Kubernetes runs, which the node image built
    here holds (e2e/kind/node_image.py)."""
    pins = KindVersions.pinned()
    assert APISERVER.image == f"registry.k8s.io/kube-apiserver:{pins.kubernetes}"
    repository, tag = APISERVER.etcd_image.rsplit(":", 1)
    assert repository == "registry.k8s.io/etcd"
    # etcd's tags carry a build suffix ("3.6.6-0"), the pin is the release ("v3.6.6").
    assert tag.split("-")[0] == pins.etcd.removeprefix("v")


QUOTING = sorted(
    [
        *(ROOT / "manifests" / "examples").glob("*.yaml"),
        *(ROOT / "docs").glob("*.md"),
        ROOT / "README.md",
    ]
)


@pytest.mark.parametrize("image", DEFAULT_IMAGES)
def test_the_examples_and_docs_quote_each_default_image_at_its_default_tag(image: str) -> None:
    repository, tag = image.rsplit(":", 1)
    # The repository as a whole name: registry.k8s.io/coredns/coredns is another image.
    quoted = re.compile(rf"(?<![\w./-]){re.escape(repository)}:([\w.-]+)")
    stale = [
        f"{path.relative_to(ROOT)}: {repository}:{found}"
        for path in QUOTING
        for found in quoted.findall(path.read_text())
        if found.rstrip(".") != tag  # a sentence's full stop is not the tag's
    ]
    assert not stale, f"the model's default is {image}: bump these with it"
