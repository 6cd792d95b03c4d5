"""Every lessor resource kind, in one list: what the CRDs are generated from."""

from __future__ import annotations

from typing import Any

from lessor.resources.access_policy import AccessPolicy
from lessor.resources.base import Resource
from lessor.resources.cluster import ClusterInstance, ClusterLease, ClusterPool
from lessor.resources.diagnostics_bundle import DiagnosticsBundle
from lessor.resources.sandbox import SandboxExecution, SandboxLease, SandboxPool

RESOURCES: tuple[type[Resource[Any, Any]], ...] = (
    AccessPolicy,
    ClusterPool,
    ClusterInstance,
    ClusterLease,
    DiagnosticsBundle,
    SandboxPool,
    SandboxLease,
    SandboxExecution,
)
