"""ClusterPool, ClusterInstance and ClusterLease (spec 2.2, 2.3, 3.1).

A ClusterInstance is claimed by a lease the way a PersistentVolume is claimed by a claim:
`spec.claimRef` on the instance names the lease (with its uid) and is written with a
resourceVersion precondition, so two leases racing for one instance cannot both win; the lease's
`status.instance` then records the binding. Release and extension are *intents* in the lease's
spec written by the API; the operator acts on them and owns every status field.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic.config import JsonDict

from lessor.protocol.durations import PositiveDuration, parse_duration
from lessor.protocol.phases import (
    CLUSTER_LEASE,
    ClusterLeasePhase,
    EndReason,
    LeasePhases,
    PoolPhase,
)
from lessor.resources.addons import Addon, ReadinessGates, unique_names
from lessor.resources.base import (
    AGE,
    DNS_LABEL,
    OBSERVED_GENERATION,
    POOL_NAME,
    Condition,
    CrdInfo,
    ObjectRef,
    PrinterColumn,
    Resource,
    SecretRef,
    SpecModel,
    StatusModel,
    conditions_field,
)
from lessor.resources.lease_time import expires_at

PoolName = Annotated[str, Field(min_length=1, max_length=63, pattern=POOL_NAME)]
# Unique by name, said in the CRD the way Kubernetes says it of a list keyed by a field.
ADDON_LIST: JsonDict = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}
# Both kinds of lease: written by the API server at admission (lessor.apiserver.auth's owner).
REQUESTER = (
    "Who owns the lease, <AccessPolicy name>/<identity>: written by the API server at creation,"
    " and only that caller may read, extend or release it through the API. Unset for a lease made"
    " with kubectl, which no API caller can reach."
)
ALIAS = (
    "A name the caller gave the lease (a DNS label), unique among its requester's active leases"
    " of the kind: the API accepts it where the lease's id goes."
)


class GatewayRef(SpecModel):
    name: str = Field(min_length=1, max_length=253, description="The Gateway's name.")
    namespace: str = Field(
        min_length=1, max_length=63, pattern=DNS_LABEL, description="The Gateway's namespace."
    )
    section_name: str | None = Field(
        default=None,
        max_length=253,
        description="The Gateway's listener the routes attach to (its TLS listener in"
        " Passthrough mode); default: every listener that accepts them.",
    )


class Exposure(SpecModel):
    """How a leased cluster is reached from outside the host cluster: a Service of its own in
    front of its API server, or a host name of its own on a shared Gateway (docs/operations.md,
    "Pools and backends", says which fits which network)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "(self.type == 'TLSRoute') == (has(self.gateway) && has(self.domain))",
                    "message": "exposure.gateway and exposure.domain are set with, and only"
                    " with, type TLSRoute",
                },
                {
                    "rule": "!has(self.sourceRanges) || size(self.sourceRanges) == 0"
                    " || self.type == 'LoadBalancer'",
                    "message": "exposure.sourceRanges is for type LoadBalancer",
                },
            ]
        }
    )

    type: Literal["NodePort", "LoadBalancer", "TLSRoute"] = Field(
        default="NodePort",
        description="NodePort: clients reach a node's address; LoadBalancer: the address the"
        " cluster's load balancer gets (a cloud's, MetalLB); TLSRoute: a Gateway API TLSRoute"
        " (gateway.networking.k8s.io/v1) passes TLS through a shared Gateway to the cluster,"
        " chosen by the host name <instance namespace>.<domain> (SNI).",
    )
    host: str | None = Field(
        default=None,
        max_length=253,
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9.:-]*[A-Za-z0-9])?$",
        description="The name or address clients connect to (a DNS name in front of the nodes,"
        " the load balancer or the Gateway); default: the InternalIP of the node the cluster's"
        " pod runs on, or the load balancer's address; with TLSRoute, the cluster's own host"
        " name (wildcard DNS for the domain), else the kubeconfig connects to `host` and names"
        " the cluster in tls-server-name.",
    )
    gateway: GatewayRef | None = Field(
        default=None, description="TLSRoute: the Gateway whose listener the routes attach to."
    )
    domain: str | None = Field(
        default=None,
        max_length=190,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$",
        description="TLSRoute: each cluster is <its namespace>.<domain>, a name in its"
        " certificate and the route's hostname.",
    )
    port: int = Field(
        default=443, ge=1, le=65535, description="TLSRoute: the port of the Gateway's listener."
    )
    source_ranges: list[Annotated[str, Field(pattern=r"^[0-9a-fA-F:.]+/[0-9]{1,3}$")]] = Field(
        default_factory=list,
        max_length=32,
        description="LoadBalancer: the only client address ranges the load balancer admits"
        " (loadBalancerSourceRanges); empty: every address, which on most clouds is the"
        " internet.",
    )
    annotations: dict[str, Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=dict,
        max_length=16,
        description="Annotations of the cluster's Service: a cloud's own settings, such as an"
        " internal load balancer.",
    )

    @model_validator(mode="after")
    def _route_settings_with_tls_route(self) -> Exposure:
        if (self.type == "TLSRoute") != (self.gateway is not None and self.domain is not None):
            raise ValueError(
                "exposure.gateway and exposure.domain are set with, and only with, type TLSRoute"
            )
        if self.source_ranges and self.type != "LoadBalancer":
            raise ValueError("exposure.sourceRanges is for type LoadBalancer")
        return self


MEMORY_LIMIT = (
    "The cluster container's memory limit (at least `memory`): past it the container is"
    " restarted, never the node starved."
)
# The CRD refuses what the model refuses: a limit below the request, which no pod would pass.
MEMORY_RULE: JsonDict = {
    "rule": "quantity(self.memoryLimit).compareTo(quantity(self.memory)) >= 0",
    "message": "memoryLimit is below memory",
}
LIMIT_AT_LEAST_REQUEST = ConfigDict(json_schema_extra={"x-kubernetes-validations": [MEMORY_RULE]})
UNITS = {
    "": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
}  # fmt: skip


