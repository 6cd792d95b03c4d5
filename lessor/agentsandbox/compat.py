"""Is the agent-sandbox installed in this cluster the release lessor is built against?

A read-only check, run at start when `agentSandbox.mode` is `external`: it GETs the four CRDs
and writes nothing (no claim, no probe object). Each must exist, be Established, serve and
store `v1beta1`, and have the schema fields lessor reads and writes. The last field listed for
SandboxWarmPool, `status.observedGeneration`, first appeared in v0.5.6: it is what tells 0.5.6
from 0.5.5 (the only CRD difference between the two releases).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

RELEASE = "v0.5.6"
VERSION = "v1beta1"

# CRD name -> schema paths (dotted, under the v1beta1 openAPIV3Schema) lessor depends on.
FINGERPRINTS: dict[str, tuple[str, ...]] = {
    "sandboxes.agents.x-k8s.io": ("spec.podTemplate.spec", "status.conditions", "status.podIPs"),
    "sandboxtemplates.extensions.agents.x-k8s.io": (
        "spec.podTemplate.spec",
        "spec.networkPolicyManagement",
        "spec.envVarsInjectionPolicy",
    ),
    "sandboxclaims.extensions.agents.x-k8s.io": (
        "spec.warmPoolRef.name",
        "spec.lifecycle.shutdownPolicy",
        "spec.lifecycle.shutdownTime",
        "status.sandbox.name",
        "status.conditions",
    ),
    "sandboxwarmpools.extensions.agents.x-k8s.io": (
        "spec.sandboxTemplateRef.name",
        "spec.replicas",
        "status.readyReplicas",
        "status.observedGeneration",
    ),
}

# Returns the CRD object, or None when it does not exist; raises on other errors.
CrdReader = Callable[[str], dict[str, Any] | None]


@dataclass(frozen=True)
class Compatibility:
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def reason(self) -> str:
        if self.ok:
            return f"agent-sandbox {RELEASE} APIs found"
        return f"agent-sandbox {RELEASE} not usable: " + "; ".join(self.problems)


def _has_path(schema: dict[str, Any], path: str) -> bool:
    node: dict[str, Any] | None = schema
    for part in path.split("."):
        node = (node or {}).get("properties", {}).get(part)
        if node is None:
            return False
    return True


def _problems_of(name: str, crd: dict[str, Any] | None) -> list[str]:
    if crd is None:
        return [f"CRD {name} is not installed"]
    conditions = crd.get("status", {}).get("conditions", [])
    if not any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
        return [f"CRD {name} is not Established"]
    versions = {v.get("name"): v for v in crd.get("spec", {}).get("versions", [])}
    version = versions.get(VERSION)
    if version is None or not version.get("served"):
        return [f"CRD {name} does not serve {VERSION}"]
    problems = [] if version.get("storage") else [f"CRD {name} does not store {VERSION}"]
    schema = version.get("schema", {}).get("openAPIV3Schema", {})
    missing = [path for path in FINGERPRINTS[name] if not _has_path(schema, path)]
    if missing:
        problems.append(f"CRD {name} {VERSION} lacks {', '.join(missing)} (an older release?)")
    return problems


def evaluate(found: dict[str, dict[str, Any] | Exception | None]) -> Compatibility:
    """The verdict on what was read: per CRD name, the object, None (absent) or the error."""
    problems: list[str] = []
    for name in FINGERPRINTS:
        crd = found.get(name)
        if isinstance(crd, Exception):
            problems.append(f"CRD {name} could not be read: {crd}")
        else:
            problems += _problems_of(name, crd)
    return Compatibility(problems)


def check(read: CrdReader) -> Compatibility:
    found: dict[str, dict[str, Any] | Exception | None] = {}
    for name in FINGERPRINTS:
        try:
            found[name] = read(name)
        except Exception as error:  # any failure to read is a reason, logged by the caller
            found[name] = error
    return evaluate(found)
