"""The objects of one `vcluster` cluster, rendered for the cluster's own namespace.

vcluster (v0.30, its `k8s` distro) runs a virtual control plane in one pod: its syncer starts
kine (SQLite behind an etcd API), kube-apiserver and kube-controller-manager, serves the virtual
API on 8443, and copies the pods created in the virtual cluster into its host namespace, where
the host's scheduler and kubelets run them. So the cluster's namespace is where tenants' pods
run: its Pod Security level is the pool's choice (`podSecurity`, default baseline), while the
vcluster pod itself passes `restricted`.

What vcluster's Helm chart would make is made here, as plain objects: the syncer's
ServiceAccount, bound to the shipped ClusterRole `lessor-vcluster` (the rules the chart's Role has
with these settings; nothing cluster-scoped), the ServiceAccount its synced pods run as, the
configuration Secret, the Service named after the vcluster (NodePort, so that the kubeconfig
works from outside the host cluster), and the StatefulSet.

The configuration is lessor's own, complete for what it uses: vcluster reads it strictly and
fills in no defaults (its Helm chart writes all of them), so every setting that must be on is
set here, and the ones left out are off (no telemetry, no rewriteHosts init container, which
would need an image of its own, no volume snapshot rules, which need cluster-wide rights).
"""

from __future__ import annotations

import yaml

from lessor.operator.backends import exposure
from lessor.operator.backends.base import InstanceRef
from lessor.operator.backends.owned import Manifest, labels, metadata, placed, statefulset
from lessor.resources.cluster import Placement, VclusterBackendConfig

PORT = 8443
SERVICE_PORT = 443
CONFIG_DIR = "/var/lib/vcluster"
ROLE = "lessor-vcluster"
SERVICE_NOTE = "lessor.dev/vcluster"
UID = 65532
# One replica (the embedded database allows no more), with the chart's election timings.
HIGH_AVAILABILITY: Manifest = {
    "replicas": 1, "leaseDuration": 60, "renewDeadline": 40, "retryPeriod": 15,
}  # fmt: skip
LIVENESS: Manifest = {"path": "/healthz", "port": PORT, "scheme": "HTTPS"}
RESTRICTED_CONTAINER: Manifest = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
}


# Each emptyDir's bound (past it the kubelet evicts the pod): the virtual cluster's database,
# the Kubernetes binaries copied in (about 250 MB), certificates, Helm's cache and /tmp.
EMPTY_DIRS = {
    "data": "2Gi", "binaries": "1Gi", "certs": "16Mi", "helm-cache": "256Mi", "tmp": "1Gi",
}  # fmt: skip
EPHEMERAL_LIMIT = "1Gi"


def vcluster_name(instance: InstanceRef) -> str:
    """The vcluster's name: its Service's, and the suffix of every object it syncs."""
    return instance.name


def pod_name(instance: InstanceRef) -> str:
    return f"{vcluster_name(instance)}-0"


def kubeconfig_secret_name(instance: InstanceRef) -> str:
    """Where the syncer writes the virtual cluster's admin kubeconfig (key `config`)."""
    return f"vc-{vcluster_name(instance)}"


def config_secret_name(instance: InstanceRef) -> str:
    return f"vc-config-{vcluster_name(instance)}"


