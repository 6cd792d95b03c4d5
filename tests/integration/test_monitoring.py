"""manifests/monitoring against the real things: the Prometheus Operator's own CRDs in the real
kube-apiserver (a server-side dry run of every object), promtool on the alerting rules (their
syntax and a unit test of alerts firing), and the metrics the rules and the dashboard query,
each found on the /metrics of a real operator and a real API server after a lease was bound and
released, which also shows the lease counted once, and not again by a restarted operator."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.kubectl import Cluster, wait_established
from tests.integration.kustomize import dry_run_apply, kustomize
from tests.integration.monitoring_tools import operator_crds, promtool
from tests.integration.operator_harness import Operator, destroy_local_clusters, wait_for
from tests.integration.test_apiserver import Api, start_api

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "manifests" / "monitoring"
RULES = MONITORING / "prometheusrule.yaml"
DASHBOARD = MONITORING / "dashboards" / "lessor.json"
NAMESPACE = "lessor-system"
# lessor's metric names (and the one the spec names, svc_...); PromQL's functions, label names
# and keywords never start so.
METRIC = re.compile(r"\b(?:lessor|svc)_[a-z0-9_]+\b")
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]")


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["spec"]["groups"]
    return groups


def queries() -> list[str]:
    """Every PromQL expression of the alerting rules and the dashboard (panels and variables)."""
    found = [rule["expr"] for group in rule_groups() for rule in group["rules"]]
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        found += [target["expr"] for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if isinstance(variable.get("query"), dict):
            found.append(variable["query"]["query"])
    return found


def served(text: str) -> set[str]:
    """The names of the samples in a Prometheus text exposition."""
    return {m.group(1) for line in text.splitlines() if (m := SAMPLE.match(line))}


def samples(text: str, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")) and all(
            f'{key}="{value}"' in line for key, value in labels.items()
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


# -- the objects, in the real kube-apiserver -----------------------------------------------


def test_the_monitoring_objects_pass_a_server_side_dry_run(control_plane: Cluster) -> None:
    """PodMonitors, the PrometheusRule and the dashboard's ConfigMap are what the Prometheus
    Operator's CRDs accept, and the PodMonitors scrape ports the Deployments declare."""
    for crd in operator_crds():
        control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    wait_established(
        control_plane, "podmonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com"
    )
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(namespace))
    objects = kustomize(control_plane, MONITORING)
    kinds = sorted(document["kind"] for document in objects)
    assert kinds == ["ConfigMap", "PodMonitor", "PodMonitor", "PrometheusRule"]
    [dashboard] = [d for d in objects if d["kind"] == "ConfigMap"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["lessor.json"])["uid"] == "lessor-overview"
    dry_run_apply(control_plane, objects)

    base = kustomize(control_plane, ROOT / "manifests" / "overlays" / "production-like")
    pods = {d["metadata"]["name"]: d["spec"]["template"] for d in base if d["kind"] == "Deployment"}
    for monitor in (d for d in objects if d["kind"] == "PodMonitor"):
        wanted = monitor["spec"]["selector"]["matchLabels"]
        [pod] = [p for p in pods.values() if wanted.items() <= p["metadata"]["labels"].items()]
        ports = {port["name"] for port in pod["spec"]["containers"][0]["ports"]}
        assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} <= ports


