"""What a pool puts into each of its clusters before the cluster counts as warm (issue 46): addons
(manifests applied to the new cluster) and readiness gates (what must be true inside it).

A CI job wants a cluster with its dependencies already in it; installing them after leasing costs
the job the minutes the warm pool was meant to save. So a pool says what each new cluster gets,
and a cluster is Ready only once it has it (lessor.operator.addons).

Both are part of the pool's template, like its backend: they are copied into each instance when
it is made, and changing them rolls the pool's warm clusters (lessor.operator.cluster.rollout). A
ConfigMap's content is read when a cluster is made; changing only the content rolls nothing, as
a Deployment's pods are not rolled by a change to a ConfigMap they mount: name the ConfigMap by
version to roll.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import ConfigDict, Field, model_validator

from lessor.resources.base import DNS_LABEL, SpecModel

# Condition types on a ClusterInstance, one per gate (docs/operator.md, "Addons and gates").
GateType = Literal["AddonsApplied", "DeploymentsAvailable", "CRDsEstablished"]
ADDONS_APPLIED: Final = "AddonsApplied"
DEPLOYMENTS_AVAILABLE: Final = "DeploymentsAvailable"
CRDS_ESTABLISHED: Final = "CRDsEstablished"

# Inline manifests are stored in the pool and in each of its instances (etcd's object limit is
# 1.5 MiB): larger sets belong in a ConfigMap, whose own limit (1 MiB) bounds what is read.
INLINE_LIMIT = 128 * 1024
OBJECT_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
NAMESPACED_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
DeploymentName = Annotated[str, Field(min_length=3, max_length=317, pattern=NAMESPACED_NAME)]
CrdName = Annotated[str, Field(min_length=3, max_length=253, pattern=OBJECT_NAME)]


class ConfigMapKeyRef(SpecModel):
    """A key of a ConfigMap in the operator's namespace: an administrator's, like the pool (a
    ConfigMap in the pool's namespace could be written by whoever may write there)."""

    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=OBJECT_NAME,
        description="The ConfigMap's name, in the operator's namespace (lessor-system as shipped).",
    )
    key: str = Field(
        default="manifests.yaml",
        min_length=1,
        max_length=253,
        pattern=r"^[-._a-zA-Z0-9]+$",
        description="The key of its data holding the YAML (default manifests.yaml).",
    )


class Chart(SpecModel):
    """A Helm chart, rendered by the operator (`helm template`) and applied like manifests: not
    a Helm release in the cluster (docs/operator.md, "Preparation", says why)."""

    repository: str = Field(
        min_length=8,
        max_length=1024,
        pattern=r"^(oci|https?)://[^\s]+$",
        description="A chart repository (https://charts.example.com), or an OCI reference"
        " without the version (oci://registry.example.com/charts/widgets). Reached by the"
        " operator without credentials.",
    )
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$",
        description="The chart's name in the repository (not for oci://, whose reference names"
        " it).",
    )
    version: str = Field(
        min_length=1,
        max_length=128,
        pattern=r"^v?[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]*)?$",
        description="The exact version (no range): every cluster of the pool gets the same.",
    )
    namespace: str = Field(
        default="default",
        max_length=63,
        pattern=DNS_LABEL,
        description="The release's namespace (created if missing): where the chart's objects go"
        " unless they name another.",
    )
    release_name: str | None = Field(
        default=None,
        max_length=53,
        pattern=DNS_LABEL,
        description="Helm's release name (default: the addon's name).",
    )
    values: dict[str, Any] = Field(
        default_factory=dict, description="Values, as a values.yaml would give them."
    )


class Addon(SpecModel):
    """One addon: Kubernetes objects applied to each new cluster by server-side apply (field
    manager `lessor`), in the order they are written, after the cluster's API answers."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "[has(self.manifests), has(self.configMapRef), has(self.chart)]"
                    ".filter(x, x).size() == 1",
                    "message": "an addon has one of manifests, configMapRef or chart",
                },
                {
                    "rule": "!has(self.chart) || (self.chart.repository.startsWith('oci://')"
                    " == !has(self.chart.name))",
                    "message": "chart.name is required for a chart repository and refused for"
                    " oci://",
                },
            ]
        }
    )

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=DNS_LABEL,
        description="Names the addon in conditions and Events.",
    )
    manifests: str | None = Field(
        default=None,
        min_length=1,
        max_length=INLINE_LIMIT,
        description="YAML, one or more documents, each a whole object (apiVersion, kind,"
        " metadata.name).",
    )
    config_map_ref: ConfigMapKeyRef | None = Field(
        default=None,
        description="The manifests are this key of a ConfigMap in the operator's namespace,"
        " read when each cluster is made.",
    )
    chart: Chart | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Addon:
        sources = (self.manifests, self.config_map_ref, self.chart)
        if sum(source is not None for source in sources) != 1:
            raise ValueError("an addon has one of manifests, configMapRef or chart")
        if self.chart is not None and (
            self.chart.repository.startswith("oci://") == (self.chart.name is not None)
        ):
            raise ValueError("chart.name is required for a chart repository and refused for oci://")
        return self


class ReadinessGates(SpecModel):
    """What must be true inside a new cluster before it is Ready, besides its addons applied
    (the gate AddonsApplied, implied by any addon). A gate that does not pass within the
    operator's start timeout fails the start, naming the gate."""

    deployments_available: list[DeploymentName] = Field(
        default_factory=list,
        max_length=50,
        description="Deployments, as namespace/name, that must be Available at their current"
        " generation.",
    )
    crds_established: list[CrdName] = Field(
        default_factory=list,
        max_length=100,
        description="CustomResourceDefinitions, by name (plural.group), that must be Established.",
    )


def unique_names(addons: list[Addon]) -> list[Addon]:
    """Addons are named in conditions and Events: two of one name could not be told apart."""
    names = [addon.name for addon in addons]
    if len(set(names)) != len(names):
        raise ValueError("addon names must be unique")
    return addons
