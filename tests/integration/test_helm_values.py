"""The chart's day-one values (charts/lessor): each one, set as a user sets it, renders where a
user expects it; the schema refuses what Helm would otherwise render silently wrong; the README's
values table follows values.yaml.

test_helm_chart.py holds the defaults equal to the kustomize install; these tests render the
chart with `helm template` (tests included, as `helm test` creates them) and read the objects.
No cluster is needed.
"""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.config_file import ConfigFile
from lessor.controlplane.helm import ensure_helm
from lessor.resources.__main__ import main as resources_main

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "lessor"
RELEASE_NAMESPACE = "team-a"
COMPONENTS = ("operator", "apiserver")
# What Pod Security `restricted` requires of a pod and of each container, and what the chart
# rendered before these values could change it (manifests/base).
RESTRICTED_POD = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}
DIGEST = "sha256:" + "0123456789abcdef" * 4

Object = dict[str, Any]


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def helm() -> Path:
    return ensure_helm(_progress)


def helm_run(helm: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def render(helm: Path, *args: str | Path, namespace: str = RELEASE_NAMESPACE) -> list[Object]:
    """`helm template` as `helm install --namespace <namespace>` then `helm test` would create
    the objects (the test Pod included)."""
    result = helm_run(helm, "template", "lessor", CHART, "--namespace", namespace, *args)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def refusal(helm: Path, *args: str | Path) -> str:
    """What `helm template` says when it refuses these values (it fails the test if it does not)."""
    result = helm_run(helm, "template", "lessor", CHART, "--namespace", RELEASE_NAMESPACE, *args)
    assert result.returncode != 0, f"helm accepted {args}"
    return result.stderr


def one(objects: list[Object], kind: str, name: str) -> Object:
    [found] = [d for d in objects if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def pod_specs(objects: list[Object]) -> dict[str, Object]:
    """Every pod the chart renders, by name: the two Deployments' templates and the test Pod."""
    pods = {
        d["metadata"]["name"]: d["spec"]["template"] for d in objects if d["kind"] == "Deployment"
    }
    pods.update({d["metadata"]["name"]: d for d in objects if d["kind"] == "Pod"})
    assert sorted(pods) == ["lessor-apiserver", "lessor-operator", "lessor-test-api"]
    return pods


def container(objects: list[Object], component: str) -> Object:
    deployment = one(objects, "Deployment", f"lessor-{component}")
    [found] = deployment["spec"]["template"]["spec"]["containers"]
    return dict(found)


# The schema


# Each with what Helm says: the value's path and what is wrong with it.
REFUSED = {
    "operater.replicas=1": "additional properties 'operater' not allowed",
    "apiserver.replicas=two": "at '/apiserver/replicas': got string, want integer",
    "operator.serviceAcount.name=x": "additional properties 'serviceAcount' not allowed",
    "imagePullSecrets[0].nmae=regcred": "additional properties 'nmae' not allowed",
    "image.pullPolicy=Sometimes": "at '/image/pullPolicy'",
    "image.digest=latest": "at '/image/digest'",
    "apiserver.servicePort=http": "at '/apiserver/servicePort': got string, want integer",
    "operator.tolerations[0].efect=NoSchedule": "additional properties 'efect' not allowed",
    # config.yaml's keys: both components would refuse these at start, in a crash loop.
    "config.apiserver.wokers=4": "additional properties 'wokers' not allowed",
    "config.log.level=verbose": "at '/config/log/level'",
    "config.namespace=elsewhere": "additional properties 'namespace' not allowed",
    "tracing.sampler=sometimes": "at '/tracing/sampler'",
    "tracing.endpoint=collector:4318": "at '/tracing/endpoint'",
}


@pytest.mark.parametrize("value", sorted(REFUSED))
def test_the_schema_refuses_a_misspelt_key_and_a_wrong_type(helm: Path, value: str) -> None:
    said = REFUSED[value]
    assert said in refusal(helm, f"--set={value}")
    lint = helm_run(helm, "lint", "--strict", CHART, f"--set={value}")
    assert lint.returncode != 0
    assert said in lint.stdout + lint.stderr


@pytest.mark.parametrize("values", sorted(p.name for p in (CHART / "ci").glob("*.yaml")))
def test_every_ci_values_file_is_accepted(helm: Path, values: str) -> None:
    render(helm, "--values", CHART / "ci" / values)
    lint = helm_run(helm, "lint", "--strict", CHART, "--values", CHART / "ci" / values)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_the_schema_knows_every_key_of_config_yaml() -> None:
    """`config` is closed like the rest, so it must name every key lessor reads (a new setting
    added to lessor/config_file.py without the schema would be refused by the chart), and no key
    lessor would refuse. The two namespaces are the chart's, from `namespace` and
    `sandboxes.namespace`."""
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["config"]
    model = ConfigFile.model_json_schema(by_alias=True)
    definitions = model["$defs"]

    def keys(node: dict[str, Any], prefix: str) -> set[str]:
        found: set[str] = set()
        for name, declared in node["properties"].items():
            child = declared
            if "$ref" in declared:
                child = definitions[declared["$ref"].rsplit("/", 1)[-1]]
            if "properties" in child:
                found |= keys(child, f"{prefix}{name}.")
            else:
                found.add(f"{prefix}{name}")
        return found

    assert keys(schema, "") == keys(model, "") - {"namespace", "agentSandbox.namespace"}


# The namespace


def test_lessor_goes_into_the_releases_namespace(helm: Path) -> None:
    objects = render(helm)
    namespaces = {d["metadata"]["name"] for d in objects if d["kind"] == "Namespace"}
    # The release's namespace exists before the install: the chart must not render it.
    assert namespaces == {"lessor-sandboxes"}
    placed = {
        (d["kind"], d["metadata"]["name"]): d["metadata"]["namespace"]
        for d in objects
        if "namespace" in d["metadata"]
    }
    fixed = {namespace for namespace in placed.values() if namespace != RELEASE_NAMESPACE}
    # The sandboxes' namespace is the chart's own; `default` holds the `kubernetes`
    # EndpointSlice the operator reads.
    assert fixed == {"lessor-sandboxes", "default"}
    for kind in ("Deployment", "Service", "ConfigMap", "ServiceAccount", "Pod", "NetworkPolicy"):
        assert RELEASE_NAMESPACE in {n for (k, _), n in placed.items() if k == kind}, kind
    config = one(objects, "ConfigMap", "lessor-config")
    assert yaml.safe_load(config["data"]["config.yaml"])["namespace"] == RELEASE_NAMESPACE
    subjects = {s["namespace"] for d in objects for s in d.get("subjects", [])}
    assert subjects == {RELEASE_NAMESPACE}
    [check] = one(objects, "Pod", "lessor-test-api")["spec"]["containers"]
    assert check["command"][-1] == f"http://lessor-apiserver.{RELEASE_NAMESPACE}.svc:80/healthz"


def test_create_namespace_renders_lessors_namespace_labelled_restricted(helm: Path) -> None:
    """What an installer that keeps the release's record elsewhere (`--namespace default`) or a
    GitOps tool gets: the kustomize base's namespace, with its Pod Security label."""
    objects = render(
        helm, "--set=namespace=lessor-system", "--set=createNamespace=true", namespace="default"
    )
    namespace = one(objects, "Namespace", "lessor-system")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    in_default = {
        d["metadata"]["name"] for d in objects if d["metadata"].get("namespace") == "default"
    }
    assert in_default == {"lessor-operator-host-api"}, "only the EndpointSlice reader's Role"
    assert one(objects, "Deployment", "lessor-operator")["metadata"]["namespace"] == "lessor-system"


# ServiceAccounts


def test_service_account_annotations_reach_each_components_account(helm: Path) -> None:
    """Workload identity: the operator's account names the cloud role that may write the
    diagnostics bucket, the API server's another (or none)."""
    objects = render(
        helm,
        "--set-string=operator.serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn="
        "arn:aws:iam::123456789012:role/lessor-diagnostics",
        "--set-string=apiserver.serviceAccount.annotations.iam\\.gke\\.io/gcp-service-account="
        "lessor-api@project.iam.gserviceaccount.com",
    )
    operator = one(objects, "ServiceAccount", "lessor-operator")
    assert operator["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/lessor-diagnostics"
    }
    apiserver = one(objects, "ServiceAccount", "lessor-apiserver")
    assert apiserver["metadata"]["annotations"] == {
        "iam.gke.io/gcp-service-account": "lessor-api@project.iam.gserviceaccount.com"
    }
    # By default no annotations at all (the kustomize base's accounts).
    assert "annotations" not in one(render(helm), "ServiceAccount", "lessor-operator")["metadata"]


def test_a_renamed_account_keeps_its_rights_and_its_admission_policy(helm: Path) -> None:
    objects = render(
        helm,
        "--set=operator.serviceAccount.name=platform-lessor-op",
        "--set=apiserver.serviceAccount.create=false",
        "--set=apiserver.serviceAccount.name=platform-lessor-api",
    )
    accounts = {d["metadata"]["name"] for d in objects if d["kind"] == "ServiceAccount"}
    assert accounts == {"platform-lessor-op"}, "create=false renders no account"
    specs = pod_specs(objects)
    assert specs["lessor-operator"]["spec"]["serviceAccountName"] == "platform-lessor-op"
    assert specs["lessor-apiserver"]["spec"]["serviceAccountName"] == "platform-lessor-api"
    subjects = {s["name"] for d in objects for s in d.get("subjects", [])}
    assert subjects == {"platform-lessor-op", "platform-lessor-api"}
    operator_policy = one(
        objects, "ValidatingAdmissionPolicy", "lessor-operator-instance-namespaces"
    )
    assert "endsWith(':platform-lessor-op')" in json.dumps(operator_policy["spec"])
    api_policy = one(objects, "ValidatingAdmissionPolicy", "lessor-apiserver-writes")
    assert "endsWith(':platform-lessor-api')" in json.dumps(api_policy["spec"])


def test_one_account_for_both_components_is_refused(helm: Path) -> None:
    said = refusal(
        helm,
        "--set=operator.serviceAccount.name=lessor",
        "--set=apiserver.serviceAccount.name=lessor",
    )
    assert "each component needs its own account" in said


# Pods: image, pull secrets, metadata, environment, security, scheduling


def test_image_pull_secrets_reach_every_pod(helm: Path) -> None:
    objects = render(helm, "--set=imagePullSecrets[0].name=regcred")
    for name, pod in pod_specs(objects).items():
        assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}], name
    assert all("imagePullSecrets" not in p["spec"] for p in pod_specs(render(helm)).values())