@pytest.mark.parametrize("overlay", ["dev", "production-like"])
def test_the_api_servers_metrics_listener_is_its_metrics_port(
    control_plane: Cluster, overlay: str
) -> None:
    """The port the configuration binds /metrics to is the container's `metrics` port, and no
    Service (so no Ingress) names it; readiness is /readyz, liveness /healthz."""
    objects = kustomize(control_plane, ROOT / "manifests" / "overlays" / overlay)
    named = {(d["kind"], d["metadata"]["name"]): d for d in objects}
    config = named["ConfigMap", "lessor-config"]
    bind = yaml.safe_load(config["data"]["config.yaml"])["apiserver"]["metricsBind"]
    deployment = named["Deployment", "lessor-apiserver"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert int(bind.rpartition(":")[2]) == ports["metrics"] != ports["http"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for service in (d for d in objects if d["kind"] == "Service"):
        targets = {port.get("targetPort") for port in service["spec"]["ports"]}
        assert not targets & {"metrics", ports["metrics"]}, service["metadata"]["name"]


# -- the rules, by promtool ----------------------------------------------------------------


def alert(name: str) -> dict[str, Any]:
    """The alerting rule `name` of manifests/monitoring."""
    return next(r for g in rule_groups() for r in g["rules"] if r.get("alert") == name)


def series(name: str, values: str, **labels: str) -> dict[str, str]:
    """One input series of a promtool unit test, as the leading operator's pod exports it."""
    everything = {"namespace": NAMESPACE, "kind": "cluster", "pod": "op-0", **labels}
    text = ", ".join(f'{key}="{value}"' for key, value in everything.items())
    return {"series": f"{name}{{{text}}}", "values": values}


def expect(at: str, name: str, *, summary: str | None = None) -> dict[str, Any]:
    """That alert `name` fires at `at` for pool ci with `summary`, or (None) does not."""
    fired = []
    if summary is not None:
        rule = alert(name)
        labels = {"namespace": NAMESPACE, "kind": "cluster", "pool": "ci", **rule["labels"]}
        notes = {"summary": summary, "description": rule["annotations"]["description"]}
        fired = [{"exp_labels": labels, "exp_annotations": notes}]
    return {"eval_time": at, "alertname": name, "exp_alerts": fired}


def unit_tests(rules: Path) -> dict[str, Any]:
    """promtool unit tests: pool ci gets a quarantined instance at minute 2, and from then on
    a queue with nothing ready; pool busy has a queue and a ready instance throughout. The
    quarantine alerts after its 5 minutes and not before; the starved queue after its 10, and
    not before; busy never; the leader is present, so its absence never alerts."""
    starved = "cluster pool lessor-system/ci: leases have waited 10m with no ready instance"
    return {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    series("lessor_pool_instances", "0 0 1x20", pool="ci", state="quarantined"),
                    series("lessor_pool_instances", "1 1 0x20", pool="ci", state="ready"),
                    series("lessor_pool_queue_depth", "0 0 2x20", pool="ci"),
                    series("lessor_pool_queue_depth", "3x20", pool="busy"),
                    series("lessor_pool_instances", "1x20", pool="busy", state="ready"),
                    {"series": f'lessor_leader{{namespace="{NAMESPACE}"}}', "values": "1x20"},
                ],
                "alert_rule_test": [
                    expect("6m", "LessorInstancesQuarantined"),
                    expect(
                        "8m",
                        "LessorInstancesQuarantined",
                        summary="cluster pool lessor-system/ci has 1 quarantined instance(s)",
                    ),
                    expect("11m", "LessorPoolStarved"),
                    expect("13m", "LessorPoolStarved", summary=starved),
                    expect("15m", "LessorOperatorLeaderAbsent"),
                ],
            }
        ],
    }


