"""lessor as its users meet it: installed with `kubectl apply -k`, configured with
`kubectl apply`, used through the `lessor` command and the HTTP API. Nothing here reaches into
the implementation; the installation (e2e/installation.py) decides where the components run."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.installation import NAMESPACE, Installation, operator_process, pid_of, wait_for
from e2e.people import ALICE, BOB, Person
from lessor import __version__
from lessor.controlplane.binaries import find_binaries
from lessor.controlplane.local_clusters import every_cluster

pytestmark = pytest.mark.e2e


@pytest.fixture
def alice(configured: Installation, tmp_path: Path) -> Person:
    person = Person(configured, tmp_path / "alice", ALICE)
    wait_for(
        "two warm clusters",
        lambda: person.http("GET", "/v1/pools/e2e-warm")[1].get("ready", 0) >= 2,
        timeout=600,
    )
    return person


def kubectl_binary() -> str:
    cached = find_binaries()
    return str(cached / "kubectl") if cached else (shutil.which("kubectl") or "kubectl")


def test_the_install_is_in_place_and_answers(installation: Installation) -> None:
    for kind, name in (
        ("crd", "clusterleases.lessor.dev"),
        ("deployment", "lessor-operator"),
        ("deployment", "lessor-apiserver"),
        ("service", "lessor-apiserver"),
        ("poddisruptionbudget", "lessor-apiserver"),
        ("configmap", "lessor-config"),
    ):
        assert installation.kubectl("get", kind, name, "-n", NAMESPACE, check=False).returncode == 0
    # A hang guard: 10 s was once outrun on a loaded CI machine, at the same minute as a
    # request of the integration suite's fuzz test.
    status = urllib.request.urlopen(f"{installation.endpoint}/v1/status", timeout=60)  # noqa: S310
    assert json.loads(status.read())["version"] == __version__


def test_lease_use_extend_and_release_a_cluster(alice: Person) -> None:
    lease = alice.json("lease", "e2e-warm", "--ttl", "20m", "--name", "main")
    namespaces = subprocess.run(
        [kubectl_binary(), "--kubeconfig", lease["kubeconfig"], "get", "namespaces"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert namespaces.returncode == 0 and "kube-system" in namespaces.stdout, namespaces.stderr
    extended = alice.json("extend", lease["id"], "--ttl", "10m")
    assert extended["expires_at"] > lease["expires_at"]
    again = alice.run("extend", lease["id"], "--ttl", "10m")
    assert again.returncode == 6 and "extension_budget_exhausted" in again.stderr
    assert [row["id"] for row in alice.json("status")["leases"]] == [lease["id"]]
    alice.release(lease["id"])
    assert alice.json("status")["leases"] == []


def test_another_person_cannot_see_or_release_a_lease(alice: Person, tmp_path: Path) -> None:
    bob = Person(alice.installation, tmp_path / "bob", BOB)
    lease = alice.json("lease", "e2e-warm", "--no-wait")
    refused = bob.run("release", lease["id"])
    assert refused.returncode == 4 and "not found" in refused.stderr
    assert bob.json("status")["leases"] == []
    alice.release(lease["id"])


def test_a_lease_expires_at_its_ttl(alice: Person) -> None:
    lease = alice.json("lease", "e2e-warm", "--ttl", "5s")
    wait_for("Expired", lambda: alice.phase(lease["id"]) == "Expired", timeout=120)
    assert lease["id"] not in [row["id"] for row in alice.json("status")["leases"]]


def test_the_concurrency_quota_refuses_a_third_lease(alice: Person) -> None:
    held = [alice.json("lease", "e2e-warm", "--no-wait")["id"] for _ in range(2)]
    third = alice.run("lease", "e2e-warm", "--no-wait")
    assert third.returncode == 6 and "concurrency_limit" in third.stderr
    for lease_id in held:
        alice.release(lease_id)


@contextlib.contextmanager
def teardown_held(installation: Installation, cluster_name: str) -> Iterator[None]:
    """Make the teardown of one cluster unverifiable, as a stuck finalizer or an undeletable
    file does in real life: on the local backend an immutable file in its directory, on the
    apiserver backend a finalizer nothing removes on its Service."""
    if installation.kind == "local":
        if shutil.which("chattr") is None:
            pytest.skip("chattr is missing")
        clusters = every_cluster(installation.work / "instances")
        [directory] = [d for d in clusters if cluster_name in d.name]
        pinned = directory / "pki" / "ca.crt"
        if subprocess.run(["chattr", "+i", str(pinned)], check=False).returncode != 0:
            pytest.skip("chattr +i is not permitted here")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(pinned)], check=False)
        return
    service = f"service/apiserver-{cluster_name}"
    finalizers = '{"metadata": {"finalizers": ["e2e.lessor.dev/hold"]}}'
    installation.kubectl("patch", service, "-n", NAMESPACE, "--type=merge", "-p", finalizers)
    try:
        yield
    finally:
        installation.kubectl(
            "patch", service, "-n", NAMESPACE, "--type=merge",
            "-p", '{"metadata": {"finalizers": null}}', check=False,
        )  # fmt: skip


def test_an_unverifiable_teardown_quarantines_and_withholds_the_cluster(alice: Person) -> None:
    lease = alice.json("lease", "e2e-warm")
    rows = alice.http("GET", "/v1/pools/e2e-warm/leases")[1]
    cluster_name = next(row["cluster_name"] for row in rows if row["id"] == lease["id"])
    with teardown_held(alice.installation, cluster_name):
        assert alice.run("release", lease["id"]).returncode == 0
        # The teardown grace is 5 s on local and 60 s on kind (e2e/installation.py).
        wait_for("Quarantined", lambda: alice.phase(lease["id"]) == "Quarantined", timeout=400)
        again = alice.run("release", lease["id"])
        assert again.returncode == 6 and "teardown_quarantined" in again.stderr
        pools = {row["name"]: row for row in alice.json("status")["pools"]}
        assert pools["e2e-warm"]["quarantined"] >= 1


def test_two_api_replicas_serve_one_address_and_share_sessions(alice: Person) -> None:
    installation = alice.installation
    if installation.kind != "local":
        endpoints = installation.kubectl(
            "get", "endpointslices", "-n", NAMESPACE, "-l",
            "kubernetes.io/service-name=lessor-apiserver", "-o", "json",
        )  # fmt: skip
        ready = [e for s in json.loads(endpoints.stdout)["items"] for e in s.get("endpoints") or []]
        assert len([e for e in ready if e["conditions"].get("ready")]) == 2
        # Each request is a new connection, which kube-proxy sends to either pod at random.
        for _ in range(30):
            alice.http("GET", "/v1/pools")
        pods = [e["targetRef"]["name"] for e in ready]
        logs = [installation.kubectl("logs", pod, "-n", NAMESPACE).stdout for pod in pods]
        assert all("GET /v1/pools" in log for log in logs), "kube-proxy spread them to both"
        assert alice.run("login").returncode == 0
        for _ in range(10):  # a session made by one pod, accepted by both
            assert alice.json("status")["session"]["identity"] == "alice"
        return
    assert all(api.alive for api in installation.apis)
    for _ in range(30):
        alice.http("GET", "/v1/pools")
    logs = [api.log.read_text() for api in installation.apis]
    assert all("GET /v1/pools" in log for log in logs), "the kernel spread connections to both"
    assert alice.run("login").returncode == 0
    first = installation.apis[0]
    first.stop()
    try:
        status = alice.json("status")
        assert status["session"]["identity"] == "alice", "the other replica accepts the session"
        lease = alice.json("lease", "e2e-warm", "--no-wait")
        alice.release(lease["id"])
    finally:
        first.start()
        wait_for("the replica back", lambda: first.alive)


def test_the_operator_fails_over_when_its_leader_dies(alice: Person) -> None:
    installation = alice.installation
    leader = wait_for("a leader", installation.leader)
    if installation.kind == "local":
        pid = pid_of(leader)
        [process] = [p for p in installation.operators if p.popen and p.popen.pid == pid]
        process.stop(signal.SIGKILL)
    else:
        pod = leader.split("_", 1)[0]
        installation.kubectl("delete", "pod", pod, "-n", NAMESPACE, "--wait=false")
    lease = alice.json("lease", "e2e-warm", "--wait-timeout", "5m")
    assert lease["phase"] == "Bound"
    assert wait_for("a new leader", lambda: installation.leader() not in ("", leader) or None)
    alice.release(lease["id"])
    if installation.kind == "local":
        config = installation.work / "config.yaml"
        kubeconfig = installation.work / "lessor-operator.kubeconfig"
        installation.operators.append(operator_process(installation, config, kubeconfig, 9))