def test_a_digest_pins_every_container_and_the_tag_is_ignored(helm: Path) -> None:
    objects = render(
        helm,
        "--set=image.repository=registry.example.com/lessor",
        "--set=image.tag=9.9.9",
        f"--set=image.digest={DIGEST}",
    )
    images = {c["image"] for p in pod_specs(objects).values() for c in p["spec"]["containers"]}
    assert images == {f"registry.example.com/lessor@{DIGEST}"}
    tagged = render(helm, "--set=image.tag=9.9.9")
    images = {c["image"] for p in pod_specs(tagged).values() for c in p["spec"]["containers"]}
    assert images == {"ghcr.io/lessor-dev/lessor:9.9.9"}


def test_pod_annotations_and_labels_global_then_per_component(helm: Path) -> None:
    objects = render(
        helm,
        "--set=podAnnotations.team=platform",
        "--set=podAnnotations.tier=shared",
        "--set=operator.podAnnotations.tier=control",
        "--set=podLabels.cost-centre=cc-42",
        "--set=apiserver.podLabels.cost-centre=cc-43",
        # Neither may take the chart's own keys: the checksum that rolls the pods on a config
        # change, the labels the Deployments and the Service select by.
        "--set=podAnnotations.checksum/config=mine",
        "--set=apiserver.podLabels.app\\.kubernetes\\.io/component=web",
    )
    pods = pod_specs(objects)
    operator, apiserver, test = (
        pods[name]["metadata"]
        for name in ("lessor-operator", "lessor-apiserver", "lessor-test-api")
    )
    assert operator["annotations"]["tier"] == "control"
    assert apiserver["annotations"]["tier"] == "shared"
    assert operator["annotations"]["team"] == apiserver["annotations"]["team"] == "platform"
    assert operator["labels"]["cost-centre"] == "cc-42"
    assert apiserver["labels"]["cost-centre"] == "cc-43"
    assert apiserver["labels"]["app.kubernetes.io/component"] == "apiserver"
    defaults = {n: p["metadata"]["annotations"] for n, p in pod_specs(render(helm)).items()}
    for name in ("lessor-operator", "lessor-apiserver"):
        checksum = pods[name]["metadata"]["annotations"]["checksum/config"]
        assert checksum == defaults[name]["checksum/config"] != "mine"
    # The test Pod takes the global ones (a mesh's sidecar annotation, a cost label), and keeps
    # its hook.
    assert test["annotations"]["team"] == "platform" and test["annotations"]["tier"] == "shared"
    assert test["annotations"]["helm.sh/hook"] == "test"
    assert test["labels"]["cost-centre"] == "cc-42"