def quantity_bytes(quantity: str) -> int:
    """A memory quantity of the forms the models accept (`1Gi`, `500M`, `1024`) in bytes."""
    digits = quantity.rstrip("KMGTi")
    return int(digits) * UNITS[quantity[len(digits) :]]


def stating_default(default: str, description: str, **constraints: Any) -> Any:
    """A Field whose description names its default where it says `{default}`, from the same
    value: `kubectl explain` shows a field's description but not the CRD's `default:`, and a
    value written twice drifts. The operator renders these models' own defaults
    (lessor.operator.backends), so an image bump is this one value."""
    return Field(default=default, description=description.format(default=default), **constraints)


class MemoryBounds(SpecModel):
    memory: str
    memory_limit: str

    @model_validator(mode="after")
    def _limit_at_least_request(self) -> MemoryBounds:
        if quantity_bytes(self.memory_limit) < quantity_bytes(self.memory):
            raise ValueError("memoryLimit is below memory")
        return self


class K3sBackendConfig(MemoryBounds):
    model_config = LIMIT_AT_LEAST_REQUEST

    image: str = stating_default(
        "rancher/k3s:v1.35.4-k3s1",
        "The k3s image, run as a server with its agent in one privileged container"
        " (default {default}).",
        min_length=1,
    )
    persistent: bool = Field(default=True, description="Datastore on a PVC, else an emptyDir.")
    storage_size: str = stating_default(
        "1Gi",
        "Size of the datastore's PVC when persistent (a quantity; default {default}).",
        pattern=r"^[0-9]+(Ki|Mi|Gi|Ti)$",
    )
    storage_class: str | None = Field(
        default=None,
        description="StorageClass of the datastore's PVC when persistent; unset: the host"
        " cluster's default StorageClass.",
    )
    cpu: str = stating_default(
        "500m",
        "The k3s container's CPU request (a quantity such as {default} or 2; default {default}).",
        pattern=r"^[0-9]+(\.[0-9]+)?m?$",
    )
    memory: str = stating_default(
        "1Gi",
        "The k3s container's memory request (a quantity such as {default} or 500M;"
        " default {default}).",
        pattern=r"^[0-9]+(Ki|Mi|Gi|Ti|K|M|G|T)?$",
    )
    memory_limit: str = Field(
        default="2Gi", pattern=r"^[0-9]+(Ki|Mi|Gi|Ti|K|M|G|T)?$", description=MEMORY_LIMIT
    )
    exposure: Exposure = Field(default_factory=Exposure)


class VclusterBackendConfig(MemoryBounds):
    model_config = LIMIT_AT_LEAST_REQUEST

    image: str = Field(
        default="ghcr.io/loft-sh/vcluster-pro:0.30.0",
        min_length=1,
        description="vcluster's image (the syncer at /vcluster, kine at /usr/local/bin/kine).",
    )
    kubernetes_image: str = Field(
        default="ghcr.io/loft-sh/kubernetes:v1.34.0",
        min_length=1,
        description="An image with kube-apiserver and kube-controller-manager under /kubernetes"
        " and a `cp`: an init container copies them into the pod.",
    )
    coredns_image: str = stating_default(
        "coredns/coredns:1.12.1",
        "The image of the virtual cluster's DNS, CoreDNS (default {default}).",
        min_length=1,
    )
    cpu: str = stating_default(
        "200m",
        "The vcluster container's CPU request, for its syncer, kine, kube-apiserver"
        " and kube-controller-manager (a quantity such as {default} or 2; default {default}).",
        pattern=r"^[0-9]+(\.[0-9]+)?m?$",
    )
    memory: str = stating_default(
        "256Mi",
        "The vcluster container's memory request (a quantity such as {default} or 1G;"
        " default {default}).",
        pattern=r"^[0-9]+(Ki|Mi|Gi|Ti|K|M|G|T)?$",
    )
    memory_limit: str = Field(
        default="1Gi", pattern=r"^[0-9]+(Ki|Mi|Gi|Ti|K|M|G|T)?$", description=MEMORY_LIMIT
    )
    pod_security: Literal["restricted", "baseline", "privileged"] = Field(
        default="baseline",
        description="The Pod Security level of the cluster's namespace, where the pods created in"
        " the virtual cluster run: what its tenants' pods may ask for.",
    )
    exposure: Exposure = Field(default_factory=Exposure)


