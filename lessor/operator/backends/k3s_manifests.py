"""The objects of one `k3s` cluster, rendered as plain manifests for the cluster's own namespace.

A k3s server with its agent (so the cluster has a node that runs pods) is a one-replica
StatefulSet; the agent runs a kubelet and containerd inside the container, which needs a
privileged container, so the cluster lives in a namespace of its own at Pod Security
`privileged` (lessor.operator.backends.instance_namespace), never in lessor-system. A NodePort
or LoadBalancer Service makes it reachable from outside the host cluster
(lessor.operator.backends.exposure).

k3s writes its admin kubeconfig inside the pod; a sidecar, non-root and without privileges, waits
for it and publishes it unchanged as a Secret of the namespace (through a RoleBinding of the
shipped ClusterRole `lessor-k3s-publisher`: Secrets of that namespace only). The operator points
its server at the Service (lessor.operator.backends.exposure) when it hands it out. The sidecar
uses the image's own tools: `sh` and `sleep` (busybox, from k3s-root) and `kubectl` (a link to
the k3s binary), as k3s's package/Dockerfile assembles the image.
"""

from __future__ import annotations

from lessor.operator.backends import exposure
from lessor.operator.backends.base import InstanceRef
from lessor.operator.backends.owned import Manifest, labels, metadata, placed, statefulset
from lessor.resources.cluster import K3sBackendConfig, Placement