def test_promtool_accepts_the_rules_and_their_alerts_fire_when_they_should(
    tmp_path: Path,
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups()}))
    tool = str(promtool())
    checked = subprocess.run(
        [tool, "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 5 rules found" in checked.stdout + checked.stderr
    tests = tmp_path / "rules_test.yaml"
    tests.write_text(yaml.safe_dump(unit_tests(rules)))
    tested = subprocess.run(
        [tool, "test", "rules", str(tests)], capture_output=True, text=True, check=False
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


# -- the metrics, on real processes --------------------------------------------------------


TOKEN = "mon-" + uuid.uuid4().hex


def access_policy(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "AccessPolicy",
        "metadata": {"name": "monitoring", "namespace": namespace},
        "spec": {
            "auth": {
                "staticTokens": [
                    {"secretRef": {"name": "tokens", "key": "ops"}, "claims": {"sub": "ops"}}
                ]
            },
            "identity": "{sub}",
            "rules": [{"pools": ["mon-*"], "maxConcurrentLeases": 2}],
        },
    }


class Stack:
    """An operator and an API server of their own, over one namespace with a `local` pool."""

    def __init__(self, cluster: Cluster, directory: Path) -> None:
        self.cluster = cluster
        self.directory = directory
        self.namespace = f"mon-{uuid.uuid4().hex[:8]}"
        self.operator = Operator(
            cluster.kubeconfig, self.namespace, directory / "instances", directory / "op.log"
        )
        self.api: Api | None = None
        self.api_process: subprocess.Popen[bytes] | None = None


@pytest.fixture
def stack(control_plane: Cluster, tmp_path: Path) -> Iterator[Stack]:
    if not isinstance(control_plane, LocalControlPlane):
        pytest.skip("needs the local backend of the local control plane")
    stack = Stack(control_plane, tmp_path)
    control_plane.kubectl("apply", "-f", str(ROOT / "crds"))
    wait_established(control_plane)
    control_plane.kubectl("create", "namespace", stack.namespace)
    control_plane.kubectl(
        "create", "secret", "generic", "tokens", "-n", stack.namespace,
        f"--from-literal=ops={TOKEN}",
    )  # fmt: skip
    pool = {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "ClusterPool",
        "metadata": {"name": "mon-warm", "namespace": stack.namespace},
        "spec": {"warmTarget": 1, "ttl": "30m", "backend": {"type": "local"}},
    }
    for document in (access_policy(stack.namespace), pool):
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(document))
    stack.operator.start()
    try:
        log = tmp_path / "api.log"
        stack.api_process, stack.api = start_api(control_plane, stack.namespace, log)
        yield stack
    finally:
        if stack.api_process is not None:
            stack.api_process.send_signal(signal.SIGTERM)
            stack.api_process.wait(timeout=60)
        stack.operator.kill(signal.SIGTERM)
        destroy_local_clusters(tmp_path / "instances")
        control_plane.kubectl("delete", "namespace", stack.namespace, "--wait=false")


def operator_metrics(operator: Operator) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.port}/metrics", timeout=10) as r:
        text: str = r.read().decode()
    return text


def ready(operator: Operator, pool: dict[str, str]) -> float:
    """The pool's ready instances as the operator exports them (none while it does not lead)."""
    return samples(operator_metrics(operator), "lessor_pool_instances", state="ready", **pool)


def test_every_metric_the_rules_and_the_dashboard_query_is_served(stack: Stack) -> None:
    """After one lease was bound and released, every metric name in the alerts and the
    dashboard is among the samples of the operator's and the API server's /metrics; the lease
    was counted once (one bind, one release), and an operator restarted afterwards, replaying
    every lease, counts neither again. /metrics is on the metrics listener only."""
    api = stack.api
    assert api is not None
    wanted = {name for query in queries() for name in METRIC.findall(query)}
    assert len(wanted) >= 15, wanted

    created = api.call("POST", "/v1/leases", token=TOKEN, body={"profile": "mon-warm"})
    assert created.status == 202, created.body
    path = f"/v1/leases/{created.body['id']}"

    def phase(expected: str) -> bool:
        return bool(api.call("GET", path, token=TOKEN).body.get("phase") == expected)

    wait_for("the lease Bound", lambda: phase("Bound"), timeout=240)
    assert api.call("DELETE", path, token=TOKEN).status == 204
    wait_for("the lease Released", lambda: phase("Released"), timeout=240)
    pool = {"namespace": stack.namespace, "pool": "mon-warm", "kind": "cluster"}
    wait_for("the pool refilled", lambda: ready(stack.operator, pool) == 1, timeout=240)

    operator_text = operator_metrics(stack.operator)
    api_text = api.metrics()
    missing = wanted - served(operator_text) - served(api_text)
    assert not missing, f"named by manifests/monitoring but served by neither: {sorted(missing)}"
    assert samples(operator_text, "lessor_lease_bind_duration_seconds_count", **pool) == 1
    assert samples(operator_text, "lessor_lease_outcomes_total", outcome="released", **pool) == 1
    assert samples(operator_text, "lessor_pool_queue_depth", **pool) == 0
    assert samples(api_text, "lessor_http_requests_total", route="/v1/leases/{lease_id}") >= 2

    # The API's own port: no /metrics; readiness apart from liveness.
    assert api.call("GET", "/metrics").status == 404
    assert api.call("GET", "/readyz").status == 200
    assert api.call("GET", "/healthz").status == 200
    assert api.metrics_base is not None
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(api.metrics_base + "/v1/status", timeout=10)
    assert refused.value.code == 404, "the metrics listener serves /metrics only"

    # A restarted operator replays the ended lease (the retention sweep reads it; the lease
    # cache holds no finished lease) and counts nothing for it.
    stack.operator.kill(signal.SIGKILL)
    stack.operator.start()

    def replayed() -> bool:
        if not stack.operator.serving() or ready(stack.operator, pool) != 1:
            return False
        text = operator_metrics(stack.operator)
        return samples(text, "lessor_reconcile_total", controller="lease-retention") > 0

    wait_for("the restarted operator leading, its leases reconciled", replayed, timeout=120)
    text = operator_metrics(stack.operator)
    assert samples(text, "lessor_lease_outcomes_total", **pool) == 0
    assert samples(text, "lessor_lease_bind_duration_seconds_count", **pool) == 0
