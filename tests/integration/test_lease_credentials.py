"""A cluster lease's kubeconfig is the lease's own: a client certificate for the lease, signed by
the cluster's CA and valid until the lease's expiry, never the cluster's admin credential. It dies
with the lease even when nothing tears the cluster down, is issued again when the lease is
extended, and a bind replayed after a SIGKILL leaves a certificate that matches the expiry.

The real operator leases real `local` clusters; the certificates are presented to the clusters'
own kube-apiservers. The path of k3s and vcluster clusters, whose own kube-controller-manager
signs through the CSR API, runs here against the control plane's (the signer those clusters run;
their pods need real nodes, so vcluster's whole path runs in kind)."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from lessor.controlplane.binaries import ensure_binaries
from lessor.controlplane.kubectl import Cluster
from lessor.operator.backends import lease_credentials
from lessor.operator.backends.base import LeaseRef
from tests.integration.operator_harness import (
    CrashPoint,
    Objects,
    Operator,
    start_operator,
    wait_for,
)

pytestmark = pytest.mark.integration

USER = "lessor-lease:{}"
GROUP = "lessor:lease-holders"


def secret_text(objects: Objects, name: str) -> str:
    secret = objects.get("secret", name)
    assert secret is not None, f"no Secret {name}"
    return base64.b64decode(secret["data"]["kubeconfig"]).decode()


def lease_kubeconfig(objects: Objects, lease: str, tmp_path: Path) -> Path:
    """The kubeconfig the lease's owner is handed (what GET /v1/leases/:id serves)."""
    path = tmp_path / f"{lease}.kubeconfig"
    path.write_text(secret_text(objects, f"lease-{lease}-kubeconfig"))
    return path


def admin_kubeconfig(objects: Objects, instance: str, tmp_path: Path) -> Path:
    """The cluster's admin kubeconfig, which stays in lessor's namespace."""
    found = objects.get("clusterinstance", instance)
    assert found is not None
    path = tmp_path / f"{instance}-admin.kubeconfig"
    path.write_text(secret_text(objects, found["status"]["kubeconfigSecret"]))
    return path


def kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ensure_binaries() / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def certificate(kubeconfig: Path) -> x509.Certificate:
    [user] = yaml.safe_load(kubeconfig.read_text())["users"]
    return x509.load_pem_x509_certificate(base64.b64decode(user["user"]["client-certificate-data"]))


def answer_to(kubeconfig: Path, path: str = "/api") -> int:
    """The HTTP status the cluster answers GET `path` with, to the kubeconfig's credential."""
    document: dict[str, Any] = yaml.safe_load(kubeconfig.read_text())
    cluster, user = document["clusters"][0]["cluster"], document["users"][0]["user"]
    context = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    with tempfile.TemporaryDirectory() as scratch:
        pem = Path(scratch) / "client.pem"
        pem.write_bytes(
            base64.b64decode(user["client-certificate-data"])
            + base64.b64decode(user["client-key-data"])
        )
        context.load_cert_chain(str(pem))
    try:
        with urllib.request.urlopen(cluster["server"] + path, context=context, timeout=30):
            return 200
    except urllib.error.HTTPError as error:
        return error.code


