"""One conformance suite for the cluster backends, run on every backend that runs here: `local`
where lessor is installed on the local control plane, `namespace` and `vcluster` in kind.

Each backend's pool is served by an operator of its own: a process on this machine, in a
namespace of its own (the installed lessor is not disturbed), with the shipped RBAC's
ServiceAccount (the test-only `namespace` backend with the administrator's credentials, as it
needs). Every backend must:

1. end provisioning with exactly one Ready cluster when its operator is SIGKILLed right after
   each of its writes, a fresh operator taking over each time;
2. give a kubeconfig that works from this machine (a vcluster's through a Gateway that passes
   TLS through to it by host name: Traefik's, e2e/kind/gateway.py; the `apiserver` backend of
   e2e/test_scenarios.py proves NodePort exposure in kind);
3. run a pod created through it, where the backend has nodes;
4. end a release's teardown verified, with nothing left, under the same SIGKILLs, and refill
   its pool, having captured the cluster's diagnostics bundle first (into MinIO on this machine;
   with the logs of the pod of 3 where there are nodes);
5. quarantine a cluster whose teardown cannot be verified, with the evidence.
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import subprocess
import tarfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.installation import Installation, wait_for
from e2e.kind import gateway
from e2e.kind.components import KindVersions
from e2e.test_scenarios import kubectl_binary
from lessor.controlplane.kubectl import Cluster
from lessor.controlplane.local_clusters import every_cluster
from lessor.controlplane.object_store import MinioServer
from lessor.operator.backends.base import InstanceRef
from lessor.operator.backends.namespace import namespace_of
from tests.integration.operator_harness import CrashPoint, Objects, Operator
from tests.integration.service_accounts import install_rbac

pytestmark = pytest.mark.e2e
POOL = "conformance"
BUCKET = "conformance-bundles"
# Where each runs: `namespace` needs the controllers (tokens, namespace deletion) that the
# local installation runs without (it has no node).
BACKENDS = {"local": "local", "namespace": "kind", "vcluster": "kind"}


@dataclass
class Harness:
    backend: str
    installation: Installation
    host: Cluster
    objects: Objects
    kubeconfig: Path
    work: Path
    operators: list[Operator]

    def operator(self, crash: CrashPoint | None = None, teardown_grace: float = 120) -> Operator:
        extra = ["--no-leader-election"]
        extra += ["--test-backends"] if self.backend == "namespace" else []
        started = Operator(
            kubeconfig=self.kubeconfig,
            namespace=self.objects.namespace,
            backend_dir=self.work / "instances",
            log_path=self.work / "operator.log",
            leader_election=False,
            extra=extra,
            teardown_grace=teardown_grace,
        ).start(crash)
        self.operators.append(started)
        return started

    def stop_operators(self) -> None:
        for operator in self.operators:
            if operator.process and operator.process.poll() is None:
                operator.kill()
        self.operators.clear()

    def crashing_until(self, done: Callable[[], bool], what: str, timeout: float = 900) -> int:
        """Operators SIGKILLed right after their first write, each replaced at once, until
        `done`; how many were killed."""
        record = self.work / "crashes.jsonl"
        deadline = time.monotonic() + timeout
        killed = 0
        try:
            while not done():
                if time.monotonic() > deadline:
                    raise AssertionError(f"timed out waiting for {what} after {killed} kills")
                running = self.operators[-1] if self.operators else None
                if running is None or (running.process and running.process.poll() is not None):
                    killed += running is not None
                    self.operators.clear()
                    self.operator(CrashPoint("after", 1, "any", record))
                time.sleep(0.3)
        finally:
            self.stop_operators()
        return killed

    def spec(self) -> dict[str, Any]:
        if self.backend != "vcluster":
            return {"type": self.backend}
        return self.installation.vcluster_backend()

    def instances(self) -> list[dict[str, Any]]:
        return self.objects.list("clusterinstances")

    def ready(self) -> list[dict[str, Any]]:
        return [i for i in self.instances() if i.get("status", {}).get("phase") == "Ready"]

    def traces(self, instance: dict[str, Any]) -> list[str]:
        """What of the instance's cluster exists on the host, looked for by the test itself."""
        name, uid = instance["metadata"]["name"], instance["metadata"]["uid"]
        if self.backend == "local":
            return [str(d) for d in every_cluster(self.work / "instances") if uid in d.name]
        namespace = self.cluster_namespace(instance)
        found = self.host.kubectl("get", "namespace", namespace, check=False)
        return [f"namespace {namespace} of {name}"] if found.returncode == 0 else []

    def cluster_namespace(self, instance: dict[str, Any]) -> str:
        if self.backend == "namespace":
            return namespace_of_instance(instance)
        return str(instance["status"]["backendDetails"]["namespace"])