KUBECONFIG_KEY = "kubeconfig"
PORT = 6443
POD_SECURITY = "privileged"
PUBLISHER_ROLE = "lessor-k3s-publisher"
# k3s writes the kubeconfig as root with mode 0640 into a directory whose group is this fsGroup
# (set-group-id, as kubelet makes emptyDirs with an fsGroup), so the sidecar reads it as a member
# of the group without being root.
SHARED_GROUP = 2000
NOBODY = 65534
PUBLISHER_HOME = "/home/publisher"
PUBLISHER_CONTAINER: Manifest = {
    "runAsNonRoot": True,
    "runAsUser": NOBODY,
    "runAsGroup": NOBODY,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


# The emptyDirs' bounds: k3s's datastore and images (without a claim), the kubeconfig k3s writes
# and the publisher's kubectl cache; past one, the kubelet evicts the pod.
DATA_LIMIT = "10Gi"
SMALL_LIMIT = "16Mi"
# What the k3s container's own writes may take (its root filesystem, its logs).
EPHEMERAL_LIMIT = "2Gi"


def object_name(instance: InstanceRef) -> str:
    return f"k3s-{instance.name}"


def pod_name(instance: InstanceRef) -> str:
    return f"{object_name(instance)}-0"


def kubeconfig_secret_name(instance: InstanceRef) -> str:
    return f"{object_name(instance)}-kubeconfig"


def token_secret_name(instance: InstanceRef) -> str:
    return f"{object_name(instance)}-token"


def service_host(instance: InstanceRef, namespace: str) -> str:
    return f"{object_name(instance)}.{namespace}.svc"


def _publish_script(instance: InstanceRef, namespace: str) -> str:
    """Wait for k3s's kubeconfig, then create (or on a restart, replace) its Secret."""
    secret = kubeconfig_secret_name(instance)
    return (
        "until [ -s /output/kubeconfig.yaml ]; do sleep 1; done; "
        f"kubectl -n {namespace} create secret generic {secret} "
        f"--from-file={KUBECONFIG_KEY}=/output/kubeconfig.yaml --dry-run=client -o yaml "
        f"| kubectl -n {namespace} apply -f - && exec sleep 2147483647"
    )


def _k3s(instance: InstanceRef, settings: K3sBackendConfig, namespace: str) -> Manifest:
    names = [service_host(instance, namespace), object_name(instance)]
    names += [settings.exposure.host] if settings.exposure.host else []
    route = exposure.route(settings.exposure)
    names += [route.hostname(namespace)] if route else []
    return {
        "name": "k3s",
        "image": settings.image,
        "args": [
            "server",
            "--token-file=/etc/k3s/token",
            *(f"--tls-san={name}" for name in names),
            "--disable=traefik,servicelb,metrics-server",
            "--write-kubeconfig=/output/kubeconfig.yaml",
            "--write-kubeconfig-mode=0640",
        ],
        "ports": [{"containerPort": PORT, "name": "https"}],
        # k3s refuses anonymous requests, so /readyz is asked with the admin kubeconfig k3s
        # wrote, from inside the container.
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
        "resources": {
            "requests": {"cpu": settings.cpu, "memory": settings.memory},
            "limits": {"memory": settings.memory_limit, "ephemeral-storage": EPHEMERAL_LIMIT},
        },
        # The agent's kubelet and containerd: the reason for the namespace's `privileged`.
        "securityContext": {"privileged": True},
        "volumeMounts": [
            {"name": "data", "mountPath": "/var/lib/rancher/k3s"},
            {"name": "output", "mountPath": "/output"},
            {"name": "token", "mountPath": "/etc/k3s", "readOnly": True},
        ],
    }


def render(
    instance: InstanceRef,
    settings: K3sBackendConfig,
    placement: Placement,
    token: str,
    namespace: str,
) -> list[Manifest]:
    """Every object of the cluster in `namespace` (the cluster's own), in the order they are
    created: the pool's `backend.k3s` as it is, on the nodes of its `backend.placement`."""
    name = object_name(instance)
    publisher = f"{name}-publisher"
    claims: list[Manifest] = []
    volumes: list[Manifest] = [
        {"name": "output", "emptyDir": {"sizeLimit": SMALL_LIMIT}},
        {"name": "home", "emptyDir": {"sizeLimit": SMALL_LIMIT}},
    ]
    # Without persistent storage the datastore lives in an emptyDir: enough for throwaway
    # clusters, and the only choice where no volume provisioner exists.
    if settings.persistent:
        claim_spec: Manifest = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": settings.storage_size}},
        }
        if settings.storage_class:
            claim_spec["storageClassName"] = settings.storage_class
        claims.append(
            {"metadata": {"name": "data", "labels": labels(instance)}, "spec": claim_spec}
        )
    else:
        volumes.append({"name": "data", "emptyDir": {"sizeLimit": DATA_LIMIT}})
    volumes.append({"name": "token", "secret": {"secretName": token_secret_name(instance)}})
    pod_labels = {**labels(instance), "app.kubernetes.io/name": "k3s"}
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata(instance, token_secret_name(instance), namespace),
            "type": "Opaque",
            "stringData": {"token": token},
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": metadata(instance, publisher, namespace),
            "automountServiceAccountToken": True,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata(instance, publisher, namespace),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": PUBLISHER_ROLE,
            },
            "subjects": [{"kind": "ServiceAccount", "name": publisher, "namespace": namespace}],
        },
        exposure.shape(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": metadata(instance, name, namespace),
                "spec": {
                    "type": exposure.service_type(settings.exposure),
                    "selector": labels(instance),
                    "ports": [{"name": "https", "port": PORT, "targetPort": PORT}],
                },
            },
            settings.exposure,
        ),
        statefulset(
            instance,
            name,
            pod_labels,
            placed(
                {
                    "serviceAccountName": publisher,
                    "enableServiceLinks": False,
                    "securityContext": {
                        "fsGroup": SHARED_GROUP,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        _k3s(instance, settings, namespace),
                        {
                            "name": "kubeconfig-publisher",
                            "image": settings.image,
                            "command": ["/bin/sh", "-c", _publish_script(instance, namespace)],
                            # kubectl's cache; the root filesystem is read-only.
                            "env": [{"name": "HOME", "value": PUBLISHER_HOME}],
                            "securityContext": PUBLISHER_CONTAINER,
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "32Mi"},
                                "limits": {"memory": "128Mi"},
                            },
                            "volumeMounts": [
                                {"name": "output", "mountPath": "/output", "readOnly": True},
                                {"name": "home", "mountPath": PUBLISHER_HOME},
                            ],
                        },
                    ],
                    "volumes": volumes,
                },
                placement,
            ),
            claims=claims,
            namespace=namespace,
        ),
    ]
