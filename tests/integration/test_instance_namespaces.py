"""A namespace per cluster (lessor.operator.backends.instance_namespace), made and removed by the
operator under its own ServiceAccount with manifests/instance-namespaces installed as shipped:
what it may do in the namespaces it made, what its admission policy refuses it everywhere else,
and a teardown verified by the namespace being gone."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from lessor.controlplane.cluster import LocalControlPlane
from lessor.controlplane.kubectl import Cluster
from lessor.operator.backends.base import BackendError
from lessor.operator.backends.instance_namespace import InstanceNamespaces, namespace_name
from lessor.operator.runtime.client import ApiError, KubeClient
from tests.integration.operator_harness import Operator, wait_for
from tests.integration.owned_instances import owned_instance
from tests.integration.service_accounts import install_rbac

pytestmark = pytest.mark.integration


@pytest.fixture
def operator(control_plane: Cluster, tmp_path: Path) -> tuple[str, Path]:
    if not isinstance(control_plane, LocalControlPlane):
        pytest.skip("installs cluster-wide RBAC for a test namespace's ServiceAccount")
    namespace = f"ins-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "namespace", namespace)
    kubeconfigs = install_rbac(control_plane, namespace, tmp_path, instance_namespaces=True)
    return namespace, kubeconfigs["lessor-operator"]


def test_the_operator_makes_binds_and_removes_its_namespaces_and_no_others(
    control_plane: Cluster, operator: tuple[str, Path]
) -> None:
    namespace, kubeconfig = operator
    instance = owned_instance(control_plane, namespace, "k3s")
    name = namespace_name(instance)

    async def scenario() -> None:
        client = await KubeClient.connect(str(kubeconfig))
        namespaces = InstanceNamespaces(client)
        assert await namespaces.ensure(instance, "privileged") == name
        assert await namespaces.ensure(instance, "privileged") == name, "a replay is harmless"
        made = await client.get(f"/api/v1/namespaces/{name}")
        assert made["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
        # Its rights hold in the namespace it made (after the RoleBinding reaches the
        # authorizer's cache: moments)...
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}

        async def created() -> bool:
            try:
                await client.create(f"/api/v1/namespaces/{name}/secrets", secret)
            except ApiError as error:
                assert error.status == 403, error
                await asyncio.sleep(0.2)
                return False
            return True

        for _ in range(50):
            if await created():
                break
        else:
            raise AssertionError("the operator never got its rights in its namespace")
        # ...and in no other: not in default, not cluster-admin anywhere.
        with pytest.raises(ApiError, match=r"^403 "):
            await client.create("/api/v1/namespaces/default/secrets", secret)
        escalation = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "mine"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "User", "name": "anyone"}],
        }  # fmt: skip
        with pytest.raises(ApiError, match=r"^403 "):
            await client.create(
                f"/apis/rbac.authorization.k8s.io/v1/namespaces/{name}/rolebindings", escalation
            )
        # The admission policy: no unlabelled namespace, no deleting one it did not make (its own
        # included), no RoleBinding outside its namespaces even of a role it may bind. Like the
        # RoleBinding above, a new policy reaches admission after moments (longer on a busy
        # machine): wait until a dry run, which passes admission and writes nothing, is refused.
        stranger = f"not-mine-{uuid.uuid4().hex[:6]}"
        unlabelled = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": stranger}}

        async def policy_in_force() -> bool:
            try:
                await client.request(
                    "POST", "/api/v1/namespaces", body=unlabelled, params={"dryRun": "All"}
                )
            except ApiError as error:
                return "instance-namespace" in error.message
            await asyncio.sleep(0.2)
            return False

        for _ in range(150):
            if await policy_in_force():
                break
        else:
            raise AssertionError("the admission policy never refused an unlabelled namespace")
        for attempt in (
            client.create("/api/v1/namespaces", unlabelled),
            client.delete(f"/api/v1/namespaces/{namespace}"),  # its own: lessor-system
            client.create(
                "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
                {
                    **escalation,
                    "roleRef": {**escalation["roleRef"], "name": "lessor-instance-objects"},
                },
            ),
        ):
            # RBAC allows each of these; the policy is what refuses them.
            with pytest.raises(ApiError, match=r"labelled lessor\.dev/instance-namespace=true"):
                await attempt
        await namespaces.delete(instance)
        await namespaces.delete(instance)
        while not (report := await namespaces.verify(instance)).verified:
            assert any(name in line for line in report.evidence)
            await asyncio.sleep(0.5)
        assert report.evidence == [f"namespace {name} and everything in it are gone"]

    asyncio.run(asyncio.wait_for(scenario(), timeout=180))
    assert control_plane.kubectl("get", "namespace", name, check=False).returncode != 0
    assert control_plane.kubectl("get", "namespace", "default").returncode == 0


def test_a_namespace_of_that_name_that_is_not_the_instances_is_left_alone(
    control_plane: Cluster, operator: tuple[str, Path]
) -> None:
    namespace, kubeconfig = operator
    instance = owned_instance(control_plane, namespace, "k3s")
    name = namespace_name(instance)
    squatter = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"lessor.dev/instance-namespace": "true"}},
    }
    control_plane.kubectl("create", "-f", "-", input=json.dumps(squatter))

    async def scenario() -> None:
        client = await KubeClient.connect(str(kubeconfig))
        namespaces = InstanceNamespaces(client)
        with pytest.raises(BackendError, match="not this instance's"):
            await namespaces.ensure(instance, "baseline")
        with pytest.raises(BackendError, match="not this instance's"):
            await namespaces.delete(instance)

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    assert control_plane.kubectl("get", "namespace", name).returncode == 0, "left alone"
    control_plane.kubectl("delete", "namespace", name, "--wait=false")


def test_the_leader_deletes_instance_namespaces_whose_instance_is_gone_and_only_those(
    control_plane: Cluster, tmp_path: Path
) -> None:
    """An instance whose finalizer was removed by hand leaves its namespace; the operator, under
    the shipped RBAC, deletes it (and no namespace of a live instance, of another operator's
    instance, or unlabelled) once it is older than the grace."""
    if not isinstance(control_plane, LocalControlPlane):
        pytest.skip("installs cluster-wide RBAC for a test namespace's ServiceAccount")
    namespace = f"ins-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "namespace", namespace)
    kubeconfigs = install_rbac(control_plane, namespace, tmp_path, instance_namespaces=True)
    # A live instance this operator cannot provision (it does not serve the test backend), so
    # that it makes nothing of its own.
    live = owned_instance(control_plane, namespace, "namespace")
    suffix = uuid.uuid4().hex[:6]

    def labelled(name: str, uid: str, instance: str) -> str:
        document = {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {
                "name": f"{name}-{suffix}",
                "labels": {"lessor.dev/instance-namespace": "true", "lessor.dev/instance-uid": uid},
                "annotations": {"lessor.dev/instance": instance},
            },
        }  # fmt: skip
        control_plane.kubectl("create", "-f", "-", input=json.dumps(document))
        return f"{name}-{suffix}"

    orphan = labelled("orphan", str(uuid.uuid4()), f"{namespace}/gone-abcde")
    kept = labelled("kept", live.uid, f"{namespace}/{live.name}")
    foreign = labelled("foreign", str(uuid.uuid4()), "another-operators-namespace/gone-abcde")
    operator = Operator(
        kubeconfig=kubeconfigs["lessor-operator"],
        namespace=namespace,
        backend_dir=tmp_path / "instances",
        log_path=tmp_path / "operator.log",
        leader_election=False,
        extra=["--local-orphan-grace=2"],
    ).start()

    def state(name: str) -> str:
        found = control_plane.kubectl("get", "namespace", name, "-o", "json", check=False)
        if found.returncode != 0:
            return "gone"
        return (
            "deleting" if json.loads(found.stdout)["metadata"].get("deletionTimestamp") else "kept"
        )

    try:
        wait_for("the orphan deleted", lambda: state(orphan) != "kept", timeout=60)
        assert operator.metric("lessor_instance_namespace_orphans_deleted_total") == 1
        assert (state(kept), state(foreign)) == ("kept", "kept")
    finally:
        operator.kill()
        for name in (orphan, kept, foreign):
            control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)