class ApiserverBackendConfig(MemoryBounds):
    """A control plane in a pod of the pool's namespace, behind a Service of its own (a shared
    Gateway's TLSRoute is for the backends whose clusters have a namespace each)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.exposure) || self.exposure.type != 'TLSRoute'",
                    "message": "the apiserver backend is exposed by NodePort or LoadBalancer",
                },
                MEMORY_RULE,
            ]
        }
    )

    image: str = stating_default(
        "registry.k8s.io/kube-apiserver:v1.35.4",
        "The kube-apiserver image, pulled IfNotPresent (default {default}).",
        min_length=1,
    )
    etcd_image: str = stating_default(
        "registry.k8s.io/etcd:3.6.6-0",
        "The etcd image, pulled IfNotPresent (default {default}).",
        min_length=1,
    )
    cpu: str = stating_default(
        "100m",
        "The kube-apiserver container's CPU request (a quantity such as {default} or 2;"
        " default {default}); etcd's container asks for 50m.",
        pattern=r"^[0-9]+(\.[0-9]+)?m?$",
    )
    memory: str = stating_default(
        "256Mi",
        "The kube-apiserver container's memory request (a quantity such as {default} or"
        " 1G; default {default}).",
        pattern=r"^[0-9]+(Ki|Mi|Gi|Ti|K|M|G|T)?$",
    )
    memory_limit: str = Field(
        default="1Gi", pattern=r"^[0-9]+(Ki|Mi|Gi|Ti|K|M|G|T)?$", description=MEMORY_LIMIT
    )
    etcd_quota: str = Field(
        default="1Gi",
        pattern=r"^[0-9]+(Ki|Mi|Gi)$",
        description="etcd's --quota-backend-bytes: past it the cluster refuses writes (the"
        " tenant's own cluster turns read-only, never the host's disk).",
    )
    exposure: Exposure = Field(default_factory=Exposure)

    @model_validator(mode="after")
    def _own_service(self) -> ApiserverBackendConfig:
        if self.exposure.type == "TLSRoute":
            raise ValueError("the apiserver backend is exposed by NodePort or LoadBalancer")
        return self


CIDR = r"^[0-9a-fA-F:.]+/[0-9]{1,3}$"
CPU = r"^[0-9]+(\.[0-9]+)?m?$"
BYTES = r"^[0-9]+(Ki|Mi|Gi|Ti|K|M|G|T)?$"
# Where a tenant's pods must never reach unless a pool names it: every private, shared,
# link-local (the cloud metadata address 169.254.169.254 among them) and loopback range, which
# hold the host's nodes, pods and Services, other tenants' clusters and lessor itself.
PRIVATE_V4 = (
    "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.168.0.0/16",
)  # fmt: skip
PRIVATE_V6 = ("fc00::/7", "fe80::/10", "::1/128")


class EgressRule(SpecModel):
    cidr: str = Field(pattern=CIDR, max_length=43, description="An address range pods may reach.")
    except_: list[Annotated[str, Field(pattern=CIDR, max_length=43)]] = Field(
        default_factory=list,
        alias="except",
        max_length=32,
        description="Ranges inside `cidr` that stay out of reach.",
    )
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(
        default_factory=list, max_length=16, description="TCP and UDP ports; empty: every port."
    )


def _public_internet() -> list[EgressRule]:
    return [
        EgressRule(cidr="0.0.0.0/0", except_=list(PRIVATE_V4)),
        EgressRule(cidr="::/0", except_=list(PRIVATE_V6)),
    ]


class Network(SpecModel):
    """What a cluster's pods may reach besides their own namespace, DNS and (for the cluster's
    own pod) the host's API server: lessor writes it as the NetworkPolicies of the cluster's
    namespace (docs/security.md, "Tenant isolation"). Nothing else of the host, of lessor or
    of other tenants is reachable, and nothing from outside reaches the cluster but its API
    port."""

    egress: list[EgressRule] = Field(
        default_factory=_public_internet,
        max_length=32,
        description="Address ranges the cluster's pods may open connections to. Default: the"
        " public internet (every address but the private, shared, link-local and loopback"
        " ranges, so not the host's nodes, pods or Services, nor the cloud metadata address)."
        " Empty: nothing outside the namespace.",
    )


class Toleration(SpecModel):
    """A toleration of the cluster's own pod, copied into its spec as Kubernetes has it."""

    key: str | None = Field(
        default=None,
        max_length=316,
        description="The taint key tolerated; unset, with operator Exists: every taint.",
    )
    operator: Literal["Exists", "Equal"] = Field(
        default="Equal",
        description="Equal (default): the taint's value must be `value`; Exists: any value.",
    )
    value: str | None = Field(
        default=None, max_length=63, description="The taint's value, with operator Equal."
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="The taint effect tolerated; unset: every effect."
    )


class Placement(SpecModel):
    """Which host nodes a cluster's pods run on. A backend whose tenants are root on their node
    (k3s) must be pinned to nodes of its own (docs/security.md, "Privileged backends")."""

    node_selector: dict[str, Annotated[str, Field(max_length=63)]] = Field(
        default_factory=dict,
        max_length=16,
        description="Labels a node must have to run the cluster's own pod (its nodeSelector);"
        " empty: any node.",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=16,
        description="Tolerations of the cluster's own pod, for the taints of the nodes"
        " nodeSelector names.",
    )
    shared_nodes: bool = Field(
        default=False,
        description="A k3s pool without a nodeSelector is refused unless this is true: an"
        " administrator's statement that its tenants may be root beside lessor and other"
        " tenants.",
    )


class Quota(SpecModel):
    """The ResourceQuota and LimitRange of a cluster's namespace: what its tenant's workloads may
    take of the host in all (vcluster's pods run there; k3s's and apiserver's own pod is
    bounded by its limits)."""

    pods: int = Field(
        default=50, ge=1, le=10000, description="Pods the namespace may hold (default 50)."
    )
    cpu: str = Field(default="8", pattern=CPU, description="Sum of the pods' CPU requests.")
    memory: str = Field(
        default="16Gi", pattern=BYTES, description="Sum of the memory requests, and of the limits."
    )
    ephemeral_storage: str = Field(
        default="20Gi", pattern=BYTES, description="Sum of the pods' ephemeral-storage requests."
    )
    persistent_volume_claims: int = Field(
        default=10,
        ge=0,
        le=1000,
        description="PersistentVolumeClaims the namespace may hold (default 10).",
    )
    storage: str = Field(default="50Gi", pattern=BYTES, description="Sum of the claims' size.")
    default_memory: str = Field(
        default="512Mi", pattern=BYTES, description="A container's memory limit when it sets none."
    )
    default_ephemeral_storage: str = Field(
        default="1Gi",
        pattern=BYTES,
        description="A container's ephemeral-storage limit when it sets none (default 1Gi).",
    )


_SETTINGS_BLOCKS = ("apiserver", "k3s", "vcluster")


def _backend_schema(schema: JsonDict) -> None:
    """A settings block of another type is refused. `type` is required by the pool's rule
    (ClusterPoolSpec), which says why: a schema's `required` would be answered first, with a bare
    "Required value"."""
    schema["x-kubernetes-validations"] = [
        {
            "rule": f"!has(self.{block}) || self.type == '{block}'",
            "message": f"backend.{block} is set but backend.type is not {block}",
        }
        for block in _SETTINGS_BLOCKS
    ]
    required = schema.get("required")
    if isinstance(required, list) and "type" in required:
        required.remove("type")
        if not required:
            del schema["required"]