def namespace_of_instance(instance: dict[str, Any]) -> str:
    metadata = instance["metadata"]
    return namespace_of(InstanceRef(metadata["namespace"], metadata["name"], metadata["uid"]))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MinioServer]:
    """Where each pool's diagnostics bundles go; the operators run on this machine."""
    with MinioServer(tmp_path_factory.mktemp("store")) as server:
        server.create_bucket(BUCKET)
        yield server


def bundle_files(store: MinioServer, key: str) -> dict[str, bytes]:
    body = store.client().get_object(Bucket=BUCKET, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers()}  # type: ignore[union-attr]


@pytest.fixture(params=list(BACKENDS))
def harness(
    request: pytest.FixtureRequest, configured: Installation, tmp_path: Path, store: MinioServer
) -> Iterator[Harness]:
    backend: str = request.param
    if BACKENDS[backend] != configured.kind or configured.host is None:
        pytest.skip(f"the {backend} backend runs where lessor is installed on {BACKENDS[backend]}")
    host = configured.host
    namespace = f"conformance-{uuid.uuid4().hex[:6]}"
    host.kubectl("create", "namespace", namespace)
    accounts = install_rbac(
        host, namespace, tmp_path,
        local_backend=backend == "local", instance_namespaces=backend == "vcluster",
    )  # fmt: skip
    kubeconfig = host.kubeconfig if backend == "namespace" else accounts["lessor-operator"]
    harness = Harness(backend, configured, host, Objects(host, namespace), kubeconfig, tmp_path, [])
    host.kubectl(
        "create", "secret", "generic", "store", "-n", namespace,
        *store.credential_literals(),
    )  # fmt: skip
    diagnostics = {
        "bucket": BUCKET, "endpoint": store.endpoint, "credentialsSecretRef": {"name": "store"},
    }  # fmt: skip
    harness.objects.apply(
        {
            "apiVersion": "lessor.dev/v1alpha1",
            "kind": "ClusterPool",
            "metadata": {"name": POOL},
            "spec": {
                "warmTarget": 1, "ttl": "30m", "backend": harness.spec(),
                "diagnostics": diagnostics,
                # The operator is killed after every write: a check that fails meanwhile must
                # not cost the scenario its cluster (about 5 min of failures in a row).
                "healthCheck": {"failureThreshold": 60},
            },
        }
    )  # fmt: skip
    try:
        yield harness
    finally:
        harness.stop_operators()
    if configured.kind == "kind":
        # The kind cluster is deleted at the end, but its two cores are shared until then: the
        # clusters' pods go now (their namespaces, as no operator of this harness is left to
        # tear them down), so that the scenarios after this one can schedule theirs.
        for instance in harness.instances():
            if backend != "namespace" and instance.get("status", {}).get("backendDetails"):
                host.kubectl(
                    "delete", "namespace", harness.cluster_namespace(instance), "--wait=false",
                    "--ignore-not-found",
                )  # fmt: skip
        # Its leases and instances keep lessor's finalizers, which only this harness's operator
        # would remove: left, they would hold the CRDs' deletion at the doc's uninstall forever.
        # Their clusters are gone with the namespaces above, so they are let go as an
        # administrator lets go of an abandoned namespace's objects.
        listed = host.kubectl("get", "clusterleases,clusterinstances,clusterpools", "-n",
                              namespace, "-o", "name").stdout.split()  # fmt: skip
        for name in listed:
            host.kubectl("patch", name, "-n", namespace, "--type=merge",
                         "-p", '{"metadata": {"finalizers": null}}', check=False)  # fmt: skip
        host.kubectl("delete", "namespace", namespace, "--wait=false")
        return
    operator = harness.operator(teardown_grace=5)
    # Each instance is torn down behind its finalizer (nothing waits on a garbage collector:
    # the local control plane runs none).
    host.kubectl("delete", "clusterpool", POOL, "-n", namespace, "--wait=false")
    host.kubectl("delete", "clusterinstances", "--all", "-n", namespace, "--wait=false")
    wait_for("every instance gone", lambda: not harness.instances(), timeout=600)
    operator.kill()
    host.kubectl("delete", "namespace", namespace, "--wait=false")


