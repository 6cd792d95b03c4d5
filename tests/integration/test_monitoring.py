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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor import __version__
from lessor.controlplane.kubectl import Cluster, wait_established
from tests.integration.kustomize import dry_run_apply, kustomize
from tests.integration.monitoring_tools import operator_crds, promtool
from tests.integration.operator_harness import Operator, wait_for
from tests.integration.pool_stack import TOKEN, Stack, pool_stack

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
    """Every PromQL expression of the rules and the dashboard."""
    return [rule["expr"] for group in rule_groups() for rule in group["rules"]] + panel_queries()


def panel_queries() -> list[str]:
    """Every PromQL expression of the dashboard (panels and variables)."""
    found: list[str] = []
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


POOL_CI = {"namespace": NAMESPACE, "kind": "cluster", "pool": "ci"}


def expect(
    at: str, name: str, *, summary: str | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """That alert `name` fires at `at` with `summary` and `labels` (pool ci's by default),
    or (None) does not."""
    fired = []
    if summary is not None:
        rule = alert(name)
        notes = {
            "summary": summary,
            "description": rule["annotations"]["description"],
            "runbook_url": rule["annotations"]["runbook_url"],
        }
        wanted = {**(POOL_CI if labels is None else labels), **rule["labels"]}
        fired = [{"exp_labels": wanted, "exp_annotations": notes}]
    return {"eval_time": at, "alertname": name, "exp_alerts": fired}


def up(component: str, values: str) -> dict[str, str]:
    """The scrape health of a component's pods, as the Prometheus Operator labels it."""
    job = f"{NAMESPACE}/lessor-{component}"
    return {"series": f'up{{job="{job}", namespace="{NAMESPACE}"}}', "values": values}


LEADER = {"series": f'lessor_leader{{namespace="{NAMESPACE}"}}', "values": "1x40"}


def pools_test() -> dict[str, Any]:
    """Pool ci gets a quarantined instance at minute 2, and from then on a queue with nothing
    ready, its clusters failing to start, and its diagnostics store unreachable; pool busy has
    a queue and a ready instance throughout. Each alert fires after its `for` and not before;
    busy never."""
    starved = "cluster pool lessor-system/ci: leases have waited 10m with no ready instance"
    failing = "clusters of pool lessor-system/ci keep failing to start: 3 or more in 30m"
    store = "pool lessor-system/ci cannot reach its diagnostics store"
    condition = {"condition": "DiagnosticsReady", "pool": "ci"}
    return {
        "interval": "1m",
        "input_series": [
            series("lessor_pool_instances", "0 0 1x20", pool="ci", state="quarantined"),
            series("lessor_pool_instances", "1 1 0x20", pool="ci", state="ready"),
            series("lessor_pool_queue_depth", "0 0 2x20", pool="ci"),
            series("lessor_pool_queue_depth", "3x20", pool="busy"),
            series("lessor_pool_instances", "1x20", pool="busy", state="ready"),
            series(
                "lessor_cluster_start_failures_total",
                "0 0 1 2 3x20",
                pool="ci",
                backend="vcluster",
                reason="timeout",
            ),
            series("lessor_pool_status_condition", "0 0 1x20", status="false", **condition),
            series("lessor_pool_status_condition", "1 1 0x20", status="true", **condition),
            LEADER,
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
            expect("8m", "LessorClusterStartsFailing"),
            expect(
                "10m",
                "LessorClusterStartsFailing",
                summary=failing,
                labels={"namespace": NAMESPACE, "pool": "ci"},
            ),
            expect("16m", "LessorDiagnosticsStoreFailing"),
            expect("18m", "LessorDiagnosticsStoreFailing", summary=store),
            expect("15m", "LessorOperatorLeaderAbsent"),
        ],
    }


def components_test() -> dict[str, Any]:
    """The operator's pods stop answering at minute 2 while the API server's keep answering;
    the instances controller fails a reconcile every minute from minute 2. The operator is
    down after 5 minutes, the errors alert after 30; the API server never."""
    down = f"no lessor operator replica answers its scrape in {NAMESPACE}"
    errors = f"the instances controller in {NAMESPACE} has failed reconciles for 30m"
    return {
        "interval": "1m",
        "input_series": [
            up("operator", "1 1 0x40"),
            up("apiserver", "1x40"),
            series("lessor_reconcile_errors_total", "0 0 1+1x40", controller="instances"),
            LEADER,
        ],
        "alert_rule_test": [
            expect("6m", "LessorOperatorDown"),
            expect("8m", "LessorOperatorDown", summary=down, labels={"namespace": NAMESPACE}),
            expect("8m", "LessorApiServerDown"),
            expect("31m", "LessorReconcileErrors"),
            expect(
                "33m",
                "LessorReconcileErrors",
                summary=errors,
                labels={"namespace": NAMESPACE, "controller": "instances"},
            ),
        ],
    }


def leases_and_requests_test() -> dict[str, Any]:
    """From minute 0, pool ci's leases take between 60 and 300 s to become usable (p99 297.6
    s), and one API request in ten fails with a 500. The latency alert fires after its 15
    minutes, the errors alert after its 10."""
    bind = "lessor_lease_bind_duration_seconds_bucket"
    requests = "lessor_http_requests_total"
    return {
        "interval": "1m",
        "input_series": [
            series(bind, "0x30", pool="ci", le="60.0"),
            series(bind, "0+1x30", pool="ci", le="300.0"),
            series(bind, "0+1x30", pool="ci", le="+Inf"),
            series(requests, "0+9x30", route="/v1/leases", method="POST", status="202"),
            series(requests, "0+1x30", route="/v1/leases", method="POST", status="500"),
            LEADER,
        ],
        "alert_rule_test": [
            expect("14m", "LessorBindLatencyHigh"),
            expect(
                "17m",
                "LessorBindLatencyHigh",
                summary="p99 time to a usable lease in cluster pool lessor-system/ci is 4m 57s",
            ),
            expect("9m", "LessorApiServerErrors"),
            expect(
                "12m",
                "LessorApiServerErrors",
                summary=f"10% of lessor API requests in {NAMESPACE} fail with 5xx",
                labels={"namespace": NAMESPACE},
            ),
        ],
    }


def nothing_scraped_test() -> dict[str, Any]:
    """No lessor pod is scraped at all (deleted, or the PodMonitors select none): the
    component alerts fire all the same, with no namespace to name."""
    fired = {
        "LessorOperatorDown": "no lessor operator replica answers its scrape in ",
        "LessorApiServerDown": "no lessor API server replica answers its scrape in ",
        "LessorOperatorLeaderAbsent": "no lessor operator leads in ",
    }
    return {
        "interval": "1m",
        "input_series": [{"series": 'unrelated{job="other"}', "values": "1x10"}],
        "alert_rule_test": [
            expect("6m", name, summary=summary, labels={}) for name, summary in fired.items()
        ],
    }


def sizing_test() -> dict[str, Any]:
    """Pool ci's leases arrive at 12 a minute (0.2/s) and its clusters start within 20 s, at
    19 s at the 95th percentile (histogram_quantile within the 0-20 s bucket): 3.8 clusters
    arrive while one starts, so a warm target of 4 serves them."""
    labels = {"pool": "ci", "backend": "vcluster"}
    start = "lessor_cluster_start_duration_seconds_bucket"
    return {
        "interval": "1m",
        "input_series": [
            series("lessor_cluster_lease_queue_duration_seconds_count", "0+12x180", pool="ci"),
            series(start, "0x180", le="0.0", **labels),
            series(start, "0+1x180", le="20.0", **labels),
            series(start, "0+1x180", le="+Inf", **labels),
        ],
        "promql_expr_test": [
            {
                "expr": "lessor:cluster_pool_warm_target_for_p95_arrivals:1d",
                "eval_time": "2h",
                "exp_samples": [{"labels": RECORDED.format(NAMESPACE), "value": 4}],
            }
        ],
    }


RECORDED = 'lessor:cluster_pool_warm_target_for_p95_arrivals:1d{{namespace="{}", pool="ci"}}'


def unit_tests(rules: Path) -> dict[str, Any]:
    """promtool unit tests: one test group per concern, each alert both before its `for` has
    passed and after, and the sizing rule's value."""
    return {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            pools_test(),
            components_test(),
            leases_and_requests_test(),
            nothing_scraped_test(),
            sizing_test(),
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
    assert "SUCCESS: 13 rules found" in checked.stdout + checked.stderr
    tests = tmp_path / "rules_test.yaml"
    tests.write_text(yaml.safe_dump(unit_tests(rules)))
    tested = subprocess.run(
        [tool, "test", "rules", str(tests)], capture_output=True, text=True, check=False
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    alerts = {r["alert"] for g in rule_groups() for r in g["rules"] if "alert" in r}
    tested_alerts = {
        case["alertname"] for test in unit_tests(rules)["tests"]
        for case in test.get("alert_rule_test", []) if case["exp_alerts"]
    }  # fmt: skip
    assert tested_alerts == alerts, "every alert is seen firing in a unit test"


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of `markdown`: lower case, punctuation but `-`
    dropped, spaces as `-` (code blocks' `#` lines are not headings)."""
    found, fenced = set(), False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (heading := re.match(r"#{1,6} (.+)", line)):
            text = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower())
            found.add(text.replace(" ", "-"))
    return found


def test_every_alert_has_a_runbook_that_exists() -> None:
    """An alert's runbook_url is a section of docs/operations.md, in this repository, that
    says what to look at and what to do."""
    documented = anchors((ROOT / "docs" / "operations.md").read_text())
    base = "https://github.com/lessor-dev/lessor/blob/main/docs/operations.md#"
    for group in rule_groups():
        for rule in (r for r in group["rules"] if "alert" in r):
            url = rule["annotations"].get("runbook_url", "")
            assert url.startswith(base), f"{rule['alert']}: {url!r}"
            assert url.removeprefix(base) in documented, f"{rule['alert']}: no section {url}"


def test_every_dashboard_query_follows_the_cluster_variable() -> None:
    """A Prometheus of several clusters (Thanos, Mimir, federation) labels series `cluster`:
    each of the dashboard's selectors of lessor's series is scoped to the `cluster` variable,
    whose All matches series without the label too."""
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["cluster"]["allValue"] == ".*"
    own = variables["cluster"]["query"]["query"]
    names = re.compile(r"\blessor[_:][a-zA-Z0-9_:]*")
    scoped = 0
    for query in (q for q in panel_queries() if q != own):
        for name in names.finditer(query):
            assert query[name.end() :].startswith('{cluster=~"$cluster"'), query
            scoped += 1
    assert scoped > 30


# -- the metrics, on real processes --------------------------------------------------------


@pytest.fixture
def stack(control_plane: Cluster, tmp_path: Path) -> Iterator[Stack]:
    with pool_stack(control_plane, tmp_path) as stack:
        yield stack


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
    lease = json.loads(
        stack.cluster.kubectl(
            "get", "clusterlease", created.body["id"], "-n", stack.namespace, "-o", "json"
        ).stdout
    )
    annotations = lease["metadata"].get("annotations", {})
    assert "lessor.dev/traceparent" not in annotations, "no OTLP endpoint: tracing is off"
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

    # What sizing a pool needs, after that one lease: its clusters' starts (the first warm one
    # and its refill at least; a surplus one is made, and torn down, when the lease came
    # first) and the leased one's teardown, the lease's wait, the pool's conditions; and which
    # release each component runs. promtool lints both live scrapes.
    clusters = {"namespace": stack.namespace, "pool": "mon-warm"}

    def torn_down() -> float:
        text = operator_metrics(stack.operator)
        return samples(text, "lessor_cluster_teardown_duration_seconds_count", **clusters)

    wait_for("the leased cluster's teardown verified", lambda: torn_down() >= 1, timeout=120)
    operator_text = operator_metrics(stack.operator)
    assert samples(operator_text, "lessor_cluster_start_duration_seconds_count", **clusters) >= 2
    assert (
        samples(operator_text, "lessor_cluster_lease_queue_duration_seconds_count", **clusters) == 1
    )
    assert samples(operator_text, "lessor_cluster_start_failures_total", **clusters) == 0
    # The pool's BackendHealthy turns True at the first pass that sees a started cluster not
    # being deleted: on a loaded machine the leased one can be bound, released and deleting
    # before the pool's first pass after its start, and then it is the refill that shows it.
    healthy = {"condition": "BackendHealthy", "status": "true"}

    def backend_healthy() -> bool:
        text = operator_metrics(stack.operator)
        return samples(text, "lessor_pool_status_condition", **healthy, **pool) == 1

    wait_for("the pool's BackendHealthy condition exported", backend_healthy, timeout=120)
    for text in (operator_text, api_text):
        assert samples(text, "lessor_build_info", version=__version__) == 1
        linted = subprocess.run(
            [str(promtool()), "check", "metrics"],
            input=text, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert linted.returncode == 0, linted.stdout + linted.stderr

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
    assert samples(text, "lessor_cluster_start_duration_seconds_count", **clusters) == 0