class Backend(SpecModel):
    """Which kind of cluster a pool's instances are, and that kind's settings: a settings block
    of another kind is refused (by the CRD's schema, and by this model), not silently ignored."""

    model_config = ConfigDict(json_schema_extra=_backend_schema)

    type: Literal["local", "apiserver", "k3s", "vcluster", "namespace"] = Field(
        description="Required: no kind suits every install. local: kube-apiserver and etcd"
        " processes on the operator's host (development, demos, CI); apiserver: kube-apiserver"
        " and etcd as a pod of the host cluster, reached through a NodePort (a control plane"
        " without nodes, for jobs that need only an API server); k3s: a k3s server and agent in"
        " a namespace of the host cluster; vcluster: a virtual cluster whose pods run on the host"
        " cluster's nodes, in a namespace of its own; namespace: a namespace of the host"
        " cluster, for tests and benchmarks only (operator flag --test-backends).",
    )
    apiserver: ApiserverBackendConfig | None = None
    # An explicit alias: the camelCase generator would spell it "k3S".
    k3s: K3sBackendConfig | None = Field(
        default=None,
        alias="k3s",
        description="Settings of the k3s backend, for type k3s only; unset: its defaults.",
    )
    vcluster: VclusterBackendConfig | None = Field(
        default=None,
        description="Settings of the vcluster backend, for type vcluster only; unset: its"
        " defaults.",
    )
    network: Network = Field(
        default_factory=Network,
        description="k3s and vcluster: what the cluster's pods may reach (its namespace's"
        " NetworkPolicies).",
    )
    placement: Placement = Field(
        default_factory=Placement, description="k3s, vcluster, apiserver: the nodes it runs on."
    )
    quota: Quota = Field(
        default_factory=Quota,
        description="k3s and vcluster: the ResourceQuota and LimitRange of its namespace.",
    )

    @model_validator(mode="after")
    def _settings_of_its_type(self) -> Backend:
        for block in _SETTINGS_BLOCKS:
            if getattr(self, block) is not None and self.type != block:
                raise ValueError(f"backend.{block} is set but backend.type is not {block}")
        return self


class PoolPolicy(SpecModel):
    """How many warm instances a pool keeps: `warmTarget` (fixed), or a number that follows
    demand between `minWarm` and `maxWarm` (autoscale; lessor.operator.cluster.autoscale)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.mode != 'autoscale' || (has(self.maxWarm) &&"
                    " self.maxWarm >= self.minWarm)",
                    "message": "autoscale needs maxWarm, at least minWarm",
                },
                {
                    "rule": "duration(self.period).getSeconds() <="
                    " duration(self.window).getSeconds() * 1000",
                    "message": "period is more than 1000 windows",
                },
            ]
        }
    )

    mode: Literal["fixed", "autoscale"] = Field(
        default="fixed",
        description="fixed: keep exactly warmTarget instances ready. autoscale: keep what demand"
        " asks for, between minWarm and maxWarm (the status says how many and why).",
    )
    max_surge: int = Field(
        default=1,
        ge=1,
        le=100,
        description="While warm instances of an older template (backend, addons, readinessGates)"
        " are replaced: how many new ones may be made beyond the target (default 1). An old one"
        " goes only once a new one is ready.",
    )
    min_warm: int = Field(default=0, ge=0, le=1000, description="autoscale: the fewest warm.")
    max_warm: int | None = Field(
        default=None, ge=0, le=1000, description="autoscale: the most warm (required)."
    )
    window: PositiveDuration = Field(
        default="10m",
        description="autoscale: arrivals are counted per window; the target covers the busiest"
        " of the last window, this one, and this and the next window one period ago.",
    )
    period: PositiveDuration = Field(
        default="24h",
        description="autoscale: the rhythm of demand (a day): what arrived one period ago is"
        " expected again. At most 1000 windows.",
    )
    scale_down_delay: PositiveDuration = Field(
        default="10m",
        description="autoscale: a lower target applies only this long after the last rise.",
    )

    @model_validator(mode="after")
    def _bounded(self) -> PoolPolicy:
        if self.mode == "autoscale" and (self.max_warm is None or self.max_warm < self.min_warm):
            raise ValueError("autoscale needs maxWarm, at least minWarm")
        windows = parse_duration(self.period) / parse_duration(self.window)
        if windows > 1000:
            raise ValueError("period is more than 1000 windows")
        return self


class Diagnostics(SpecModel):
    """Where the diagnostics bundle of each of a pool's leases is stored (an S3-compatible
    bucket), what a capture may cost, and for how long a pre-signed URL to one stays valid.

    Capture reads the leased cluster, which its tenant controls: it is bounded in time and in
    bytes, and a capture that fails or runs out of either never holds teardown back longer than
    `captureTimeout`. lessor serves a bundle for `retention` after its capture, whether or not
    its lease still exists (a DiagnosticsBundle keeps the record); the store keeps the object as
    long as the bucket's lifecycle rule says, which should be at least as long."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.kmsKeyId) || self.serverSideEncryption == 'aws:kms'",
                    "message": "kmsKeyId needs serverSideEncryption: aws:kms",
                }
            ]
        }
    )

    bucket: str = Field(
        min_length=3,
        max_length=63,
        pattern=r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$",
        description="The bucket's name; it must exist (lessor never creates one).",
    )
    prefix: str = Field(
        default="",
        max_length=512,
        pattern=r"^[A-Za-z0-9!_.*'()/-]*$",
        description="Object names are <prefix><namespace>/<lease>/<lease uid>.tar.gz.",
    )
    endpoint: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s/?#]+/?$",
        description=(
            "An S3-compatible endpoint (MinIO, Ceph, R2, ...), addressed path-style; "
            "unset: AWS S3 of `region`, virtual-hosted."
        ),
    )
    region: str = Field(
        default="us-east-1",
        pattern=r"^[a-z0-9-]{1,32}$",
        description="The bucket's region, which requests are signed for (default us-east-1);"
        " without `endpoint`, also which AWS S3 endpoint is used.",
    )
    credentials_secret_ref: SecretRef | None = Field(
        default=None,
        description=(
            "A Secret in the pool's namespace with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(AWS_SESSION_TOKEN optional); unset: the operator's and API server's own "
            "credentials (environment, web identity, instance profile)."
        ),
    )
    server_side_encryption: Literal["AES256", "aws:kms"] | None = Field(
        default=None,
        description="Server-side encryption asked for with each bundle stored: AES256 (keys"
        " the store manages) or aws:kms (with kmsKeyId); unset: none asked for, so the"
        " bucket's own default applies.",
    )
    kms_key_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=2048,
        description="The KMS key (id or ARN) bundles are encrypted with, for aws:kms only;"
        " unset: the store's default key.",
    )
    url_ttl: PositiveDuration = Field(
        default="15m",
        description="How long a pre-signed URL stays valid (longer than 7d is cut to 7d, the"
        " longest a SigV4 signature lives).",
    )
    capture_timeout: PositiveDuration = Field(
        default="60s", description="The longest a capture and its upload may take."
    )
    retention: PositiveDuration = Field(
        default="168h",
        description="How long after its capture a bundle is served to its lease's owner, even"
        " once the lease is deleted; the bucket's lifecycle rule should keep objects as long.",
    )
    max_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=64 * 1024,
        le=1024 * 1024 * 1024,
        description="The largest bundle (uncompressed); what does not fit is left out and listed.",
    )
    log_lines: int = Field(
        default=200, ge=0, le=10000, description="Last lines of each container's log."
    )

    @model_validator(mode="after")
    def _kms_key_with_kms(self) -> Diagnostics:
        if self.kms_key_id is not None and self.server_side_encryption != "aws:kms":
            raise ValueError("kmsKeyId needs serverSideEncryption: aws:kms")
        return self


