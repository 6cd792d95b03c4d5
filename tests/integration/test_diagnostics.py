"""Diagnostics bundles (spec 4.2.6) on the real stack: real local clusters leased through the
API server, captured by the operator when their lease ends, stored in a real MinIO with the
credentials of a Secret, and handed to their owner alone as pre-signed URLs that MinIO expires."""

from __future__ import annotations

import base64
import datetime
import io
import json
import os
import secrets
import signal
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.kubectl import Cluster, wait_established
from lessor.controlplane.object_store import MinioServer
from lessor.resources.cluster import LEASE_FINALIZER
from tests.integration.hostile_cluster import HostileApiServer
from tests.integration.operator_harness import (
    Objects,
    Operator,
    destroy_local_clusters,
    pids_of,
    wait_for,
)
from tests.integration.test_apiserver import Api, start_api

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "crds"
ALICE, BOB = "alice-" + secrets.token_hex(8), "bob-" + secrets.token_hex(8)
BUCKET = "lessor-diagnostics"
MiB = 1024 * 1024
# What the capture of a hostile cluster may add to the operator's peak memory: a few of its
# pages (8 MiB each, lessor.operator.diagnostics.bundle_contents) and a decoding window, with
# room for a loaded machine (measured: 19 MiB; the capture that parsed whole pages took 2.1 GiB).
CAPTURE_MEMORY = 64 * MiB


@dataclass
class Stack:
    cluster: Cluster
    objects: Objects
    api: Api
    minio: MinioServer
    directory: Path
    operators: list[Operator]

    def start_operator(self) -> Operator:
        operator = Operator(
            self.cluster.kubeconfig,
            self.objects.namespace,
            self.directory / "instances",
            self.directory / f"operator-{len(self.operators)}.log",
        ).start()
        self.operators.append(operator)
        return operator

    def pool(self, name: str, warm: int, **diagnostics: Any) -> None:
        settings = {
            "bucket": BUCKET,
            "endpoint": self.minio.endpoint,
            "credentialsSecretRef": {"name": "store"},
            **diagnostics,
        }
        self.objects.pool(name, warmTarget=warm, ttl="30m", diagnostics=settings)


def _policy(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "AccessPolicy",
        "metadata": {"name": "tests", "namespace": namespace},
        "spec": {
            "auth": {
                "staticTokens": [
                    {"secretRef": {"name": "tokens", "key": "alice"}, "claims": {"sub": "alice"}},
                    {"secretRef": {"name": "tokens", "key": "bob"}, "claims": {"sub": "bob"}},
                ]
            },
            "identity": "{sub}",
            "rules": [{"pools": ["dx-*"], "maxConcurrentLeases": 5}],
        },
    }


@pytest.fixture(scope="module")
def stack(control_plane: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if not isinstance(control_plane, LocalControlPlane):
        pytest.skip("leases `local` clusters, which only the local control plane's operator serves")
    directory = tmp_path_factory.mktemp("diagnostics")
    namespace = f"dx-{uuid.uuid4().hex[:8]}"
    control_plane.kubectl("apply", "-f", str(CRDS))
    wait_established(control_plane)
    control_plane.kubectl("create", "namespace", namespace)
    secret = ("create", "secret", "generic", "-n", namespace)
    control_plane.kubectl(
        *secret, "tokens", f"--from-literal=alice={ALICE}", f"--from-literal=bob={BOB}"
    )
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(_policy(namespace)))
    with MinioServer(directory / "minio") as minio:
        minio.create_bucket(BUCKET)
        control_plane.kubectl(
            *secret,
            "store",
            *minio.credential_literals(),
        )
        process, api = start_api(control_plane, namespace, directory / "api.log")
        stack = Stack(control_plane, Objects(control_plane, namespace), api, minio, directory, [])
        stack.start_operator()
        try:
            yield stack
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
            for operator in stack.operators:
                if operator.process and operator.process.poll() is None:
                    operator.kill(signal.SIGTERM)
            destroy_local_clusters(directory / "instances")
            control_plane.kubectl("delete", "namespace", namespace, "--wait=false")