def expiry_of(objects: Objects, lease: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(objects.status("clusterlease", lease)["expiresAt"])


def test_a_leases_kubeconfig_is_its_own_and_is_refused_after_expiry_while_the_cluster_runs(
    cluster: Cluster, env: tuple[Objects, list[Operator]], tmp_path: Path
) -> None:
    """The teardown is held by the commonest fault there is: no operator runs when the lease
    expires (a `local` cluster outlives its operator by design, so it keeps serving). Nothing of
    lessor acts at the expiry, so only the credential's own end can shut the tenant out."""
    objects, started = env
    operator = start_operator(cluster, objects, started, tmp_path)
    objects.pool("own", warmTarget=1)
    wait_for("1 ready", lambda: objects.pool_status("own").get("ready") == 1)
    objects.lease("mine", "own", ttl="30s")
    bound = objects.wait_phase("mine", "Bound")
    leased = lease_kubeconfig(objects, "mine", tmp_path)
    admin = admin_kubeconfig(objects, bound["status"]["clusterName"], tmp_path)
    operator.kill()  # the teardown is held from here: no process of lessor runs
    expires = expiry_of(objects, "mine")
    assert datetime.datetime.now(datetime.UTC) < expires, "too slow to see the lease Bound"

    namespaces = kubectl(leased, "get", "namespaces", "-o", "name")
    assert namespaces.returncode == 0, namespaces.stderr
    assert "namespace/kube-system" in namespaces.stdout.split()
    review = kubectl(leased, "auth", "whoami", "-o", "json")
    assert review.returncode == 0, review.stderr
    who = json.loads(review.stdout)["status"]["userInfo"]
    made = kubectl(leased, "create", "namespace", "work")
    assert made.returncode == 0, f"the lease's user is admin inside: {made.stderr}"

    time.sleep(max(0.0, (expires - datetime.datetime.now(datetime.UTC)).total_seconds()) + 1.5)
    assert answer_to(leased) == 401, (
        f"the handed-out kubeconfig (user {who['username']}) still works after its lease expired"
    )
    assert answer_to(admin) == 200, "the cluster still runs, and its admin credential works"
    assert who["username"] == USER.format("mine")
    assert GROUP in who["groups"] and "system:masters" not in who["groups"]
    leaf = certificate(leased)
    assert leaf.not_valid_after_utc == expires, "valid until the lease's expiry, not a second more"
    assert leaf.serial_number != certificate(admin).serial_number

    start_operator(cluster, objects, started, tmp_path)  # the teardown resumes
    objects.wait_phase("mine", "Expired")
    assert objects.get("secret", "lease-mine-kubeconfig") is None


def test_an_extension_issues_a_certificate_valid_until_the_new_expiry(
    cluster: Cluster, env: tuple[Objects, list[Operator]], tmp_path: Path
) -> None:
    objects, started = env
    start_operator(cluster, objects, started, tmp_path)
    objects.pool("ext", warmTarget=1)
    objects.lease("longer", "ext", ttl="10m")
    objects.wait_phase("longer", "Bound")
    first = certificate(lease_kubeconfig(objects, "longer", tmp_path))
    before = expiry_of(objects, "longer")
    assert first.not_valid_after_utc == before

    objects.patch("clusterlease", "longer", {"spec": {"extensions": [{"ttl": "30m"}]}})
    wait_for("extended", lambda: objects.status("clusterlease", "longer").get("extensions") == 1)
    # The status is written after the Secret: an expiry one can read is one the Secret serves.
    after = expiry_of(objects, "longer")
    assert after == before + datetime.timedelta(minutes=30)
    renewed = lease_kubeconfig(objects, "longer", tmp_path)
    second = certificate(renewed)
    assert second.not_valid_after_utc == after
    assert second.public_key() != first.public_key(), "a fresh key for each certificate"
    assert kubectl(renewed, "get", "namespaces").returncode == 0
    assert "Extended" in objects.events("longer")


def test_a_bind_replayed_after_a_sigkill_serves_a_certificate_of_the_final_expiry(
    cluster: Cluster, env: tuple[Objects, list[Operator]], tmp_path: Path
) -> None:
    """Killed just after it wrote the lease's Secret, before the lease's status: the next
    operator binds again at a later time, so with a later expiry, and must not serve the
    certificate of the first attempt (it would die before its lease)."""
    objects, started = env
    warm = start_operator(cluster, objects, started, tmp_path, leader_election=False)
    objects.pool("replay", warmTarget=1)
    wait_for("1 ready", lambda: objects.pool_status("replay").get("ready") == 1)
    warm.kill()  # its cluster and the cluster's published kubeconfig stay
    record = tmp_path / "kills.jsonl"
    crashing = start_operator(
        cluster, objects, started, tmp_path, leader_election=False,
        crash=CrashPoint("after", 1, "secrets", record),
    )  # fmt: skip
    objects.lease("again", "replay", ttl="10m")
    assert crashing.process is not None
    wait_for("the kill", lambda: crashing.process.poll() is not None)  # type: ignore[union-attr]
    [kill] = [json.loads(line) for line in record.read_text().splitlines()]
    assert kill["write"] == "POST secrets", kill
    assert objects.phase("clusterlease", "again") != "Bound"
    first = certificate(lease_kubeconfig(objects, "again", tmp_path))

    time.sleep(1.5)  # the replay binds in a later second than the killed attempt did
    start_operator(cluster, objects, started, tmp_path, leader_election=False)
    objects.wait_phase("again", "Bound")
    served = lease_kubeconfig(objects, "again", tmp_path)
    assert certificate(served).not_valid_after_utc == expiry_of(objects, "again")
    assert first.not_valid_after_utc < expiry_of(objects, "again")
    assert kubectl(served, "get", "namespaces").returncode == 0


def test_a_certificate_the_cluster_signs_is_the_leases_own_and_ends_with_it(
    control_plane: Cluster, tmp_path: Path
) -> None:
    """What a k3s or vcluster lease gets, from a real kube-controller-manager: the request made,
    approved with the admin credential and signed; the user is the lease's, administrator
    inside through the binding lessor made; the certificate ends at the lease's expiry, or 600 s
    on at the soonest (the signer's floor), and a long one does not end five minutes early."""
    admin = control_plane.kubeconfig.read_text()
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    leases = {
        "hour": now + datetime.timedelta(hours=1),
        "long": now + datetime.timedelta(hours=9),
        "brief": now + datetime.timedelta(minutes=1),
    }
    suffix = uuid.uuid4().hex[:6]
    try:
        issued = {
            kind: asyncio.run(
                lease_credentials.signed_by_the_cluster(admin, LeaseRef(f"{kind}-{suffix}", end))
            )
            for kind, end in leases.items()
        }
        signed = time.time()
        path = tmp_path / "hour.kubeconfig"
        path.write_text(issued["hour"])
        review = kubectl(path, "auth", "whoami", "-o", "json")
        assert review.returncode == 0, review.stderr
        who = json.loads(review.stdout)["status"]["userInfo"]
        assert who["username"] == USER.format(f"hour-{suffix}")
        assert GROUP in who["groups"]
        assert kubectl(path, "auth", "can-i", "*", "*").stdout.strip() == "yes"

        def ends(kind: str) -> datetime.datetime:
            (tmp_path / kind).write_text(issued[kind])
            return certificate(tmp_path / kind).not_valid_after_utc

        # The request is in whole seconds, rounded down, so it may end a second early; it is
        # late only by however long the signer took to get to it.
        took = signed - now.timestamp()
        for kind in ("hour", "long"):
            late = (ends(kind) - leases[kind]).total_seconds()
            assert -1 <= late <= took, f"{kind}: {late}s after its lease"
        floor = (ends("brief") - now).total_seconds()
        assert 599 <= floor <= 600 + took
    finally:
        control_plane.kubectl(
            "delete", "clusterrolebinding", GROUP, "--ignore-not-found", check=False
        )