class HealthCheck(SpecModel):
    """How the pool's ready clusters are checked: the backend's check (its API answers) and the
    readiness gates again for those no lease holds. Not part of the template: a change applies
    to every cluster at its next check, since no cluster need be remade for it."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "duration(self.period).getSeconds() <= 600",
                    "message": "period is at most 10m",
                }
            ]
        }
    )

    period: PositiveDuration = Field(
        default="15s",
        description="Between two checks of a cluster that passed (at most 10m). One that"
        " failed is checked again within 5 s.",
    )
    failure_threshold: int = Field(
        default=3,
        ge=1,
        le=100,
        description="Checks failed in a row before a ready cluster is Unhealthy: then replaced"
        " if no lease holds it, reported on its lease if one does.",
    )

    @model_validator(mode="after")
    def _bounded(self) -> HealthCheck:
        if parse_duration(self.period) > datetime.timedelta(minutes=10):
            raise ValueError("period is at most 10m")
        return self


BACKEND_REQUIRED = (
    "spec.backend.type is required: apiserver, k3s or vcluster (clusters in the host cluster;"
    " k3s also needs the operator's allowPrivilegedBackends), local (processes on the operator's"
    " host: development and demos) or namespace (tests, with --test-backends); docs/"
    "operations.md, Pools and backends, says which fits"
)


def _backend_required(schema: JsonDict) -> None:
    """The CRD says a missing backend is refused, and why, in a rule of its own: a schema's
    `required` would be answered first with a bare "Required value", and the rule never run."""
    required = schema.get("required")
    if isinstance(required, list) and "backend" in required:
        required.remove("backend")
    schema["x-kubernetes-validations"] = [
        {"rule": "has(self.backend) && has(self.backend.type)", "message": BACKEND_REQUIRED}
    ]


# The TTL of a lease whose pool sets none (ClusterPoolSpec.ttl's default), and so of a lease
# whose own TTL was never recorded (ClusterLease.effective_ttl).
DEFAULT_POOL_TTL = "1h"


class ClusterPoolSpec(SpecModel):
    """A pool's backend has no default: the one a default could name (`local`) works only
    where the operator runs beside its clusters' processes, never in the shipped image, so a pool
    that named none would fail at its first cluster instead of at `kubectl apply`."""

    model_config = ConfigDict(json_schema_extra=_backend_required)

    ttl: PositiveDuration = Field(
        default=DEFAULT_POOL_TTL,
        description="The TTL of a lease that asks for none (a duration such as 30m or 1h30m;"
        f" default {DEFAULT_POOL_TTL}), within the caller's rule's maxTtl.",
    )
    warm_target: int = Field(
        default=1,
        ge=0,
        le=1000,
        description="Instances kept Ready, with policy.mode fixed (default 1).",
    )
    max_instances: int = Field(
        default=100,
        ge=1,
        le=10000,
        description="Ceiling on all instances of the pool, leased included: every pool has one,"
        " so the clusters tenants hold are bounded by more than their number.",
    )
    policy: PoolPolicy = Field(default_factory=PoolPolicy)
    backend: Backend
    addons: list[Addon] = Field(
        default_factory=list,
        max_length=20,
        description="Applied to each new cluster, in order, before it is Ready (part of the"
        " template: a change rolls the pool).",
        json_schema_extra=ADDON_LIST,
    )
    readiness_gates: ReadinessGates | None = Field(
        default=None,
        description="What must be true inside a new cluster before it is Ready (part of the"
        " template).",
    )
    health_check: HealthCheck = Field(default_factory=HealthCheck)
    diagnostics: Diagnostics | None = None

    _unique_addons = field_validator("addons")(unique_names)


class Arrivals(StatusModel):
    start: datetime.datetime = Field(
        description="The start of the window (windows are aligned to the Unix epoch)."
    )
    leases: int = Field(
        ge=0, description="Leases created in the window that bound a cluster or still may."
    )


class AutoscaleStatus(StatusModel):
    target: int = Field(ge=0, description="Warm instances kept now.")
    reason: str = Field(default="", max_length=1024, description="Why this target.")
    changed_at: datetime.datetime | None = Field(
        default=None, description="When the target last changed."
    )
    raised_at: datetime.datetime | None = Field(
        default=None, description="When it last rose (scale-down waits scaleDownDelay from it)."
    )
    arrivals: list[Arrivals] = Field(
        default_factory=list,
        max_length=1002,
        description="Leases created per window over the last period, oldest first.",
    )


class ClusterPoolStatus(StatusModel):
    phase: PoolPhase | None = Field(
        default=None,
        description="Healthy; Degraded while an instance is Unhealthy or Quarantined or"
        " BackendHealthy is False; Unavailable when the pool should keep warm instances and has"
        " none ready, leased or being created.",
    )
    target: int | None = Field(
        default=None, description="Warm instances kept now: warmTarget, or the autoscaler's."
    )
    ready: int = Field(default=0, description="Unleased instances that are Ready (warm).")
    leased: int = Field(default=0, description="Instances claimed by a lease.")
    creating: int = Field(
        default=0,
        description="Instances not ready yet, those just created and not yet seen included.",
    )
    recycling: int = Field(default=0, description="Instances being deleted and torn down.")
    unhealthy: int = Field(
        default=0,
        description="Unleased instances that are Unhealthy, to be replaced (a leased one counts"
        " as leased).",
    )
    quarantined: int = Field(
        default=0, description="Instances whose teardown could not be verified; capacity withheld."
    )
    queue_depth: int = Field(
        default=0,
        description="Leases waiting for a cluster (Pending, or with no phase yet); a change of"
        " it alone is written at most once a second.",
    )
    outdated: int = Field(
        default=0,
        description="Unleased instances of an older template, being replaced (condition UpToDate).",
    )
    template_hash: str | None = Field(
        default=None,
        description="Digest of the current template (spec.backend, addons and readinessGates).",
    )
    autoscale: AutoscaleStatus | None = Field(
        default=None,
        description="What the autoscaler decided and from what; policy.mode autoscale only.",
    )
    start_failures: int = Field(
        default=0,
        description="New clusters in a row that failed to start (condition BackendHealthy says"
        " why); reset by the next one that starts.",
    )
    retry_at: datetime.datetime | None = Field(
        default=None,
        description="No new cluster is started before this, after start failures in a row.",
    )
    observed_generation: int | None = Field(default=None, description=OBSERVED_GENERATION)
    conditions: list[Condition] = conditions_field(
        "Ready (the phase is Healthy), Warm (target instances ready; reason Warming until then),"
        " UpToDate (no warm instance of an older template left; reason Rolling until then),"
        " BackendHealthy (new clusters start; reason BackendUnavailable or StartFailing when"
        " not) and, with spec.diagnostics, DiagnosticsReady (the bucket can be written)."
    )


class ClusterPool(Resource[ClusterPoolSpec, ClusterPoolStatus]):
    kind: Literal["ClusterPool"] = "ClusterPool"
    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="clusterpools",
        singular="clusterpool",
        short_names=("cpool",),
        description="A warm pool of ephemeral clusters that leases draw from.",
        columns=(
            PrinterColumn("Phase", ".status.phase"),
            PrinterColumn("Backend", ".spec.backend.type"),
            PrinterColumn("Warm", ".status.target", "integer"),
            PrinterColumn("Ready", ".status.ready", "integer"),
            PrinterColumn("Leased", ".status.leased", "integer"),
            PrinterColumn("Queue", ".status.queueDepth", "integer"),
            PrinterColumn("Quarantined", ".status.quarantined", "integer", priority=1),
            PrinterColumn("Outdated", ".status.outdated", "integer", priority=1),
            AGE,
        ),
    )

    def warm_now(self) -> int:
        """The warm instances the pool keeps now, as the operator last decided (warmTarget, or
        the autoscaler's target); before its first decision, what it will start from."""
        if self.status is not None and self.status.target is not None:
            return self.status.target
        fixed = self.spec.policy.mode == "fixed"
        return self.spec.warm_target if fixed else self.spec.policy.min_warm


class ClaimRef(SpecModel):
    name: str = Field(min_length=1, description="The lease's name, in the instance's namespace.")
    uid: str = Field(
        min_length=1,
        description="The lease's uid: a lease later made under the same name holds no claim.",
    )


class ClusterInstanceSpec(SpecModel):
    pool: PoolName = Field(
        description="The ClusterPool that made this instance, in the same namespace."
    )
    backend: Backend = Field(
        description="Copied from the pool at creation: editing a pool never changes a cluster "
        "that already exists."
    )
    addons: list[Addon] = Field(
        default_factory=list,
        max_length=20,
        description="Copied from the pool at creation.",
        json_schema_extra=ADDON_LIST,
    )
    readiness_gates: ReadinessGates | None = Field(
        default=None, description="Copied from the pool at creation."
    )
    claim_ref: ClaimRef | None = Field(
        default=None,
        description="The lease this instance is reserved for; written once, with the instance's "
        "resourceVersion as precondition.",
    )


InstancePhase = Literal["Creating", "Ready", "Leased", "Unhealthy", "Recycling", "Quarantined"]
INSTANCE_HEALTHY = "Healthy"  # an instance's condition: its last health check passed


@dataclass(frozen=True)
class InstancePhases:
    """The groups of an instance's phases the operator decides by (None: not yet reconciled)."""

    serving: frozenset[str | None]
    """Its Ready condition is True: warm, or in a lease's hands."""
    checked: frozenset[str | None]
    """Health-checked: it was ready once and is not being torn down."""
    ending: frozenset[str | None]
    """Torn down, or its teardown not verified: it will never serve again."""
    retirable: frozenset[str | None]
    """Unleased and not past Ready: what a roll or a lower warm target may delete."""


INSTANCE_PHASES = InstancePhases(
    serving=frozenset({"Ready", "Leased"}),
    checked=frozenset({"Ready", "Leased", "Unhealthy"}),
    ending=frozenset({"Recycling", "Quarantined"}),
    retirable=frozenset({None, "Creating", "Ready"}),
)


class Teardown(StatusModel):
    """The teardown of a deleted instance's cluster, and whether it was verified. Kept on a
    Quarantined instance, never discarded: its evidence says what to clean up by hand."""

    verified: bool = Field(
        description="Whether the backend looked for every trace of the cluster and found none;"
        " the instance's finalizer is removed only then."
    )
    evidence: list[str] = Field(
        default_factory=list,
        description="What the verification found, one line each: unverified, the traces left;"
        " verified, what it checked.",
    )
    started_at: datetime.datetime | None = Field(
        default=None,
        description="When the teardown started: unverified past the operator's"
        " --teardown-grace from then, the instance is Quarantined.",
    )
    checked_at: datetime.datetime | None = Field(
        default=None,
        description="When the verification's finding last changed (a recheck that finds the"
        " same leaves it).",
    )


class ClusterInstanceStatus(StatusModel):
    phase: InstancePhase | None = Field(
        default=None,
        description="Creating (starting, or its addons and readiness gates not all passed),"
        " Ready (warm), Leased (claimed by a lease), Unhealthy (failed to start, or failed"
        " healthCheck.failureThreshold checks in a row), Recycling (being torn down), or"
        " Quarantined (its teardown could not be verified).",
    )
    message: str = Field(
        default="",
        description="What the last check found: the backend's word on the cluster, or the first"
        " readiness gate that does not pass; Quarantined, that teardown was not verified.",
    )
    endpoint: str | None = Field(
        default=None,
        description="Where the cluster's API server is reached, as its backend last found it:"
        " host:port for a cluster in a pod (what its kubeconfigs connect to), an https:// URL on"
        " 127.0.0.1 for local.",
    )
    backend_details: dict[str, str] = Field(
        default_factory=dict,
        description="The backend's own facts from its last check, for people debugging: for"
        " example the cluster's namespace, Service and endpoint, or a local cluster's directory"
        " and process ids.",
    )
    ready_at: datetime.datetime | None = Field(
        default=None,
        description="When the cluster was first ready. From then on it is never provisioned"
        " again: a cluster that breaks is reported, not remade under its name.",
    )
    kubeconfig_secret: str | None = Field(
        default=None,
        description="The Secret, <instance>-kubeconfig in this namespace (key kubeconfig),"
        " holding the cluster's admin kubeconfig, which leases never get: each has its own.",
    )
    teardown: Teardown | None = None
    failed_checks: int = Field(
        default=0, ge=0, description="Health checks failed in a row since it was last ready."
    )
    observed_generation: int | None = Field(default=None, description=OBSERVED_GENERATION)
    conditions: list[Condition] = conditions_field(
        "Ready (the phase is Ready or Leased), Healthy (the last health check passed), and one"
        " per readiness gate the pool has: AddonsApplied, DeploymentsAvailable, CRDsEstablished"
        " (the message says what is missing)."
    )


class ClusterInstance(Resource[ClusterInstanceSpec, ClusterInstanceStatus]):
    kind: Literal["ClusterInstance"] = "ClusterInstance"
    phases: ClassVar[InstancePhases] = INSTANCE_PHASES
    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="clusterinstances",
        singular="clusterinstance",
        short_names=("cinst",),
        description="One ephemeral cluster of a pool, ready or leased.",
        columns=(
            PrinterColumn("Pool", ".spec.pool"),
            PrinterColumn("Phase", ".status.phase"),
            PrinterColumn("Lease", ".spec.claimRef.name"),
            PrinterColumn("Endpoint", ".status.endpoint", priority=1),
            AGE,
        ),
    )