def test_extra_env_reaches_its_component_only(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "env.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "operator": {
                    "extraEnv": [
                        {"name": "AWS_REGION", "value": "eu-west-1"},
                        {
                            "name": "BUCKET_KEY",
                            "valueFrom": {"secretKeyRef": {"name": "bucket", "key": "key"}},
                        },
                    ],
                    "extraEnvFrom": [{"configMapRef": {"name": "proxy-settings"}}],
                },
                "apiserver": {"extraEnvFrom": [{"secretRef": {"name": "oidc"}, "prefix": "X_"}]},
            }
        )
    )
    objects = render(helm, "--values", values)
    operator, apiserver = (container(objects, c) for c in COMPONENTS)
    assert operator["env"] == [
        {"name": "AWS_REGION", "value": "eu-west-1"},
        {"name": "BUCKET_KEY", "valueFrom": {"secretKeyRef": {"name": "bucket", "key": "key"}}},
    ]
    assert operator["envFrom"] == [{"configMapRef": {"name": "proxy-settings"}}]
    assert "env" not in apiserver
    assert apiserver["envFrom"] == [{"secretRef": {"name": "oidc"}, "prefix": "X_"}]
    assert "env" not in container(render(helm), "operator")


def test_a_tracing_endpoint_turns_traces_on_in_both_components(helm: Path) -> None:
    """The tracing values are the SDK's own variables in both containers, before extraEnv
    (where a later entry of the same name would win); without an endpoint, none is set."""
    objects = render(
        helm,
        "--set=tracing.endpoint=http://otel-collector.observability:4318",
        "--set=tracing.sampler=parentbased_traceidratio",
        "--set=tracing.samplerArg=0.25",
        "--set=operator.extraEnv[0].name=AWS_REGION",
        "--set=operator.extraEnv[0].value=eu-west-1",
    )
    tracing = [
        {
            "name": "OTEL_EXPORTER_OTLP_ENDPOINT",
            "value": "http://otel-collector.observability:4318",
        },
        {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_traceidratio"},
        {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "0.25"},
    ]
    operator, apiserver = (container(objects, c) for c in COMPONENTS)
    assert operator["env"] == [*tracing, {"name": "AWS_REGION", "value": "eu-west-1"}]
    assert apiserver["env"] == tracing
    untraced = [container(render(helm), c) for c in COMPONENTS]
    assert not any("OTEL" in json.dumps(c.get("env", [])) for c in untraced)


def test_security_contexts_default_to_restricted_and_can_be_overridden(helm: Path) -> None:
    for name, pod in pod_specs(render(helm)).items():
        assert pod["spec"]["securityContext"] == RESTRICTED_POD, name
        for each in pod["spec"]["containers"]:
            assert each["securityContext"] == RESTRICTED_CONTAINER, name
    # A platform that assigns user ids (OpenShift's restricted-v2) drops them; a volume's group.
    objects = render(
        helm,
        "--set=podSecurityContext.runAsUser=null",
        "--set=podSecurityContext.runAsGroup=null",
        "--set=podSecurityContext.fsGroup=2000",
        "--set=securityContext.readOnlyRootFilesystem=false",
    )
    for name, pod in pod_specs(objects).items():
        assert pod["spec"]["securityContext"] == {
            "runAsNonRoot": True,
            "fsGroup": 2000,
            "seccompProfile": {"type": "RuntimeDefault"},
        }, name
        for each in pod["spec"]["containers"]:
            assert each["securityContext"] == {
                **RESTRICTED_CONTAINER,
                "readOnlyRootFilesystem": False,
            }, name


@pytest.mark.parametrize("component", COMPONENTS)
def test_scheduling_values_reach_the_pods_of_each_component(
    helm: Path, component: str, tmp_path: Path
) -> None:
    scheduling = {
        "priorityClassName": "platform-critical",
        "nodeSelector": {"node-role.example.com/platform": "true"},
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "platform", "effect": "NoSchedule"}
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app.kubernetes.io/component": component}},
            }
        ],
    }
    values = tmp_path / "scheduling.yaml"
    values.write_text(yaml.safe_dump({component: scheduling}))
    pods = pod_specs(render(helm, "--values", values))
    spec = pods[f"lessor-{component}"]["spec"]
    assert {key: spec[key] for key in scheduling} == scheduling
    other = pods[f"lessor-{'apiserver' if component == 'operator' else 'operator'}"]["spec"]
    assert not set(scheduling) & set(other)


