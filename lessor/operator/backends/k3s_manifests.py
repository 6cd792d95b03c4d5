"""The objects of one `k3s` cluster in the host cluster, rendered as plain manifests.

A k3s server runs as a one-replica StatefulSet (its datastore on a volume), reachable through a
Service; a sidecar in the same pod waits for the kubeconfig k3s writes, points it at the Service
and publishes it into a Secret, which is the only thing the operator reads back. The sidecar's
ServiceAccount may write that one Secret and nothing else. Every object carries the instance's
name and uid as labels, so teardown verification can list by label and find strays that were
never recorded anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from lessor.operator.backends.base import InstanceRef
from lessor.operator.backends.owned import Manifest, label_selector, labels, metadata, statefulset

KUBECONFIG_KEY = "kubeconfig"


@dataclass(frozen=True)
class K3sConfig:
    image: str = "rancher/k3s:v1.35.4-k3s1"
    storage_size: str = "1Gi"
    storage_class: str | None = None
    # Without persistent storage the datastore lives in an emptyDir: enough for throwaway
    # clusters, and the only choice where no volume provisioner exists.
    persistent: bool = True
    cpu: str = "500m"
    memory: str = "1Gi"


def object_name(instance: InstanceRef) -> str:
    return f"k3s-{instance.name}"


def kubeconfig_secret_name(instance: InstanceRef) -> str:
    return f"{object_name(instance)}-kubeconfig"


def token_secret_name(instance: InstanceRef) -> str:
    return f"{object_name(instance)}-token"


def render(instance: InstanceRef, config: K3sConfig, token: str) -> list[Manifest]:
    """Every object of the cluster, in the order they are created."""
    name = object_name(instance)
    service_host = f"{name}.{instance.namespace}.svc"
    publisher = f"{name}-publisher"
    publish = (
        "until [ -s /output/kubeconfig.yaml ]; do sleep 1; done; "
        f'sed "s#https://127.0.0.1:6443#https://{service_host}:6443#" /output/kubeconfig.yaml '
        "> /tmp/kubeconfig; "
        f"kubectl create secret generic {kubeconfig_secret_name(instance)} "
        f"--from-file={KUBECONFIG_KEY}=/tmp/kubeconfig --dry-run=client -o yaml "
        f"| kubectl label --local -f - {label_selector(instance).replace(',', ' ')} -o yaml "
        "| kubectl apply -f - && exec sleep 2147483647"
    )
    data_volume: Manifest = {"name": "data"}
    claims: list[Manifest] = []
    if config.persistent:
        claim_spec: Manifest = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": config.storage_size}},
        }
        if config.storage_class:
            claim_spec["storageClassName"] = config.storage_class
        claims.append(
            {"metadata": {"name": "data", "labels": labels(instance)}, "spec": claim_spec}
        )
    else:
        data_volume["emptyDir"] = {}
    volumes = [{"name": "output", "emptyDir": {}}]
    if not config.persistent:
        volumes.append(data_volume)
    pod_labels = {**labels(instance), "app.kubernetes.io/name": "k3s"}
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata(instance, token_secret_name(instance)),
            "type": "Opaque",
            "stringData": {"token": token},
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": metadata(instance, publisher),
            "automountServiceAccountToken": True,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": metadata(instance, publisher),
            "rules": [
                # `create` cannot be limited by name; `get`/`patch` are, to the one Secret.
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
                {
                    "apiGroups": [""],
                    "resources": ["secrets"],
                    "resourceNames": [kubeconfig_secret_name(instance)],
                    "verbs": ["get", "patch", "update"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata(instance, publisher),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": publisher},
            "subjects": [
                {"kind": "ServiceAccount", "name": publisher, "namespace": instance.namespace}
            ],
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": metadata(instance, name),
            "spec": {
                "selector": labels(instance),
                "ports": [{"name": "https", "port": 6443, "targetPort": 6443}],
            },
        },
        statefulset(
            instance,
            name,
            pod_labels,
            {
                "serviceAccountName": publisher,
                "containers": [
                    {
                        "name": "k3s",
                        "image": config.image,
                        "args": [
                            "server",
                            "--disable-agent",
                            "--token-file=/etc/k3s/token",
                            f"--tls-san={service_host}",
                            f"--tls-san={name}",
                            "--disable=traefik,servicelb,metrics-server,local-storage",
                            "--write-kubeconfig=/output/kubeconfig.yaml",
                            "--write-kubeconfig-mode=0600",
                        ],
                        "ports": [{"containerPort": 6443, "name": "https"}],
                        # k3s refuses anonymous requests, so /readyz is asked with
                        # the admin kubeconfig k3s wrote, from inside the container.
                        "readinessProbe": {
                            "exec": {
                                "command": [
                                    "kubectl",
                                    "--kubeconfig=/output/kubeconfig.yaml",
                                    "get",
                                    "--raw=/readyz",
                                ]
                            },
                            "periodSeconds": 2,
                        },
                        "resources": {"requests": {"cpu": config.cpu, "memory": config.memory}},
                        "volumeMounts": [
                            {"name": "data", "mountPath": "/var/lib/rancher/k3s"},
                            {"name": "output", "mountPath": "/output"},
                            {"name": "token", "mountPath": "/etc/k3s", "readOnly": True},
                        ],
                    },
                    {
                        "name": "kubeconfig-publisher",
                        "image": config.image,
                        "command": ["/bin/sh", "-c", publish],
                        "volumeMounts": [
                            {"name": "output", "mountPath": "/output", "readOnly": True}
                        ],
                    },
                ],
                "volumes": [
                    *volumes,
                    {
                        "name": "token",
                        "secret": {"secretName": token_secret_name(instance)},
                    },
                ],
            },
            claims,
        ),
    ]