class Extension(SpecModel):
    ttl: PositiveDuration = Field(description="How much later the lease should expire.")
    requested_at: datetime.datetime | None = Field(
        default=None,
        description="When the API server recorded the request (for people: lessor does not"
        " read it).",
    )


class ClusterLeaseSpec(SpecModel):
    pool: PoolName = Field(description="The ClusterPool (the API's profile).")
    ttl: PositiveDuration | None = Field(
        default=None, description="Effective TTL after policy clamping; default the pool's ttl."
    )
    requester: str | None = Field(
        default=None,
        max_length=1024,
        description=REQUESTER,
    )
    alias: str | None = Field(
        default=None,
        max_length=63,
        pattern=DNS_LABEL,
        description=ALIAS,
    )
    metadata: dict[str, Any] | None = Field(
        default=None, description="Caller metadata: opaque, untrusted, never used for decisions."
    )
    max_extensions: int = Field(
        default=2, ge=0, le=100, description="Extensions allowed, from the policy rule at creation."
    )
    max_ttl: PositiveDuration | None = Field(
        default=None,
        description="Ceiling of the lease's lifetime measured from binding, from the policy rule "
        "at creation: no extension carries the expiry past it.",
    )
    release_requested: bool = Field(
        default=False,
        description="Release intent, written by the API's DELETE: the operator then ends the lease"
        " (Released) and tears its cluster down.",
    )
    extensions: list[Extension] = Field(
        default_factory=list,
        max_length=100,
        description="Extension intents, appended with a resourceVersion precondition so that two "
        "concurrent requests cannot both spend the same remaining extension.",
    )

    def expires_at(self, bound_at: datetime.datetime, ttl: str) -> datetime.datetime:
        """The one expiry rule, for the operator that enforces it and the API that answers it;
        `ttl` is the effective TTL (the request, or the pool's default, within maxTtl)."""
        return expires_at(bound_at, ttl, self.extensions, self.max_extensions, self.max_ttl)