# helm test


def test_the_test_pod_is_a_restricted_helm_test_hook_of_lessors_image(helm: Path) -> None:
    objects = render(helm, "--set=apiserver.servicePort=8080")
    pod = one(objects, "Pod", "lessor-test-api")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["metadata"]["namespace"] == RELEASE_NAMESPACE
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    [check] = spec["containers"]
    assert check["image"] == container(objects, "apiserver")["image"]
    assert check["command"][:2] == ["python3", "-c"]
    assert check["command"][-1] == f"http://lessor-apiserver.{RELEASE_NAMESPACE}.svc:8080/healthz"
    # Only `helm test` creates it: `helm install` skips test hooks (as --skip-tests does here).
    skipped = helm_run(helm, "template", "lessor", CHART, "--skip-tests")
    assert "lessor-test-api" not in skipped.stdout
    assert not [d for d in render(helm, "--set=tests.enabled=false") if d["kind"] == "Pod"]


def _selects(selector: Object, labels: dict[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions) against labels."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def test_the_network_policies_let_the_test_pod_reach_the_api(helm: Path) -> None:
    """With an enforcing CNI, a policy that selects a pod denies what no policy allows: some
    policy on the API's pods must admit the test Pod (its labels, its namespace's labels) to
    their `http` port, and no policy may select the test Pod for egress (it would need a rule
    to reach the API)."""
    objects = render(helm)
    # A NetworkPolicy selects pods of its own namespace only: the API's and the test Pod's.
    policies = [
        d
        for d in objects
        if d["kind"] == "NetworkPolicy" and d["metadata"]["namespace"] == RELEASE_NAMESPACE
    ]
    assert policies, "networkPolicies.enabled is the default"
    test_labels = one(objects, "Pod", "lessor-test-api")["metadata"]["labels"]
    api_labels = pod_specs(objects)["lessor-apiserver"]["metadata"]["labels"]
    namespace_labels = {"kubernetes.io/metadata.name": RELEASE_NAMESPACE}

    def peer_admits(peer: Object) -> bool:
        if "ipBlock" in peer:
            return False
        namespaces = peer.get("namespaceSelector")
        in_namespace = _selects(namespaces, namespace_labels) if namespaces is not None else True
        return in_namespace and _selects(peer.get("podSelector", {}), test_labels)

    admitted = False
    for policy in policies:
        spec = policy["spec"]
        if "Egress" in spec.get("policyTypes", []):
            assert not _selects(spec["podSelector"], test_labels), policy["metadata"]["name"]
        if not _selects(spec["podSelector"], api_labels) or "Ingress" not in spec["policyTypes"]:
            continue
        for rule in spec.get("ingress", []):
            ports = {p.get("port") for p in rule.get("ports", [])}
            peers = rule.get("from")
            if (not ports or "http" in ports) and (peers is None or any(map(peer_admits, peers))):
                admitted = True
    assert admitted, "no NetworkPolicy admits the test Pod to the API's http port"


class _Healthz(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        ok = self.path == "/healthz"
        body = b'{"status":"ok"}' if ok else b"{}"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def api() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Healthz)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_test_pods_check_passes_when_the_api_answers(helm: Path, api: str) -> None:
    """The Pod's command, run as the image runs it (python3, standard library only), against
    an API that answers /healthz."""
    [check] = one(render(helm), "Pod", "lessor-test-api")["spec"]["containers"]
    command = [sys.executable, *check["command"][1:-1], f"{api}/healthz"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "200" in result.stdout and '"status":"ok"' in result.stdout


# The README


def test_the_readmes_values_table_is_generated_from_the_chart() -> None:
    assert resources_main(["check", "chart-readme", "--chart", str(CHART)]) == 0, (
        "run: python -m lessor.resources write chart-readme --chart charts/lessor"
    )
    readme = (CHART / "README.md").read_text()
    for value in ("operator.serviceAccount.annotations", "imagePullSecrets", "image.digest"):
        assert f"| `{value}` |" in readme


def test_a_stale_or_undocumented_value_fails_the_readme_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chart = tmp_path / "lessor"
    shutil.copytree(CHART, chart)
    values = chart / "values.yaml"
    text = values.read_text()
    values.write_text(text.replace("# Where the image is pulled from", "# Pulled from"))
    assert resources_main(["check", "chart-readme", "--chart", str(chart)]) == 1
    assert "write chart-readme --chart" in capsys.readouterr().err
    assert resources_main(["write", "chart-readme", "--chart", str(chart)]) == 0
    assert "| Pulled from (a mirror of yours, say). |" in (chart / "README.md").read_text()
    assert resources_main(["check", "chart-readme", "--chart", str(chart)]) == 0
    values.write_text(text.replace("  # Empty: the chart's appVersion.\n", ""))
    assert resources_main(["check", "chart-readme", "--chart", str(chart)]) == 1
    assert "image.tag is undocumented" in capsys.readouterr().err