def configuration(
    instance: InstanceRef, settings: VclusterBackendConfig, namespace: str
) -> Manifest:
    """vcluster.yaml: every setting vcluster must see on."""
    name = vcluster_name(instance)
    host = settings.exposure.host
    sans = [f"{name}.{namespace}.svc", *([host] if host else [])]
    route = exposure.route(settings.exposure)
    sans += [route.hostname(namespace)] if route else []
    enabled = {"enabled": True}
    return {
        "sync": {
            "toHost": {
                "services": enabled,
                "endpoints": enabled,
                "endpointSlices": enabled,
                "persistentVolumeClaims": enabled,
                "configMaps": {"enabled": True},
                "secrets": {"enabled": True},
                "pods": {"enabled": True, "rewriteHosts": {"enabled": False}},
            },
            "fromHost": {
                "events": enabled,
                "csiDrivers": {"enabled": "auto"},
                "csiNodes": {"enabled": "auto"},
                "csiStorageCapacities": {"enabled": "auto"},
                "storageClasses": {"enabled": "auto"},
            },
        },
        "controlPlane": {
            "distro": {
                "k8s": {"enabled": True, "apiServer": enabled, "controllerManager": enabled}
            },
            "backingStore": {"database": {"embedded": enabled}},
            # In the pod, for the Service: the pod's network is its boundary.
            "proxy": {"bindAddress": "0.0.0.0", "port": PORT, "extraSANs": sans},  # noqa: S104
            "coredns": {
                "enabled": True,
                "service": {"spec": {"type": "ClusterIP"}},
                "deployment": {"image": settings.coredns_image, "replicas": 1},
                "security": {
                    "podSecurityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                },
            },
            # vcluster keeps its Service as it is told here: the same shape as lessor's.
            "service": {
                "enabled": True,
                "spec": exposure.shape(
                    {"metadata": {}, "spec": {"type": exposure.service_type(settings.exposure)}},
                    settings.exposure,
                )["spec"],
            },
            "statefulSet": {"highAvailability": HIGH_AVAILABILITY},
            "advanced": {"serviceAccount": enabled, "workloadServiceAccount": enabled},
        },
        "networking": {
            "advanced": {
                "clusterDomain": "cluster.local",
                "proxyKubelets": {"byHostname": True, "byIP": True},
            }
        },
        "rbac": {
            "role": enabled,
            "clusterRole": {"enabled": False},
            "enableVolumeSnapshotRules": {"enabled": False},
        },
        "experimental": {"syncSettings": {"setOwner": True}},
        "telemetry": {"enabled": False},
        "logging": {"encoding": "console"},
    }


def _syncer(instance: InstanceRef, settings: VclusterBackendConfig) -> Manifest:
    def field(path: str) -> Manifest:
        return {"valueFrom": {"fieldRef": {"fieldPath": path}}}

    probe: Manifest = {
        "httpGet": {"path": "/readyz", "port": PORT, "scheme": "HTTPS"},
        "periodSeconds": 2,
        "timeoutSeconds": 3,
    }
    return {
        "name": "syncer",
        "image": settings.image,
        "env": [
            {"name": "VCLUSTER_NAME", "value": vcluster_name(instance)},
            {"name": "POD_NAME", **field("metadata.name")},
            {"name": "POD_IP", **field("status.podIP")},
            {"name": "NODE_NAME", **field("spec.nodeName")},
            {"name": "NODE_IP", **field("status.hostIP")},
        ],
        "ports": [{"containerPort": PORT, "name": "https"}],
        "readinessProbe": {**probe, "failureThreshold": 60},
        "startupProbe": {**probe, "periodSeconds": 3, "failureThreshold": 200},
        "livenessProbe": {**probe, "httpGet": LIVENESS, "failureThreshold": 60},
        "resources": {
            "requests": {"cpu": settings.cpu, "memory": settings.memory},
            "limits": {"memory": settings.memory_limit, "ephemeral-storage": EPHEMERAL_LIMIT},
        },
        "securityContext": RESTRICTED_CONTAINER,
        "volumeMounts": [
            {"name": "data", "mountPath": "/data"},
            {"name": "binaries", "mountPath": "/binaries"},
            {"name": "certs", "mountPath": "/pki"},
            {"name": "helm-cache", "mountPath": "/.cache/helm"},
            {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 - an emptyDir of its own
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        ],
    }


def render(
    instance: InstanceRef, settings: VclusterBackendConfig, placement: Placement, namespace: str
) -> list[Manifest]:
    """Every object of the cluster in `namespace` (the cluster's own), in creation order: the
    pool's `backend.vcluster` as it is, on the nodes of its `backend.placement`."""
    name = vcluster_name(instance)
    syncer_account = f"vc-{name}"
    # The syncer finds its own pods by these two labels, as the chart sets them.
    pod_labels = {**labels(instance), "app": "vcluster", "release": name}
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata(instance, config_secret_name(instance), namespace),
            "type": "Opaque",
            "stringData": {
                "config.yaml": yaml.safe_dump(configuration(instance, settings, namespace))
            },
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": metadata(instance, syncer_account, namespace),
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": metadata(instance, f"vc-workload-{name}", namespace),
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata(instance, syncer_account, namespace),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": ROLE,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": syncer_account, "namespace": namespace}
            ],
        },
        exposure.shape(
            {
                "apiVersion": "v1",
                "kind": "Service",
                # The syncer records the host's service CIDR in an annotation, and assumes the
                # Service has annotations to add it to.
                "metadata": {
                    **metadata(instance, name, namespace),
                    "annotations": {SERVICE_NOTE: ""},
                },
                "spec": {
                    "type": exposure.service_type(settings.exposure),
                    "selector": labels(instance),
                    "ports": [{"name": "https", "port": SERVICE_PORT, "targetPort": PORT}],
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
                    "serviceAccountName": syncer_account,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 10,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": UID,
                        "runAsGroup": UID,
                        "fsGroup": UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "initContainers": [
                        {
                            "name": "kubernetes",
                            "image": settings.kubernetes_image,
                            "command": ["cp", "-r", "/kubernetes/.", "/binaries/"],
                            "securityContext": {
                                **RESTRICTED_CONTAINER,
                                "readOnlyRootFilesystem": True,
                            },
                            "volumeMounts": [{"name": "binaries", "mountPath": "/binaries"}],
                        }
                    ],
                    "containers": [_syncer(instance, settings)],
                    "volumes": [
                        *(
                            {"name": volume, "emptyDir": {"sizeLimit": size}}
                            for volume, size in EMPTY_DIRS.items()
                        ),
                        {"name": "config", "secret": {"secretName": config_secret_name(instance)}},
                    ],
                },
                placement,
            ),
            namespace=namespace,
        ),
    ]