CLUSTER_HEALTHY = "ClusterHealthy"
# Held by a lease until the operator has ended it (its cluster torn down). The API server
# creates leases with it, which saves the operator a write before it can bind.
LEASE_FINALIZER = "lessor.dev/release"
DIAGNOSTICS_CAPTURED = "DiagnosticsCaptured"
"""The lease's condition that mirrors its bound cluster's health checks (written once one fails)."""


DiagnosticsState = Literal["Capturing", "Captured", "Failed"]


class DiagnosticsRecord(StatusModel):
    """The diagnostics bundle of one lease: where it went, with a copy of the pool's settings
    taken at capture, so the bundle stays reachable when the pool changes or is deleted."""

    state: DiagnosticsState = Field(
        description="Capturing (written before the capture starts, so that an operator"
        " restarted meanwhile resumes it), then Captured or Failed."
    )
    started_at: datetime.datetime = Field(
        description="When the capture started; its captureTimeout counts from then."
    )
    finished_at: datetime.datetime | None = Field(
        default=None,
        description="When the capture ended, captured or not; the bundle's retention counts from"
        " then.",
    )
    store: Diagnostics = Field(
        description="The pool's spec.diagnostics as they were when the capture started."
    )
    key: str = Field(
        description="The bundle's object name in the bucket:"
        " <prefix><namespace>/<lease>/<lease uid>.tar.gz."
    )
    size_bytes: int | None = Field(
        default=None, ge=0, description="Bytes of the stored .tar.gz (compressed), once captured."
    )
    truncated: bool = Field(
        default=False,
        description="The bundle is partial: a bound (maxBytes, a page, the logs) cut something,"
        " or the cluster's part ran out of time; its capture.json lists what.",
    )
    message: str = Field(
        default="",
        description="What the capture stored (files, bytes, where) and what was cut, or why it"
        " failed.",
    )

    def retained_until(self) -> datetime.datetime:
        """When lessor stops serving the bundle: `retention` after the capture ended."""
        return (self.finished_at or self.started_at) + parse_duration(self.store.retention)