def _condition(stack: Stack, pool: str, kind: str = "DiagnosticsReady") -> dict[str, Any] | None:
    conditions = stack.objects.pool_status(pool).get("conditions", [])
    return next((c for c in conditions if c["type"] == kind), None)


def _lease(stack: Stack, pool: str) -> tuple[str, Path]:
    """A Bound lease of Alice's from `pool` and its kubeconfig."""
    created = stack.api.call("POST", "/v1/leases", token=ALICE, body={"pool": pool})
    assert created.status == 202, created.body
    lease_id = created.body["id"]

    def bound() -> dict[str, Any] | None:
        body = stack.api.call("GET", f"/v1/leases/{lease_id}", token=ALICE).body
        return body if body.get("phase") == "Bound" else None

    path = stack.directory / f"{lease_id}.kubeconfig"
    path.write_text(wait_for(f"{lease_id} Bound", bound, timeout=180)["kubeconfig"])
    return lease_id, path


def _kubectl(kubeconfig: Path, *args: str, input: str | None = None) -> str:
    result = subprocess.run(
        [str(ensure_binaries() / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True, text=True, timeout=60, check=False, input=input,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def _cli(
    stack: Stack, token: str, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LESSOR_ENDPOINT": stack.api.base, "LESSOR_TOKEN": token}
    env["HOME"] = str(stack.directory)
    return subprocess.run(
        [sys.executable, "-m", "lessor.cli.main", *args],
        env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def _event(namespace: str, name: str, message: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {"kind": "ConfigMap", "name": "app", "namespace": namespace},
            "reason": "Tested",
            "message": message,
            "type": "Warning",
        }
    )


def _released(stack: Stack, lease_id: str) -> dict[str, Any]:
    assert stack.api.call("DELETE", f"/v1/leases/{lease_id}", token=ALICE).status == 204

    def ended() -> dict[str, Any] | None:
        lease = stack.objects.get("clusterlease", lease_id)
        return lease if lease and lease.get("status", {}).get("phase") == "Released" else None

    return wait_for(f"{lease_id} Released", ended, timeout=180)


def _download(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _fetched(stack: Stack, lease_id: str) -> tuple[dict[str, Any], bytes]:
    """Alice's answer for the bundle, and the bundle downloaded with it; a URL that expired
    before its download (a slow machine against a short urlTtl) is asked for again."""

    def attempt() -> tuple[dict[str, Any], bytes] | None:
        answer = stack.api.call("GET", f"/v1/leases/{lease_id}/diagnostics", token=ALICE)
        assert answer.status == 200, answer.body
        status, body = _download(answer.body["url"])
        return (answer.body, body) if status == 200 else None

    return wait_for("a bundle downloaded with a fresh URL", attempt, timeout=120)


def _files(bundle: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(bundle), mode="r:gz") as archive:
        return {
            member.name: archive.extractfile(member).read()  # type: ignore[union-attr]
            for member in archive.getmembers()
        }


def _listed(files: dict[str, bytes], name: str) -> bytes:
    """Every page of one of the cluster's lists in the bundle, in order."""
    pages = sorted(path for path in files if path.startswith(f"cluster/{name}/page-"))
    return b"".join(files[path] for path in pages)


def test_an_ended_leases_bundle_holds_its_cluster_and_goes_to_its_owner_alone(
    stack: Stack,
) -> None:
    stack.pool("dx-main", 1, urlTtl="10s", serverSideEncryption="AES256", logLines=20)
    ready = wait_for("DiagnosticsReady", lambda: _condition(stack, "dx-main"), timeout=60)
    assert ready["status"] == "True", ready
    lease_id, kubeconfig = _lease(stack, "dx-main")
    missing = stack.api.call("GET", f"/v1/leases/{lease_id}/diagnostics", token=ALICE)
    assert missing.status == 404, "nothing is captured while the lease holds its cluster"
    marker = f"marker-{uuid.uuid4().hex}"
    _kubectl(kubeconfig, "create", "namespace", "app")
    _kubectl(kubeconfig, "create", "-f", "-", input=_event("app", "seen", marker))

    lease = _released(stack, lease_id)
    record = lease["status"]["diagnostics"]
    assert record["state"] == "Captured", record
    assert record["store"]["bucket"] == BUCKET
    captured = [c for c in lease["status"]["conditions"] if c["type"] == "DiagnosticsCaptured"]
    assert [(c["status"], c["reason"]) for c in captured] == [("True", "Captured")]
    assert "DiagnosticsCaptured" in stack.objects.events(lease_id)

    answer, bundle = _fetched(stack, lease_id)
    assert set(answer) == {"url", "expires_at", "captured_at", "size_bytes", "truncated"}
    assert answer["truncated"] is False
    assert len(bundle) == answer["size_bytes"]
    files = _files(bundle)
    assert {
        "capture.json", "cluster/version.json", "cluster/namespaces/page-0001.json",
        "cluster/nodes/page-0001.json", "cluster/pods/page-0001.json",
        "cluster/events/page-0001.json", "lessor/lease.json", "lessor/events.json",
    } <= set(files)  # fmt: skip
    assert marker in _listed(files, "events").decode()
    assert '"app"' in _listed(files, "namespaces").decode()
    record_of_lease = json.loads(files["lessor/lease.json"])
    assert record_of_lease["name"] == lease_id
    assert record_of_lease["spec"]["requester"] == "tests/alice"
    assert record_of_lease["status"]["clusterName"]
    assert "Bound" in files["lessor/events.json"].decode()
    manifest = json.loads(files["capture.json"])
    assert manifest["truncated"] is False and manifest["timedOut"] is False
    for secret_value in (stack.minio.secret_key, ALICE):
        assert secret_value.encode() not in bundle and secret_value not in json.dumps(lease)
    head = stack.minio.client().head_object(Bucket=BUCKET, Key=record["key"])
    assert head["ServerSideEncryption"] == "AES256"

    downloaded = stack.directory / "bundle.tar.gz"
    cli = wait_for(  # a URL outlives a slow CLI start: a fresh one is signed on each run
        "the CLI's download",
        lambda: (
            run if (run := _cli(
                stack, ALICE, "diagnostics", lease_id, "--download", str(downloaded), "-o", "json"
            )).returncode == 0 else None
        ),
        timeout=120,
    )  # fmt: skip
    assert json.loads(cli.stdout)["file"] == str(downloaded)
    assert set(_files(downloaded.read_bytes())) == set(files)
    refused = _cli(stack, BOB, "diagnostics", lease_id)
    assert refused.returncode == 4 and len(refused.stderr.strip().splitlines()) == 1, refused

    other = stack.api.call("GET", f"/v1/leases/{lease_id}/diagnostics", token=BOB)
    assert other.status == 404, "another tenant's lease is not found"
    assert "url" not in json.dumps(other.body)

    wait_for(
        "MinIO refusing the URL once urlTtl is past", lambda: _download(answer["url"])[0] == 403
    )
    assert _fetched(stack, lease_id)[1] == bundle, "a new URL works after the old one expired"

    stack.minio.client().delete_object(Bucket=BUCKET, Key=record["key"])
    gone = stack.api.call("GET", f"/v1/leases/{lease_id}/diagnostics", token=ALICE)
    assert gone.status == 404 and "gone" in gone.body["detail"], gone.body


def test_a_bundle_outlives_its_lease_until_its_retention_ends(stack: Stack) -> None:
    """The lease is deleted before its bundle is fetched (what the operator's retention does
    after a day): the bundle is still its owner's, for the pool's retention and no longer."""
    stack.pool("dx-kept", 1, retention="90s")
    lease_id, _ = _lease(stack, "dx-kept")
    record = _released(stack, lease_id)["status"]["diagnostics"]
    assert record["state"] == "Captured", record
    kept = stack.objects.get("diagnosticsbundle", lease_id)
    assert kept is not None, "the record is written with the capture"
    assert (
        kept["spec"]["requester"] == "tests/alice"
        and kept["spec"]["record"]["key"] == record["key"]
    )

    # As a lease ended by an operator that wrote no record and kept the finalizer (before
    # issue 45): deleted, it gets its record from the retention sweep, which runs at start.
    namespace = ("-n", stack.objects.namespace)
    stack.cluster.kubectl("delete", "diagnosticsbundle", lease_id, *namespace)
    stack.objects.patch("clusterlease", lease_id, {"metadata": {"finalizers": [LEASE_FINALIZER]}})
    stack.cluster.kubectl("delete", "clusterlease", lease_id, "--wait=false", *namespace)
    stack.operators[-1].kill(signal.SIGKILL)
    stack.start_operator()
    wait_for("the lease deleted", lambda: stack.objects.get("clusterlease", lease_id) is None)
    assert stack.api.call("GET", f"/v1/leases/{lease_id}", token=ALICE).status == 404
    assert stack.objects.get("diagnosticsbundle", lease_id) is not None
    answer, bundle = _fetched(stack, lease_id)
    assert len(bundle) == answer["size_bytes"]
    assert json.loads(_files(bundle)["lessor/lease.json"])["name"] == lease_id
    other = stack.api.call("GET", f"/v1/leases/{lease_id}/diagnostics", token=BOB)
    assert other.status == 404 and "url" not in json.dumps(other.body)

    def refused() -> dict[str, Any] | None:
        answer = stack.api.call("GET", f"/v1/leases/{lease_id}/diagnostics", token=ALICE)
        return answer.body if answer.status == 404 else None

    assert "retention" in wait_for("the retention's end", refused, timeout=120)["detail"]
    wait_for(
        "the record deleted by the operator",
        lambda: stack.objects.get("diagnosticsbundle", lease_id) is None,
        timeout=60,
    )
    gone = stack.api.call("GET", f"/v1/leases/{lease_id}/diagnostics", token=ALICE)
    assert gone.status == 404 and "retention" in gone.body["detail"], gone.body


def test_with_lease_saves_the_bundle_of_a_failed_command_and_none_of_a_passing_one(
    stack: Stack,
) -> None:
    """What a CI job keeps as its artifact: the cluster as the failed tests left it."""
    stack.pool("dx-ci", 1)
    wait_for("DiagnosticsReady", lambda: _condition(stack, "dx-ci"), timeout=60)
    artifacts = stack.directory / "artifacts"
    artifacts.mkdir()
    marker = f"marker-{uuid.uuid4().hex}"
    kubectl = ensure_binaries() / "kubectl"
    failing = f'{kubectl} create namespace "{marker}" >/dev/null && echo "$LESSOR_LEASE_ID"; exit 3'
    run = _cli(
        stack, ALICE, "with-lease", "dx-ci", "--diagnostics-on-failure", str(artifacts),
        "--", "sh", "-c", failing, timeout=420,
    )  # fmt: skip
    assert run.returncode == 3, run.stderr  # the command's status, bundle or not
    lease_id = run.stdout.strip()
    bundle = artifacts / f"lessor-diagnostics-{lease_id}.tar.gz"
    assert f"wrote {bundle}" in run.stderr, run.stderr
    assert marker in _listed(_files(bundle.read_bytes()), "namespaces").decode()

    passing = _cli(
        stack, ALICE, "with-lease", "dx-ci", "--diagnostics-on-failure", str(artifacts),
        "--", "sh", "-c", 'echo "$LESSOR_LEASE_ID"', timeout=420,
    )  # fmt: skip
    assert passing.returncode == 0, passing.stderr
    assert list(artifacts.iterdir()) == [bundle], "nothing is fetched for a command that passed"
    stack.pool("dx-ci", 0)  # no warm cluster left running under the module's later timings


def test_a_lease_that_expires_is_captured_with_the_clusters_credential_not_its_own(
    stack: Stack,
) -> None:
    """A capture on expiry reads the cluster after the lease's own client certificate has
    expired with the lease (issue 40, item 7): the operator reads it with the cluster's admin
    kubeconfig, kept in lessor's namespace, so the bundle still holds the cluster."""
    stack.pool("dx-expiry", 1)
    created = stack.api.call(
        "POST", "/v1/leases", token=ALICE, body={"pool": "dx-expiry", "ttl": "45s"}
    )
    assert created.status == 202, created.body
    lease_id = created.body["id"]
    bound = wait_for(f"{lease_id} Bound", lambda: (
        body if (body := stack.api.call("GET", f"/v1/leases/{lease_id}", token=ALICE).body)
        .get("phase") == "Bound" else None
    ), timeout=180)  # fmt: skip
    kubeconfig = stack.directory / f"{lease_id}.kubeconfig"
    kubeconfig.write_text(bound["kubeconfig"])
    _kubectl(kubeconfig, "create", "namespace", "before-expiry")

    def expired() -> dict[str, Any] | None:
        lease = stack.objects.get("clusterlease", lease_id)
        status = (lease or {}).get("status", {})
        return lease if status.get("phase") == "Expired" and status.get("diagnostics") else None

    lease = wait_for(f"{lease_id} Expired, its capture recorded", expired, timeout=240)
    record = lease["status"]["diagnostics"]
    assert record["state"] == "Captured", record
    files = _files(_fetched(stack, lease_id)[1])
    assert '"before-expiry"' in _listed(files, "namespaces").decode()


def test_a_store_that_cannot_be_used_is_reported_and_leases_still_end(stack: Stack) -> None:
    stack.pool("dx-check", 0, credentialsSecretRef={"name": "no-such-secret"})

    def reason(expected: str) -> dict[str, Any] | None:
        found = _condition(stack, "dx-check")
        return found if found and found["reason"] == expected else None

    found = wait_for("CredentialsInvalid", lambda: reason("CredentialsInvalid"), timeout=60)
    assert found["status"] == "False" and "no-such-secret" in found["message"]
    stack.objects.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "wrong"},
            "stringData": {"AWS_ACCESS_KEY_ID": "nobody", "AWS_SECRET_ACCESS_KEY": "wrong-key"},
        }
    )
    stack.pool("dx-check", 0, credentialsSecretRef={"name": "wrong"})
    # A HEAD has no body to say why: unknown credentials are denied access.
    wait_for("AccessDenied", lambda: reason("AccessDenied"), timeout=60)
    assert "wrong-key" not in json.dumps(stack.objects.get("clusterpool", "dx-check"))
    stack.pool("dx-check", 0, bucket="no-such-bucket")
    wait_for("BucketNotFound", lambda: reason("BucketNotFound"), timeout=60)
    stack.pool("dx-check", 0, endpoint="http://127.0.0.1:9")  # discard: nothing listens
    wait_for("EndpointUnreachable", lambda: reason("EndpointUnreachable"), timeout=60)
    assert "DiagnosticsEndpointUnreachable" in stack.objects.events("dx-check")

    # A lease of a pool whose store is unusable ends when asked, without a bundle.
    stack.pool("dx-broken", 1, bucket="no-such-bucket", captureTimeout="20s")
    lease_id, _ = _lease(stack, "dx-broken")
    started = time.monotonic()
    lease = _released(stack, lease_id)
    assert time.monotonic() - started < 60, "not held back past captureTimeout (20s), 3x"
    record = lease["status"]["diagnostics"]
    assert record["state"] == "Failed" and "could not be stored" in record["message"], record
    condition = next(c for c in lease["status"]["conditions"] if c["type"] == "DiagnosticsCaptured")
    assert condition["status"] == "False"
    assert "DiagnosticsFailed" in stack.objects.events(lease_id)
    answer = stack.api.call("GET", f"/v1/leases/{lease_id}/diagnostics", token=ALICE)
    assert answer.status == 404


def test_a_capture_is_cut_at_maxbytes(stack: Stack) -> None:
    # SSE-KMS with the key of MinIO's own KMS (lessor.controlplane.object_store).
    stack.pool(
        "dx-small", 1, maxBytes=65536, serverSideEncryption="aws:kms", kmsKeyId="lessor-test"
    )
    lease_id, kubeconfig = _lease(stack, "dx-small")
    _kubectl(kubeconfig, "create", "namespace", "noisy")
    events = "\n".join(_event("noisy", f"e{n}", "x" * 2000) for n in range(60))
    _kubectl(kubeconfig, "create", "-f", "-", input=events)
    lease = _released(stack, lease_id)
    assert lease["status"]["diagnostics"]["truncated"] is True
    key = lease["status"]["diagnostics"]["key"]
    head = stack.minio.client().head_object(Bucket=BUCKET, Key=key)
    assert head["ServerSideEncryption"] == "aws:kms" and "lessor-test" in head["SSEKMSKeyId"]
    answer, bundle = _fetched(stack, lease_id)
    assert answer["truncated"] is True
    files = _files(bundle)
    manifest = json.loads(files.pop("capture.json"))
    assert manifest["truncated"] is True
    assert sum(map(len, files.values())) <= 65536
    assert any(f.get("truncated") for f in manifest["files"])


def test_a_cluster_that_stops_answering_costs_no_more_than_capture_timeout_even_across_a_restart(
    stack: Stack,
) -> None:
    """The leased cluster's kube-apiserver is frozen (SIGSTOP: it accepts and never answers, as a
    hostile or wedged cluster may), and the operator is SIGKILLed mid-capture: the next one
    resumes from the recorded start, so the lease still ends by captureTimeout, with the part
    it could capture."""
    # 45 s: the upload keeps 30% of it, and neither 6 s (of 20) nor 9 s (of 30) always stored
    # the partial bundle on a loaded 2-core machine (clean-clone runs, three test workers).
    stack.pool("dx-frozen", 1, captureTimeout="45s")
    lease_id, _ = _lease(stack, "dx-frozen")
    instance = stack.objects.get(
        "clusterinstance", stack.objects.status("clusterlease", lease_id)["clusterName"]
    )
    assert instance is not None
    frozen = pids_of(instance)
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        assert stack.api.call("DELETE", f"/v1/leases/{lease_id}", token=ALICE).status == 204
        capturing = wait_for(
            "Capturing",
            lambda: stack.objects.status("clusterlease", lease_id).get("diagnostics"),
            timeout=60,
        )
        assert capturing["state"] == "Capturing"
        stack.operators[-1].kill(signal.SIGKILL)
        stack.start_operator()
        record = wait_for(
            "the capture's end",
            lambda: (
                (found := stack.objects.status("clusterlease", lease_id).get("diagnostics"))
                and found["state"] != "Capturing"
                and found
            ),
            timeout=90,
        )
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    started = _time(capturing["startedAt"])
    assert _time(record["finishedAt"]) - started <= 45 + 2, record
    assert record["state"] == "Captured" and record["truncated"] is True, record
    files = _files(_fetched(stack, lease_id)[1])
    assert json.loads(files["capture.json"])["timedOut"] is True
    assert "lessor/lease.json" in files, "what lessor knows is kept when the cluster is silent"
    wait_for("Released", lambda: stack.objects.phase("clusterlease", lease_id) == "Released", 120)


def _time(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_a_cluster_answering_huge_pages_costs_the_operator_a_few_pages_of_memory(
    stack: Stack,
) -> None:
    """The lease's tenant stops its kube-apiserver and answers on its port, with its certificate,
    every GET with a 60 MiB page of `{"items":[{},{},...]}` (tests/integration/hostile_cluster.py).
    With the largest budget a pool may set (maxBytes 1 GiB), the capture keeps each page only up
    to the page bound, raw; the bundle is stored and says it is partial and why; the operator's
    peak resident memory (VmHWM, reset before the release) grows by less than CAPTURE_MEMORY and
    stays under the limit its Deployment ships with."""
    stack.pool("dx-hostile", 1, maxBytes=1024 * MiB, captureTimeout="120s")
    lease_id, _ = _lease(stack, "dx-hostile")
    name = stack.objects.status("clusterlease", lease_id)["clusterName"]
    instance = stack.objects.get("clusterinstance", name)
    assert instance is not None
    details = instance["status"]["backendDetails"]
    pids = dict(part.split("=") for part in details["pids"].split(","))
    port = int(instance["status"]["endpoint"].rsplit(":", 1)[1])
    pki = Path(details["directory"]) / "pki"
    os.kill(int(pids["kube-apiserver"]), signal.SIGKILL)
    server = wait_for(
        "the cluster's port taken over",
        lambda: _listening_on(port, pki),
        timeout=60,
    )
    leader = _leader(stack)
    assert leader.process is not None
    baseline = _reset_peak_memory(leader.process.pid)
    try:
        lease = _released(stack, lease_id)
    finally:
        server.close()
    grown = _memory(leader.process.pid, "VmHWM") - baseline
    assert grown < CAPTURE_MEMORY, f"the capture took {grown / MiB:.0f} MiB"
    assert baseline + grown < _operator_memory_limit()
    assert any(r.startswith("GET /api/v1/namespaces?limit=") for r in server.requests)

    record = lease["status"]["diagnostics"]
    assert record["state"] == "Captured" and record["truncated"] is True, record
    assert "page bound" in record["message"], record
    files = _files(_fetched(stack, lease_id)[1])
    manifest = json.loads(files["capture.json"])
    assert manifest["truncated"] is True and manifest["timedOut"] is False
    entries = {entry["name"]: entry for entry in manifest["files"]}
    for listed in ("namespaces", "nodes", "pods", "events"):
        page = f"cluster/{listed}/page-0001.json"
        assert entries[page]["truncated"] is True and "page bound" in entries[page]["cut"]
        assert len(files[page]) == entries[page]["bytes"] < 60 * MiB
        assert files[page].startswith(b'{"items":[{},{},'), "kept raw, as answered"
    assert not [name for name in files if name.startswith("logs/")]
    assert "more than 1000 pods" in entries["logs/"]["cut"], "the pods decoded are counted"


def _listening_on(port: int, pki: Path) -> HostileApiServer | None:
    try:
        return HostileApiServer(port, pki / "apiserver.crt", pki / "apiserver.key", 60 * MiB)
    except OSError:  # the killed kube-apiserver's socket is not closed yet
        return None


def _leader(stack: Stack) -> Operator:
    def leading() -> Operator | None:
        running = [o for o in stack.operators if o.process and o.process.poll() is None]
        return next((o for o in running if o.serving() and o.metric("lessor_leader") == 1), None)

    return wait_for("the leading operator", leading, timeout=60)


def _memory(pid: int, field: str) -> int:
    """A size from /proc/<pid>/status (VmRSS, VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


def _reset_peak_memory(pid: int) -> int:
    """Reset the process's VmHWM to its current resident size (proc(5), clear_refs 5); that
    size."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _memory(pid, "VmHWM")


def _operator_memory_limit() -> int:
    """The operator container's memory limit as manifests/base ships it, in bytes."""
    documents = yaml.safe_load_all((ROOT / "manifests/base/operator.yaml").read_text())
    deployment = next(d for d in documents if d and d["kind"] == "Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    limit = next(c for c in containers if c["name"] == "operator")["resources"]["limits"]
    amount = str(limit["memory"])
    assert amount.endswith("Mi"), amount
    return int(amount[:-2]) * MiB


def test_the_credentials_never_reach_a_status_or_a_log(stack: Stack) -> None:
    secret = stack.objects.get("secret", "store")
    assert secret is not None
    key = base64.b64decode(secret["data"]["AWS_SECRET_ACCESS_KEY"]).decode()
    for path in stack.directory.glob("*.log"):
        assert key not in path.read_text(errors="replace"), path
    for kind in ("clusterpools", "clusterleases"):
        assert key not in json.dumps(stack.objects.list(kind))
