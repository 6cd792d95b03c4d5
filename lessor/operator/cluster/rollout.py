"""How many clusters a pool creates and which warm ones it retires in one pass, so that a change
of the pool's template (its `backend`) reaches every warm cluster without a lease ever finding
fewer warm clusters than before the change, and a lowered target removes idle warm clusters
(issue 23). Never a leased one, never one while leases wait.

A cluster's template is the `backend`, `addons` and `readinessGates` copied into its spec when it
was made; a warm cluster whose copy differs from the pool's (after both are read through the
model, so defaults count) is outdated. A leased one keeps its template until its lease ends: a
tenant's cluster never changes under it.

The roll is a surge, as a Deployment's: up to `policy.maxSurge` clusters of the new template are
made beyond `warmTarget`, and an outdated warm cluster is retired only once a new one is *ready*
to take its place, and never while leases wait (they bind the outdated ones first: waiting for a
new one would be slower). Where `maxInstances` leaves no room to surge, one outdated cluster is
retired first (with no lease waiting and nothing new starting): one cluster less for a moment is
the only way through a full pool.

Every decision is recomputed from the cache at each pass, so a pass replayed after a crash (or by
the next leader) decides the same, and a retirement is fenced by the cluster's resourceVersion,
so a cluster claimed by a lease since it was read is never retired.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from lessor.operator.core.typed import Cached
from lessor.protocol.json_object import Json
from lessor.resources.cluster import ClusterInstance, ClusterInstanceSpec, ClusterPoolSpec


def template(spec: ClusterPoolSpec | ClusterInstanceSpec) -> Json:
    """A template as it is compared: the models' dump, defaults written out. Without addons and
    gates it is the backend's dump alone, as it was before there were any, so that upgrading
    lessor changes no pool's hash and rolls no warm cluster."""
    backend: Json = spec.backend.model_dump(mode="json", by_alias=True, exclude_none=True)
    if not spec.addons and spec.readiness_gates is None:
        return backend
    return {
        "backend": backend,
        "addons": [addon.model_dump(mode="json", exclude_none=True) for addon in spec.addons],
        "readinessGates": spec.readiness_gates.model_dump(mode="json")
        if spec.readiness_gates
        else None,
    }


def template_hash(spec: ClusterPoolSpec) -> str:
    """A short digest of the template, shown in the pool's status to say which is current."""
    canonical = json.dumps(template(spec), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:10]


def outdated(instance: ClusterInstance, current: Json) -> bool:
    """Whether a cluster was made from another template than `current` (template(...))."""
    return template(instance.spec) != current


@dataclass
class Plan:
    create: int = 0
    retire: list[Cached[ClusterInstance]] = field(default_factory=list)
    outdated: int = 0
    """Unleased clusters of an older template, still to be replaced."""


def _unleased(instance: Cached[ClusterInstance]) -> bool:
    return instance.model.spec.claim_ref is None and not instance.deleting


def plan(
    spec: ClusterPoolSpec,
    instances: list[Cached[ClusterInstance]],
    *,
    expected: int,
    occupied: int,
    waiting: int,
    warm: int,
    can_create: bool = True,
) -> Plan:
    """The pass's decisions. `instances`: the pool's, from the cache; `expected`: clusters
    created and not yet in the cache (of the current template); `occupied`: every cluster that
    counts against maxInstances (all of them, expected ones included); `waiting`: leases in the
    pool's queue; `warm`: the warm clusters to keep (warmTarget, or the autoscaler's target);
    `can_create`: false while the backend is unavailable or new clusters fail to start (then
    nothing is retired that could not be replaced)."""
    current = template(spec)
    ready_new: list[Cached[ClusterInstance]] = []
    ready_old: list[Cached[ClusterInstance]] = []
    starting_new = expected
    starting_old: list[Cached[ClusterInstance]] = []
    for instance in instances:
        phase = instance.model.status.phase if instance.model.status else None
        if not _unleased(instance) or phase not in ClusterInstance.phases.retirable:
            continue
        old = outdated(instance.model, current)
        if phase == "Ready":
            (ready_old if old else ready_new).append(instance)
        elif old:
            starting_old.append(instance)
        else:
            starting_new += 1
    new = len(ready_new) + starting_new
    old_count = len(ready_old) + len(starting_old)
    result = Plan(outdated=old_count)
    create = min(warm - new, warm + spec.policy.max_surge - new - old_count)
    create = min(create, spec.max_instances - occupied)
    result.create = max(0, create) if can_create else 0
    if waiting:
        return result
    # Beyond the target, outdated clusters go first (the unready first), then the newest new
    # ones: a target lowered (by hand or by the autoscaler) is a scale-down.
    spare = len(ready_new) - warm + old_count
    newest_first = sorted(ready_new, key=_created, reverse=True)
    if spare > 0:
        result.retire = [*starting_old, *ready_old, *newest_first][:spare]
    elif old_count and can_create and result.create == 0 and new < warm and starting_new == 0:
        result.retire = [*starting_old, *ready_old][:1]  # no room to surge: one goes first
    return result


def _created(instance: Cached[ClusterInstance]) -> str:
    created: str = instance.raw["metadata"].get("creationTimestamp", "")
    return created