class ClusterLeaseStatus(StatusModel):
    phase: ClusterLeasePhase | None = Field(
        default=None,
        description="Pending (in its pool's queue), Bound (its cluster is usable), Recycling"
        " (ended, the cluster being torn down), Released or Expired (ended, teardown verified),"
        " or Quarantined (teardown could not be verified: capacity withheld).",
    )
    queue_position: int | None = Field(
        default=None,
        ge=1,
        description="Place in the pool's queue of Pending leases, from 1 (the next to bind);"
        " unset once bound.",
    )
    instance: ObjectRef | None = Field(default=None, description="The bound ClusterInstance.")
    bound_at: datetime.datetime | None = Field(
        default=None,
        description="When the lease was bound to its cluster; expiresAt counts from it.",
    )
    expires_at: datetime.datetime | None = Field(
        default=None,
        description="When the lease ends: boundAt plus effectiveTtl plus the extensions applied,"
        " never past boundAt plus spec.maxTtl. The lease's kubeconfig is valid until then.",
    )
    effective_ttl: str | None = Field(
        default=None,
        description="The TTL expiresAt is computed from: spec.ttl, or the pool's ttl when it is"
        " unset (a duration such as 1h30m).",
    )
    cluster_name: str | None = Field(
        default=None, description="The bound cluster's name: its ClusterInstance's."
    )
    kubeconfig_secret: str | None = Field(
        default=None,
        description="The Secret, lease-<name>-kubeconfig in this namespace (key kubeconfig),"
        " holding the lease's own kubeconfig, whose certificate expires at expiresAt; deleted"
        " once the lease has ended.",
    )
    extensions: int = Field(default=0, description="Extensions applied to expiresAt.")
    end_reason: EndReason | None = Field(
        default=None,
        description="Why the lease ended: Released (a release was requested, or the object"
        " deleted) or Expired (expiresAt passed).",
    )
    ended_at: datetime.datetime | None = Field(
        default=None, description="When it became Released or Expired; retention counts from it."
    )
    diagnostics: DiagnosticsRecord | None = None
    message: str = Field(
        default="",
        description="What the operator says of the lease now: why it waits, what ended it, or"
        " what teardown left.",
    )
    observed_generation: int | None = Field(default=None, description=OBSERVED_GENERATION)
    conditions: list[Condition] = conditions_field(
        "Ready (the phase is Bound), ClusterHealthy (the bound cluster's health checks, written"
        " once one fails) and, for a pool with diagnostics, DiagnosticsCaptured (whether the"
        " bundle was stored)."
    )


class ClusterLease(Resource[ClusterLeaseSpec, ClusterLeaseStatus]):
    kind: Literal["ClusterLease"] = "ClusterLease"
    phases: ClassVar[LeasePhases] = CLUSTER_LEASE
    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="clusterleases",
        singular="clusterlease",
        short_names=("clease",),
        description="A time-limited lease of one cluster from a pool.",
        columns=(
            PrinterColumn("Pool", ".spec.pool"),
            PrinterColumn("Phase", ".status.phase"),
            PrinterColumn("Requester", ".spec.requester"),
            PrinterColumn("Cluster", ".status.clusterName"),
            PrinterColumn("Queue", ".status.queuePosition", "integer", priority=1),
            PrinterColumn("Expires", ".status.expiresAt"),
            AGE,
            # Read by the retention sweep as a Table (lessor.operator.cluster.lease_retention):
            # strings, since a `date` column is served as an age ("5m"), not as the time.
            PrinterColumn("Ended", ".status.endedAt", priority=1),
            PrinterColumn("Deleting", ".metadata.deletionTimestamp", priority=1),
        ),
        selectable_fields=(".status.phase",),
    )

    def effective_ttl(self) -> str:
        """The TTL the lease's expiry counts from, one rule for the operator that enforces the
        expiry and the API that answers it: what the operator recorded when it bound the lease
        (the spec's, else the pool's), else the spec's, else a pool's default."""
        recorded = self.status.effective_ttl if self.status is not None else None
        return recorded or self.spec.ttl or DEFAULT_POOL_TTL
