"""Issue 46: a pool's addons and readiness gates, on real `local` clusters (kube-apiserver and
etcd processes) made by a real operator. A cluster is Ready, and a lease gets it, only once its
addons are in and its gates pass; a gate that never passes, or an addon the API refuses, fails
the start, says which, and the pool's backoff holds; a warm cluster whose gate stops passing is
replaced before a lease takes it.

`local` clusters have no controller manager, so a Deployment in them is never Available: that is
the real gate that never passes here (the kind scenario sees one pass, e2e/kind)."""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.kubectl import Cluster, ExistingCluster
from lessor.protocol.json_object import Json
from tests.integration.addon_sources import WIDGETS, gadgets_in_a_registry, serve_gadgets
from tests.integration.operator_harness import Objects, Operator, start_operator, wait_for

pytestmark = pytest.mark.integration


PULL_SECRET = """
apiVersion: v1
kind: Secret
metadata: {name: pull, namespace: ci}
type: kubernetes.io/dockerconfigjson
stringData: {.dockerconfigjson: '{"auths": {}}'}
"""

WEB = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: registry.k8s.io/pause:3.10}]}
"""


@pytest.fixture(scope="module")
def chart_repository(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serve_gadgets(tmp_path_factory.mktemp("charts")) as url:
        yield url


@pytest.fixture(scope="module")
def chart_in_a_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with gadgets_in_a_registry(tmp_path_factory.mktemp("oci")) as reference:
        yield reference


def kubectl_in(objects: Objects, secret: str, tmp_path: Path) -> ExistingCluster:
    """kubectl on a cluster lessor made, with the kubeconfig in `secret`."""
    found = objects.get("secret", secret)
    assert found is not None, secret
    path = tmp_path / f"{secret}.kubeconfig"
    path.write_bytes(base64.b64decode(found["data"]["kubeconfig"]))
    return ExistingCluster(kubeconfig=path, kubectl_path=str(ensure_binaries() / "kubectl"))


def conditions(instance: Json) -> dict[str, tuple[str, str]]:
    return {
        c["type"]: (c["status"], c["reason"])
        for c in instance.get("status", {}).get("conditions", [])
    }


def test_a_lease_gets_a_cluster_with_its_addons_in_and_its_gates_passed(
    cluster: Cluster, env: tuple[Objects, list[Operator]], tmp_path: Path
) -> None:
    objects, started = env
    start_operator(cluster, objects, started, tmp_path)
    # The second addon's manifests are a ConfigMap's, in the operator's namespace.
    objects.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "pull-secret-v1"},
            "data": {"manifests.yaml": PULL_SECRET},
        }
    )
    objects.pool(
        "ready",
        warmTarget=1,
        addons=[
            {"name": "widgets", "manifests": WIDGETS},
            {"name": "pull-secret", "configMapRef": {"name": "pull-secret-v1"}},
        ],
        readinessGates={"crdsEstablished": ["widgets.example.com"]},
    )
    objects.lease("job", "ready")
    bound = objects.wait_phase("job", "Bound")
    # What the job sees, with its own kubeconfig, at the moment it is Bound.
    job = kubectl_in(objects, "lease-job-kubeconfig", tmp_path)
    established = job.kubectl(
        "get", "crd", "widgets.example.com",
        "-o", "jsonpath={.status.conditions[?(@.type=='Established')].status}",
    ).stdout  # fmt: skip
    assert established == "True"
    assert job.kubectl("get", "widget", "first", "-n", "ci", "-o", "name").stdout.strip()
    assert job.kubectl("get", "secret", "pull", "-n", "ci", "-o", "name").stdout.strip()
    instance = objects.get("clusterinstance", bound["status"]["clusterName"])
    assert instance is not None
    assert conditions(instance)["AddonsApplied"] == ("True", "Applied")
    assert conditions(instance)["CRDsEstablished"] == ("True", "Established")
    # The addons are the template: the instance carries the pool's, as it carries its backend.
    assert [a["name"] for a in instance["spec"]["addons"]] == ["widgets", "pull-secret"]


def test_a_gate_that_never_passes_fails_the_start_naming_it_and_the_backoff_holds(
    cluster: Cluster, env: tuple[Objects, list[Operator]], tmp_path: Path
) -> None:
    objects, started = env
    start_operator(cluster, objects, started, tmp_path, extra=("--start-timeout=3",))
    objects.pool(
        "gated",
        warmTarget=1,
        addons=[{"name": "web", "manifests": WEB}],
        readinessGates={"deploymentsAvailable": ["default/web"]},
    )
    wait_for(
        "two failed starts",
        lambda: objects.pool_status("gated").get("startFailures", 0) >= 2,
        timeout=180,
    )
    condition = objects.backend_healthy("gated")
    assert condition["reason"] == "StartFailing"
    assert (
        "DeploymentsAvailable: not available: default/web (0 of 1 available)"
        in (condition["message"])
    )
    failed = [e for e in objects.list("events") if e.get("reason") == "FailedToStart"]
    assert failed and "DeploymentsAvailable" in failed[0]["message"]
    _assert_no_start_before_retry(objects, "gated")


def test_an_addon_the_api_refuses_fails_the_start_at_once_and_says_why(
    cluster: Cluster, env: tuple[Objects, list[Operator]], tmp_path: Path
) -> None:
    """Refused the same way at every try: the start fails at the first, not after the start
    timeout (five minutes here), and the pool waits out its backoff before the next."""
    objects, started = env
    start_operator(cluster, objects, started, tmp_path)
    refused = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Not_A_Name}\n"
    objects.pool("broken", warmTarget=1, addons=[{"name": "bad", "manifests": refused}])
    wait_for(
        "a failed start",
        lambda: objects.pool_status("broken").get("startFailures", 0) >= 1,
        timeout=60,  # the start timeout is 300 s: only a failure at once is seen in time
    )
    message = objects.backend_healthy("broken")["message"]
    assert "AddonsApplied: addon bad: ConfigMap Not_A_Name:" in message
    assert "Invalid value" in message  # the API's own words
    notes = [note for reason, note in _events(objects) if reason == "FailedToStart"]
    assert notes and notes[0].startswith("AddonsApplied: addon bad")
    _assert_no_start_before_retry(objects, "broken")


def test_a_warm_cluster_whose_gate_stops_passing_is_replaced_before_a_lease_takes_it(
    cluster: Cluster, env: tuple[Objects, list[Operator]], tmp_path: Path
) -> None:
    objects, started = env
    operator = start_operator(cluster, objects, started, tmp_path)
    objects.pool(
        "checked",
        warmTarget=1,
        healthCheck={"period": "2s", "failureThreshold": 2},
        addons=[{"name": "widgets", "manifests": WIDGETS}],
        readinessGates={"crdsEstablished": ["widgets.example.com"]},
    )
    wait_for("1 ready", lambda: objects.pool_status("checked").get("ready") == 1)
    [warm] = objects.list("clusterinstances")
    name = warm["metadata"]["name"]
    admin = kubectl_in(objects, f"{name}-kubeconfig", tmp_path)
    admin.kubectl("delete", "crd", "widgets.example.com")
    wait_for(
        "a replacement, ready",
        lambda: (
            objects.pool_status("checked").get("ready") == 1
            and name not in {i["metadata"]["name"] for i in objects.list("clusterinstances")}
        ),
        timeout=120,
    )
    reasons = objects.events(name)
    assert "Unhealthy" in reasons and "TeardownVerified" in reasons
    unhealthy = [note for reason, note in objects.event_notes(name) if reason == "Unhealthy"]
    assert unhealthy[0] == (
        "2 checks failed in a row: CRDsEstablished: not established: widgets.example.com"
        " (not found)"
    )
    replaced = 'lessor_clusters_replaced_total{namespace="%s",pool="checked",reason="unhealthy"}'
    assert operator.metric(replaced % objects.namespace) == 1


def leased_with_chart(
    objects: Objects, pool: str, chart: Json, tmp_path: Path
) -> tuple[ExistingCluster, Json]:
    """A lease of a new pool whose one addon is the gadgets `chart` (gated on its CRD), Bound:
    kubectl with the lease's kubeconfig, and the chart's settings ConfigMap as the lease sees it."""
    objects.pool(
        pool,
        warmTarget=1,
        addons=[{"name": "gadgets", "chart": chart}],
        readinessGates={"crdsEstablished": ["gadgets.example.com"]},
    )
    objects.lease("job", pool)
    objects.wait_phase("job", "Bound")
    job = kubectl_in(objects, "lease-job-kubeconfig", tmp_path)
    settings = json.loads(
        job.kubectl("get", "configmap", "gadgets-settings", "-n", "gadgets", "-o", "json").stdout
    )
    return job, settings


def test_a_chart_from_a_repository_is_rendered_with_its_values_into_its_namespace(
    cluster: Cluster, env: tuple[Objects, list[Operator]], tmp_path: Path, chart_repository: str
) -> None:
    objects, started = env
    start_operator(cluster, objects, started, tmp_path)
    chart = {
        "repository": chart_repository, "name": "gadgets", "version": "0.3.1",
        "namespace": "gadgets", "values": {"greeting": "hi from the pool"},
    }  # fmt: skip
    job, settings = leased_with_chart(objects, "charted", chart, tmp_path)
    assert settings["data"] == {"greeting": "hi from the pool", "namespace": "gadgets"}
    assert job.kubectl("get", "deployment", "gadgets-controller", "-n", "gadgets").returncode == 0
    assert job.kubectl("get", "crd", "gadgets.example.com").returncode == 0
    # A chart is not a Helm release here: no release Secret, nothing for `helm upgrade`.
    secrets = job.kubectl("get", "secrets", "-n", "gadgets", "-o", "name").stdout
    assert "sh.helm.release" not in secrets


def test_a_chart_from_an_oci_registry_is_rendered_and_applied(
    cluster: Cluster, env: tuple[Objects, list[Operator]], tmp_path: Path, chart_in_a_registry: str
) -> None:
    objects, started = env
    start_operator(cluster, objects, started, tmp_path)
    chart = {"repository": chart_in_a_registry, "version": "0.3.1", "namespace": "gadgets"}
    _, settings = leased_with_chart(objects, "oci", chart, tmp_path)
    assert settings["data"] == {"greeting": "hello", "namespace": "gadgets"}  # its defaults


def test_a_chart_that_does_not_exist_fails_the_start_at_once_and_says_so(
    cluster: Cluster, env: tuple[Objects, list[Operator]], tmp_path: Path, chart_repository: str
) -> None:
    objects, started = env
    start_operator(cluster, objects, started, tmp_path)
    chart = {"repository": chart_repository, "name": "gadgets", "version": "9.9.9"}
    objects.pool("missing", warmTarget=1, addons=[{"name": "gadgets", "chart": chart}])
    wait_for(
        "a failed start",
        lambda: objects.pool_status("missing").get("startFailures", 0) >= 1,
        timeout=60,  # the start timeout is 300 s: only a failure at once is seen in time
    )
    message = objects.backend_healthy("missing")["message"]
    assert "AddonsApplied: addon gadgets: helm template failed:" in message
    assert "9.9.9" in message  # helm's own words name the version it did not find
    _assert_no_start_before_retry(objects, "missing")


def _events(objects: Objects) -> list[tuple[str, str]]:
    return [(e["reason"], e.get("message", "")) for e in objects.list("events")]


def _assert_no_start_before_retry(objects: Objects, pool: str) -> None:
    """Until the pool's retryAt, no new cluster is started (when it is far enough away to see)."""
    retry_at = datetime.datetime.fromisoformat(objects.pool_status(pool)["retryAt"])
    if retry_at - datetime.datetime.now(datetime.UTC) > datetime.timedelta(seconds=5):
        starting = [
            i
            for i in objects.list("clusterinstances")
            if not i["metadata"].get("deletionTimestamp")
        ]
        assert starting == [], json.dumps([i["metadata"]["name"] for i in starting])
