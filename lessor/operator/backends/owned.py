"""What every object a pod-based backend creates carries, and the one-pod StatefulSet each
cluster runs in.

The instance's name and uid as labels let teardown verification find strays that were never
recorded anywhere; the owner reference lets the garbage collector remove them should the operator
never get to teardown.
"""

from __future__ import annotations

from typing import Any

from lessor.operator.backends.base import InstanceRef
from lessor.operator.runtime.client import KubeClient
from lessor.resources import labels as keys
from lessor.resources.base import API_VERSION
from lessor.resources.cluster import ClusterInstance, Placement

Manifest = dict[str, Any]


def labels(instance: InstanceRef) -> dict[str, str]:
    return {keys.INSTANCE: instance.name, keys.INSTANCE_UID: instance.uid}


def label_selector(instance: InstanceRef) -> str:
    return ",".join(f"{key}={value}" for key, value in labels(instance).items())


def metadata(instance: InstanceRef, name: str, namespace: str | None = None) -> Manifest:
    """In the instance's namespace an object is owned by the instance. In another (the cluster's
    own, lessor.operator.backends.instance_namespace) it carries only the labels: an owner
    reference cannot cross namespaces, and the garbage collector, finding no such owner in the
    object's namespace, would delete the object."""
    where = namespace or instance.namespace
    found: Manifest = {"name": name, "namespace": where, "labels": labels(instance)}
    if where == instance.namespace:
        found["ownerReferences"] = [
            {
                "apiVersion": API_VERSION,
                "kind": ClusterInstance.kind_name(),
                "name": instance.name,
                "uid": instance.uid,
                "blockOwnerDeletion": False,
            }
        ]
    return found


def statefulset(
    instance: InstanceRef,
    name: str,
    pod_labels: dict[str, str],
    pod_spec: Manifest,
    *,
    claims: list[Manifest] | None = None,
    namespace: str | None = None,
) -> Manifest:
    """One replica, selected by the instance's labels (a subset of `pod_labels`)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata(instance, name, namespace),
        "spec": {
            "serviceName": name,
            "replicas": 1,
            "selector": {"matchLabels": labels(instance)},
            "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
            "volumeClaimTemplates": claims or [],
        },
    }


def placed(pod_spec: Manifest, placement: Placement) -> Manifest:
    """The pod spec on the nodes the pool names (and tolerating their taints), if it names any."""
    if placement.node_selector:
        pod_spec["nodeSelector"] = dict(placement.node_selector)
    if placement.tolerations:
        pod_spec["tolerations"] = [
            t.model_dump(mode="json", by_alias=True, exclude_none=True)
            for t in placement.tolerations
        ]
    return pod_spec


async def labelled_names(client: KubeClient, collection: str, instance: InstanceRef) -> list[str]:
    """The names of the objects of `collection` (an API path) that carry the instance's labels."""
    listed = await client.request(
        "GET", collection, params={"labelSelector": label_selector(instance)}
    )
    return [item["metadata"]["name"] for item in listed.get("items", [])]