def kubectl(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl_binary(), "--kubeconfig", kubeconfig, *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_a_backend_provisions_serves_and_tears_down_through_sigkills(
    harness: Harness, store: MinioServer
) -> None:
    objects = harness.objects
    killed = harness.crashing_until(lambda: bool(harness.ready()), "a Ready cluster")
    assert killed > 0, "the operator was killed after its writes"
    [instance] = harness.instances()
    assert instance["status"]["phase"] == "Ready", "exactly one cluster, however many kills"
    assert len(harness.traces(instance)) == 1

    harness.operator()
    objects.lease("conforming", POOL)
    bound = objects.wait_phase("conforming", "Bound", timeout=300)
    secret = objects.get("secret", bound["status"]["kubeconfigSecret"])
    assert secret is not None
    kubeconfig = harness.work / "lease.kubeconfig"
    kubeconfig.write_bytes(base64.b64decode(secret["data"]["kubeconfig"]))
    version = kubectl(str(kubeconfig), "version", "-o", "json")
    assert version.returncode == 0, version.stderr
    assert json.loads(version.stdout)["serverVersion"]["gitVersion"]
    if harness.backend != "namespace":  # a ServiceAccount's token there, confined already
        assert_the_leases_own(kubeconfig, "conforming")
    if harness.backend == "vcluster":  # through the Gateway, by the cluster's own host name
        passthrough = harness.installation.gateway
        assert passthrough is not None
        [entry] = yaml.safe_load(kubeconfig.read_text())["clusters"]
        assert entry["cluster"]["server"] == f"https://{passthrough.address}:{passthrough.port}"
        hostname = f"{harness.cluster_namespace(instance)}.{gateway.DOMAIN}"
        assert entry["cluster"]["tls-server-name"] == hostname
    if harness.installation.kind == "kind":  # a backend whose pods run on nodes
        pause = f"registry.k8s.io/pause:{KindVersions.pinned().pause}"
        made = kubectl(str(kubeconfig), "create", "deployment", "sleeper", f"--image={pause}")
        assert made.returncode == 0, made.stderr
        rolled = kubectl(str(kubeconfig), "rollout", "status", "deploy/sleeper", "--timeout=300s")
        assert rolled.returncode == 0, rolled.stderr
        [pod] = json.loads(kubectl(str(kubeconfig), "get", "pods", "-o", "json").stdout)["items"]
        assert pod["status"]["phase"] == "Running"
        logs = f"logs/{pod['metadata']['namespace']}/{pod['metadata']['name']}/"
    harness.stop_operators()

    objects.patch("clusterlease", "conforming", {"spec": {"releaseRequested": True}})
    harness.crashing_until(
        lambda: objects.phase("clusterlease", "conforming") == "Released", "Released"
    )
    assert objects.get("clusterinstance", instance["metadata"]["name"]) is None
    assert harness.traces(instance) == [], "nothing of the cluster is left"
    record = objects.status("clusterlease", "conforming")["diagnostics"]
    assert record["state"] == "Captured", record
    files = bundle_files(store, record["key"])
    assert json.loads(files["lessor/lease.json"])["name"] == "conforming"
    assert json.loads(files["cluster/version.json"])["gitVersion"]
    if harness.installation.kind == "kind":
        assert any(name.startswith(logs) for name in files), sorted(files)
    harness.operator()
    wait_for("the pool refilled", lambda: len(harness.ready()) == 1, timeout=300)


def assert_the_leases_own(kubeconfig: Path, lease: str) -> None:
    """The cluster knows the holder of `kubeconfig` as the lease, administrator by its group,
    never as the cluster's own admin (issue 40, item 7)."""
    whoami = kubectl(str(kubeconfig), "auth", "whoami", "-o", "json")
    assert whoami.returncode == 0, whoami.stderr
    user = json.loads(whoami.stdout)["status"]["userInfo"]
    assert user["username"] == f"lessor-lease:{lease}", user
    assert "lessor:lease-holders" in user["groups"] and "system:masters" not in user["groups"]


def test_a_teardown_that_cannot_be_verified_is_quarantined(harness: Harness) -> None:
    objects = harness.objects
    harness.operator(teardown_grace=5)
    objects.lease("stuck", POOL)
    bound = objects.wait_phase("stuck", "Bound", timeout=900)
    instance = objects.get("clusterinstance", bound["status"]["clusterName"])
    assert instance is not None
    unblock = hold_teardown(harness, instance)
    try:
        objects.patch("clusterlease", "stuck", {"spec": {"releaseRequested": True}})
        objects.wait_phase("stuck", "Quarantined", timeout=300)
        held = objects.get("clusterinstance", instance["metadata"]["name"])
        assert held is not None and held["status"]["phase"] == "Quarantined"
        assert held["status"]["teardown"]["evidence"], "the evidence is kept"
    finally:
        unblock()
    # The quarantine is rechecked every minute; a touch has it looked at now, as an
    # administrator who removed the remains would. The host finishes deleting them a little
    # later (a namespace's deletion is retried), so the touch is repeated until one finds them gone.
    name = instance["metadata"]["name"]
    touches = itertools.count()

    def gone() -> bool:
        if objects.get("clusterinstance", name) is None:
            return True
        recheck = {"metadata": {"annotations": {"conformance/recheck": str(next(touches))}}}
        # It may be gone since the read: the next read says so.
        objects.patch("clusterinstance", name, recheck, check=False)
        return False

    wait_for("the cleaned-up instance gone", gone, timeout=300, every=5)


def hold_teardown(harness: Harness, instance: dict[str, Any]) -> Callable[[], None]:
    """A real fault that keeps the cluster's teardown from being verified, and its remedy: an
    immutable file in a `local` cluster's directory, an object no one will finalize in the
    cluster's namespace."""
    if harness.backend == "local":
        [directory] = harness.traces(instance)
        pinned = str(Path(directory) / "pki" / "ca.crt")
        subprocess.run(["chattr", "+i", pinned], check=True)
        return lambda: subprocess.run(["chattr", "-i", pinned], check=False) and None
    namespace = harness.cluster_namespace(instance)
    blocker = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "held", "namespace": namespace,
                     "finalizers": ["conformance.lessor.dev/hold"]},
    }  # fmt: skip
    harness.host.kubectl("apply", "-f", "-", input=json.dumps(blocker))
    return lambda: harness.host.kubectl(
        "patch", "configmap", "held", "-n", namespace, "--type=merge",
        "-p", '{"metadata": {"finalizers": null}}', check=False,
    ) and None  # fmt: skip
