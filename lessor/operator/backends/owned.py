"""The labels and metadata every object a pod-based backend creates carries.

The instance's name and uid as labels let teardown verification find strays that were never
recorded anywhere; the owner reference lets the garbage collector remove them should the operator
never get to teardown.
"""

from __future__ import annotations

from typing import Any

from lessor.operator.backends.base import InstanceRef

INSTANCE_LABEL = "lessor.dev/instance"
INSTANCE_UID_LABEL = "lessor.dev/instance-uid"

Manifest = dict[str, Any]


def labels(instance: InstanceRef) -> dict[str, str]:
    return {INSTANCE_LABEL: instance.name, INSTANCE_UID_LABEL: instance.uid}


def label_selector(instance: InstanceRef) -> str:
    return ",".join(f"{key}={value}" for key, value in labels(instance).items())


def metadata(instance: InstanceRef, name: str) -> Manifest:
    return {
        "name": name,
        "namespace": instance.namespace,
        "labels": labels(instance),
        "ownerReferences": [
            {
                "apiVersion": "lessor.dev/v1alpha1",
                "kind": "ClusterInstance",
                "name": instance.name,
                "uid": instance.uid,
                "blockOwnerDeletion": False,
            }
        ],
    }
