"""A new cluster's preparation, one gate per condition: its addons applied (`AddonsApplied`),
named Deployments Available (`DeploymentsAvailable`), named CRDs Established (`CRDsEstablished`).

The instance reconciler asks at each pass until every gate passes, then at each health check
while the cluster is warm (a Deployment that stops being Available makes a warm cluster fail its
check). Addons are applied until they all are, once: server-side apply is idempotent, so a pass
replayed after a crash applies the same objects again and changes nothing. A gate that fails
only for now (a kind a CRD of the same addon has not yet made served, a Deployment still
starting) is asked again; one that fails the same way whatever the wait (YAML that does not
parse, an object the API refuses) fails the start at once, so the pool's backoff applies
without waiting out the start timeout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from lessor.operator.addons.charts import Charts
from lessor.operator.addons.cluster_api import ClusterApi, ClusterApiError
from lessor.operator.addons.manifests import Manifest, ManifestError, describe, parse, text_of
from lessor.operator.backends.cluster_http import KubeconfigError
from lessor.operator.runtime.client import KubeClient
from lessor.resources.addons import (
    ADDONS_APPLIED,
    CRDS_ESTABLISHED,
    DEPLOYMENTS_AVAILABLE,
    Addon,
    GateType,
    ReadinessGates,
)
from lessor.resources.cluster import ClusterInstanceSpec

# The API refuses these the same way at every try: the manifest must change.
REFUSALS = (httpx.codes.BAD_REQUEST, httpx.codes.FORBIDDEN, httpx.codes.UNPROCESSABLE_ENTITY)


@dataclass(frozen=True)
class Gate:
    type: GateType
    passed: bool
    reason: str
    message: str
    # Fails again however long one waits: the start has failed.
    lasting: bool = False


def _condition_true(obj: dict[str, Any], kind: str) -> bool:
    conditions = obj.get("status", {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


class Preparation:
    def __init__(self, client: KubeClient, namespace: str, charts: Charts) -> None:
        self.client = client
        # Where addons' ConfigMaps are read: the operator's namespace.
        self.namespace = namespace
        self.charts = charts

    async def gates(
        self, kubeconfig: str, spec: ClusterInstanceSpec, *, applied: bool
    ) -> list[Gate]:
        """Every gate of the instance, in order. `applied`: its addons were applied at an
        earlier pass (never applied twice once they all were)."""
        wanted = _gate_types(spec)
        try:
            api = ClusterApi(kubeconfig)
        except KubeconfigError as error:
            return [Gate(kind, False, "Unreachable", str(error)) for kind in wanted]
        try:
            found: list[Gate] = []
            if spec.addons:
                if applied:
                    found.append(Gate(ADDONS_APPLIED, True, "Applied", _applied(spec.addons)))
                else:
                    found.append(await self._apply(api, spec.addons))
            rest = [kind for kind in wanted if kind != ADDONS_APPLIED]
            if found and not found[0].passed:
                return found + [
                    Gate(kind, False, "AddonsPending", "waiting for the addons") for kind in rest
                ]
            gates = spec.readiness_gates or ReadinessGates()
            if gates.deployments_available:
                found.append(await _deployments(api, gates.deployments_available))
            if gates.crds_established:
                found.append(await _crds(api, gates.crds_established))
            return found
        finally:
            await api.close()

    async def _apply(self, api: ClusterApi, addons: list[Addon]) -> Gate:
        for addon in addons:
            try:
                objects, namespace = await self._objects(addon)
            except ManifestError as error:
                if addon.chart is not None:
                    reason = "ChartFailed"
                else:
                    reason = "ManifestInvalid" if error.lasting else "ManifestMissing"
                return Gate(
                    ADDONS_APPLIED, False, reason, f"addon {addon.name}: {error}", error.lasting
                )
            for manifest in objects:
                try:
                    await api.apply(manifest, namespace)
                except ClusterApiError as error:
                    refused = error.status in REFUSALS
                    return Gate(
                        ADDONS_APPLIED,
                        False,
                        "ApplyRefused" if refused else "ApplyFailed",
                        f"addon {addon.name}: {describe(manifest)}: {error}",
                        refused,
                    )
        return Gate(ADDONS_APPLIED, True, "Applied", _applied(addons))

    async def _objects(self, addon: Addon) -> tuple[list[Manifest], str | None]:
        """The addon's objects, in order, and the namespace of those that name none."""
        chart = addon.chart
        if chart is None:
            return parse(await text_of(addon, self.client, self.namespace)), None
        text = await self.charts.render(chart.release_name or addon.name, chart)
        objects = parse(text)
        if chart.namespace != "default":
            # `helm install --create-namespace`: the release's namespace, first.
            release = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": chart.namespace},
            }
            objects.insert(0, release)
        return objects, chart.namespace


def _gate_types(spec: ClusterInstanceSpec) -> list[GateType]:
    kinds: list[GateType] = [ADDONS_APPLIED] if spec.addons else []
    gates = spec.readiness_gates or ReadinessGates()
    if gates.deployments_available:
        kinds.append(DEPLOYMENTS_AVAILABLE)
    if gates.crds_established:
        kinds.append(CRDS_ESTABLISHED)
    return kinds


def _applied(addons: list[Addon]) -> str:
    return "applied: " + ", ".join(addon.name for addon in addons)


async def _deployments(api: ClusterApi, names: list[str]) -> Gate:
    waiting = []
    for name in names:
        namespace, deployment = name.split("/", 1)
        try:
            found = await api.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}")
        except ClusterApiError as error:
            return Gate(DEPLOYMENTS_AVAILABLE, False, "CheckFailed", f"{name}: {error}")
        if found is None:
            waiting.append(f"{name} (not found)")
            continue
        status = found.get("status", {})
        current = status.get("observedGeneration", 0) >= found["metadata"].get("generation", 0)
        if not (current and _condition_true(found, "Available")):
            available = status.get("availableReplicas", 0)
            wanted = found.get("spec", {}).get("replicas", 1)
            waiting.append(f"{name} ({available} of {wanted} available)")
    if waiting:
        message = "not available: " + ", ".join(waiting)
        return Gate(DEPLOYMENTS_AVAILABLE, False, "NotAvailable", message)
    return Gate(DEPLOYMENTS_AVAILABLE, True, "Available", f"available: {', '.join(names)}")


async def _crds(api: ClusterApi, names: list[str]) -> Gate:
    waiting = []
    for name in names:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        try:
            found = await api.get(path)
        except ClusterApiError as error:
            return Gate(CRDS_ESTABLISHED, False, "CheckFailed", f"{name}: {error}")
        if found is None:
            waiting.append(f"{name} (not found)")
        elif not _condition_true(found, "Established"):
            waiting.append(name)
    if waiting:
        message = "not established: " + ", ".join(waiting)
        return Gate(CRDS_ESTABLISHED, False, "NotEstablished", message)
    return Gate(CRDS_ESTABLISHED, True, "Established", f"established: {', '.join(names)}")
