"""The objects of one `apiserver` cluster in the host cluster, rendered as plain manifests.

kube-apiserver and etcd run as the two containers of a one-replica StatefulSet (etcd on an
emptyDir: the cluster is as ephemeral as its lease), behind a NodePort Service so that a
kubeconfig works from outside the host cluster. The certificates are made by the operator, once,
into a Secret: the pod mounts the serving certificate and the service-account keys; the operator
reads the CA and the admin client certificate back for the cluster's admin kubeconfig, and the
CA's key to sign each lease's own certificate (lessor.operator.backends.lease_credentials). The
pod mounts neither the admin's credential nor the CA's key: whoever reads that Secret can read
the admin's already, so keeping the key there adds no reader (docs/security.md). Every container
runs under Pod Security `restricted`, as everything in lessor's namespace must.
"""

from __future__ import annotations

import base64

from lessor.controlplane.pki import CertificateAuthority, service_account_key
from lessor.operator.backends import exposure
from lessor.operator.backends.base import InstanceRef
from lessor.operator.backends.owned import Manifest, labels, metadata, placed, statefulset
from lessor.resources.cluster import ApiserverBackendConfig, Placement, quantity_bytes

PORT = 6443
ETCD_CLIENT = "http://127.0.0.1:2379"
ETCD_PEER = "http://127.0.0.1:2380"
SERVICE_CIDR = "10.0.0.0/24"
ADMIN_USER = "lessor-admin"
CA_KEY = "ca.key"
PKI_DIR = "/etc/kubernetes/pki"
ETCD_MEMORY_LIMIT = "512Mi"
RESTRICTED_CONTAINER: Manifest = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def etcd_volume_limit(settings: ApiserverBackendConfig) -> str:
    """etcd's volume: its quota, and as much again for the write-ahead log and snapshots."""
    return f"{2 * quantity_bytes(settings.etcd_quota) // 2**20}Mi"


def object_name(instance: InstanceRef) -> str:
    return f"apiserver-{instance.name}"


def pki_secret_name(instance: InstanceRef) -> str:
    return f"{object_name(instance)}-pki"


def pod_name(instance: InstanceRef) -> str:
    return f"{object_name(instance)}-0"


def service_host(instance: InstanceRef) -> str:
    """The name the cluster's certificate is issued for, whatever address reaches it: a
    kubeconfig names it as `tls-server-name` when it connects through a node's address."""
    return f"{object_name(instance)}.{instance.namespace}.svc"


def make_pki(instance: InstanceRef, settings: ApiserverBackendConfig) -> dict[str, bytes]:
    """Fresh keys for one cluster, by the file name the pod and the operator read them under."""
    authority = CertificateAuthority(f"lessor {instance.name}")
    host = service_host(instance)
    names = (
        object_name(instance), host, f"{host}.cluster.local", "localhost", "127.0.0.1",
        "kubernetes", "kubernetes.default", "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local", "10.0.0.1",
        *((settings.exposure.host,) if settings.exposure.host else ()),
    )  # fmt: skip
    serving = authority.issue("kube-apiserver", server_names=names)
    admin = authority.issue(ADMIN_USER, organization="system:masters", client=True)
    accounts = service_account_key()
    return {
        "ca.crt": authority.cert_pem,
        CA_KEY: authority.key_pem,
        "apiserver.crt": serving.cert_pem,
        "apiserver.key": serving.key_pem,
        "sa.pub": accounts.cert_pem,
        "sa.key": accounts.key_pem,
        "admin.crt": admin.cert_pem,
        "admin.key": admin.key_pem,
    }


