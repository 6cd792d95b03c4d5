"""lessor's Deployments as a platform team runs them: what their probes and the API server's
PodDisruptionBudget do when a pod hangs or a node is drained. Only where the Deployments run as
pods (kind); on the local control plane they have no node and their components run as local
processes, so there is nothing of this to see there."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
import yaml

from e2e.installation import NAMESPACE, Installation, healthy, wait_for
from e2e.kind import chart
from e2e.kind.registry import assert_wrong_secret_is_refused
from lessor import __version__

pytestmark = pytest.mark.e2e
API_PODS = "app.kubernetes.io/name=lessor,app.kubernetes.io/component=apiserver"
COMPONENTS = "app.kubernetes.io/component in (operator,apiserver)"


@pytest.fixture
def pods_installation(installation: Installation) -> Installation:
    if installation.kind != "kind":
        pytest.skip("the Deployments run as pods only on kind (LESSOR_E2E_CLUSTER=kind)")
    return installation


def api_pods(installation: Installation) -> list[dict[str, Any]]:
    """The API server's pods that are not being deleted, oldest first."""
    listed = installation.kubectl("get", "pods", "-n", NAMESPACE, "-l", API_PODS, "-o", "json")
    pods = [
        p for p in json.loads(listed.stdout)["items"] if not p["metadata"].get("deletionTimestamp")
    ]
    return sorted(pods, key=lambda p: p["metadata"]["creationTimestamp"])


def ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def two_ready(installation: Installation) -> list[dict[str, Any]]:
    return wait_for(
        "two Ready API pods",
        lambda: (
            (pods := api_pods(installation)) and len(pods) == 2 and all(map(ready, pods)) and pods
        ),
        timeout=300,
    )


def the_service_answers_every_time(installation: Installation) -> bool:
    return all(healthy(installation.endpoint) for _ in range(10))


def pod(installation: Installation, name: str) -> dict[str, Any]:
    found = installation.kubectl("get", "pod", name, "-n", NAMESPACE, "-o", "json")
    return dict(json.loads(found.stdout))


def test_a_hung_api_pod_leaves_the_service_and_its_liveness_probe_restarts_it(
    pods_installation: Installation,
) -> None:
    installation = pods_installation
    hung = two_ready(installation)[0]
    name, node = hung["metadata"]["name"], hung["spec"]["nodeName"]
    [status] = hung["status"]["containerStatuses"]
    container = status["containerID"].split("://", 1)[1]
    # Every process of the container stopped, from the node (SIGSTOP from inside the pod could
    # not reach its PID 1): the API server then answers nothing, its probes included.
    freeze = (
        'for d in /proc/[0-9]*; do if grep -qs "$0" "$d/cgroup"; '
        'then kill -STOP "${d#/proc/}"; fi; done'
    )
    subprocess.run(["docker", "exec", node, "sh", "-c", freeze, container], check=True)
    wait_for("the hung pod unready", lambda: not ready(pod(installation, name)), timeout=120)
    wait_for(
        "every request through the Service answered by the other pod",
        lambda: the_service_answers_every_time(installation),
        timeout=60,
    )
    wait_for(
        "the liveness probe's restart, then Ready again",
        lambda: (
            (now := pod(installation, name))["status"]["containerStatuses"][0]["restartCount"]
            > status["restartCount"]
            and ready(now)
        ),
        timeout=300,
    )


def evict(installation: Installation, name: str) -> subprocess.CompletedProcess[str]:
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": NAMESPACE},
    }
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/eviction"
    return installation.kubectl(
        "create", "--raw", path, "-f", "-", input=json.dumps(eviction), check=False
    )


def test_draining_the_node_keeps_one_api_pod_serving(pods_installation: Installation) -> None:
    installation = pods_installation
    first, second = two_ready(installation)
    wait_for(
        "the budget to allow one disruption",
        lambda: (
            json.loads(
                installation.kubectl(
                    "get", "pdb", "lessor-apiserver", "-n", NAMESPACE, "-o", "json"
                ).stdout
            )["status"].get("disruptionsAllowed")
            == 1
        ),
        timeout=120,
    )
    node = first["spec"]["nodeName"]
    # Cordoned, the node takes no replacement: the budget alone decides the second eviction.
    installation.kubectl("cordon", node)
    try:
        evicted = evict(installation, first["metadata"]["name"])
        assert evicted.returncode == 0, evicted.stderr
        refused = evict(installation, second["metadata"]["name"])
        assert refused.returncode != 0 and "disruption budget" in refused.stderr, refused.stderr
        wait_for(
            "every request through the Service answered by the pod left",
            lambda: the_service_answers_every_time(installation),
            timeout=60,
        )
    finally:
        installation.kubectl("uncordon", node)
    two_ready(installation)


def test_lessor_is_a_helm_release_from_the_registry_with_every_object_installed(
    pods_installation: Installation,
) -> None:
    """In kind lessor is installed by docs/install.md from the session's registry
    (e2e/kind/platform_install.py): the release is deployed at its third revision (the doc's
    install and its upgrade step, then agentSandbox.mode external set as a value), its chart is
    this version's, from `oci://`, every object it rendered exists, and so do the CRDs of the
    chart's crds/, which Helm applies first. Every other scenario in kind runs on this
    release."""
    helm = pods_installation.helm
    assert helm is not None
    assert helm.release() == ("deployed", 3, f"lessor-{__version__}")
    assert helm.chart.startswith("oci://")
    values = json.loads(helm("get", "values", chart.RELEASE, "--output", "json"))
    assert values["config"]["agentSandbox"]["mode"] == "external"
    assert values["imagePullSecrets"] == [{"name": "lessor-pull"}], "as the doc's values say"
    manifest = helm("get", "manifest", chart.RELEASE)
    rendered = [d for d in yaml.safe_load_all(manifest) if d]
    found = pods_installation.kubectl("get", "-f", "-", "-o", "name", input=manifest)
    assert len(found.stdout.split()) == len(rendered) > 30
    crds = {f"{path.stem.split('_')[1]}.lessor.dev" for path in (chart.CHART / "crds").iterdir()}
    listed = pods_installation.kubectl("get", "crd", "-o", "name").stdout.split()
    assert crds <= {
        name.removeprefix("customresourcedefinition.apiextensions.k8s.io/") for name in listed
    }


def test_the_node_pulls_lessor_with_its_pull_secret_and_a_wrong_one_is_named(
    pods_installation: Installation,
) -> None:
    """lessor's pods run the image the node pulled from the registry, which refuses a pull
    without the session's credentials: a Deployment whose pull secret has a wrong password
    keeps failing with ErrImagePull or ImagePullBackOff and the registry's 401, named as such,
    within 30 s, not after a rollout's timeout."""
    registry = pods_installation.registry
    assert registry is not None
    pods = json.loads(
        pods_installation.kubectl(
            "get",
            "pods",
            "-n",
            NAMESPACE,
            "-o",
            "json",
            "-l",
            "app.kubernetes.io/name=lessor,app.kubernetes.io/component in (operator,apiserver)",
        ).stdout
    )["items"]
    images = {c["image"] for pod in pods for c in pod["spec"]["containers"]}
    assert images == {f"{registry.address}/lessor:{__version__}"}, images
    assert all(pod["spec"]["imagePullSecrets"] == [{"name": "lessor-pull"}] for pod in pods)
    message = assert_wrong_secret_is_refused(
        registry, pods_installation.kubectl, NAMESPACE, f"{registry.address}/lessor:{__version__}"
    )
    assert "ImagePullBackOff" in message or "ErrImagePull" in message, message