def _etcd(settings: ApiserverBackendConfig) -> Manifest:
    command = [
        "/usr/local/bin/etcd", "--name=etcd", "--data-dir=/var/lib/etcd/data",
        f"--listen-client-urls={ETCD_CLIENT}", f"--advertise-client-urls={ETCD_CLIENT}",
        f"--listen-peer-urls={ETCD_PEER}", f"--initial-advertise-peer-urls={ETCD_PEER}",
        f"--initial-cluster=etcd={ETCD_PEER}", "--initial-cluster-state=new",
        "--unsafe-no-fsync=true", "--log-level=warn",
        f"--quota-backend-bytes={quantity_bytes(settings.etcd_quota)}",
    ]  # fmt: skip
    return {
        "name": "etcd",
        "image": settings.etcd_image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "resources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"memory": ETCD_MEMORY_LIMIT},
        },
        "securityContext": RESTRICTED_CONTAINER,
        "volumeMounts": [{"name": "etcd", "mountPath": "/var/lib/etcd"}],
    }


def _apiserver(instance: InstanceRef, settings: ApiserverBackendConfig) -> Manifest:
    probe: Manifest = {"httpGet": {"path": "/readyz", "port": PORT, "scheme": "HTTPS"}}
    command = [
        "/usr/local/bin/kube-apiserver", f"--secure-port={PORT}",
        f"--etcd-servers={ETCD_CLIENT}",
        f"--tls-cert-file={PKI_DIR}/apiserver.crt",
        f"--tls-private-key-file={PKI_DIR}/apiserver.key",
        f"--client-ca-file={PKI_DIR}/ca.crt",
        f"--service-account-issuer=https://{service_host(instance)}:{PORT}",
        f"--service-account-key-file={PKI_DIR}/sa.pub",
        f"--service-account-signing-key-file={PKI_DIR}/sa.key",
        f"--service-cluster-ip-range={SERVICE_CIDR}", "--authorization-mode=RBAC",
        "--endpoint-reconciler-type=none", "--profiling=false",
    ]  # fmt: skip
    return {
        "name": "kube-apiserver",
        "image": settings.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "ports": [{"name": "https", "containerPort": PORT}],
        # /readyz and /livez are readable anonymously (system:public-info-viewer).
        "readinessProbe": {**probe, "periodSeconds": 2},
        "livenessProbe": {
            "httpGet": {**probe["httpGet"], "path": "/livez"},
            "periodSeconds": 10,
            "initialDelaySeconds": 30,
        },
        "resources": {
            "requests": {"cpu": settings.cpu, "memory": settings.memory},
            "limits": {"memory": settings.memory_limit},
        },
        "securityContext": RESTRICTED_CONTAINER,
        "volumeMounts": [{"name": "pki", "mountPath": PKI_DIR, "readOnly": True}],
    }


def render(
    instance: InstanceRef,
    settings: ApiserverBackendConfig,
    placement: Placement,
    pki: dict[str, bytes],
) -> list[Manifest]:
    """Every object of the cluster, in the order they are created: the pool's
    `backend.apiserver` as it is, on the nodes of its `backend.placement`."""
    name = object_name(instance)
    pod_labels = {
        **labels(instance),
        "app.kubernetes.io/name": "lessor-cluster",
        "app.kubernetes.io/component": "apiserver",
    }
    # The pod never reads the admin's credential or the CA's key; the operator does.
    mounted = [key for key in pki if not key.startswith("admin.") and key != CA_KEY]
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata(instance, pki_secret_name(instance)),
            "type": "Opaque",
            "data": {key: base64.b64encode(value).decode() for key, value in pki.items()},
        },
        exposure.shape(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": metadata(instance, name),
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
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 5,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65532,
                        "runAsGroup": 65532,
                        "fsGroup": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [_etcd(settings), _apiserver(instance, settings)],
                    "volumes": [
                        # Room for etcd's quota and its write-ahead log beside it.
                        {"name": "etcd", "emptyDir": {"sizeLimit": etcd_volume_limit(settings)}},
                        {
                            "name": "pki",
                            "secret": {
                                "secretName": pki_secret_name(instance),
                                "defaultMode": 0o440,
                                "items": [{"key": key, "path": key} for key in mounted],
                            },
                        },
                    ],
                },
                placement,
            ),
        ),
    ]
