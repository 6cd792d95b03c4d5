"""The `Ready` condition and `observedGeneration` of every lessor object, derived from the status
the reconciler decided, at the one place every status is written (lessor.operator.core.writes).

Tools that know nothing of lessor read these two: `kubectl wait --for=condition=Ready`, Argo CD's
and Flux's health checks (kstatus: an object whose observedGeneration trails its generation is
still in progress, then Ready says whether it got there). Deriving them here, from the phase the
status already carries, means no reconciler can write a phase and forget its condition, and a new
status written for any reason carries the generation it was computed from.

What Ready means per kind (docs/operations.md, "Conditions"):
- ClusterLease: Bound. SandboxLease: Ready. The reason is the phase.
- ClusterInstance: Ready or Leased (a cluster that answers).
- ClusterPool and SandboxPool: Healthy; a ClusterPool also says `Warm` (its target of ready
  clusters: warmTarget, or the autoscaler's), which `kubectl wait` can wait on after a pool is
  created. Neither counts among a pool's problems (lessor.resources.base.problems).
- SandboxExecution: Running or Succeeded, plus `Finished` once it has an outcome (Job-like:
  `kubectl wait --for=condition=Finished` waits for the end, whatever it is).
- AccessPolicy: valid (lessor.operator.tenancy.access_policies decides and writes it itself).
- DiagnosticsBundle: none (a record written whole, with no state of its own).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, TypeVar

from lessor.operator.core.conditions import with_condition
from lessor.protocol.json_object import Json
from lessor.protocol.phases import EXECUTION_FINISHED
from lessor.resources.base import FINISHED, READY, WARM, StatusModel, problems
from lessor.resources.cluster import (
    ClusterInstance,
    ClusterInstanceStatus,
    ClusterLease,
    ClusterLeaseStatus,
    ClusterPoolStatus,
)
from lessor.resources.sandbox import (
    SandboxExecutionStatus,
    SandboxLease,
    SandboxLeaseStatus,
    SandboxPoolStatus,
)

S = TypeVar("S", bound=StatusModel)


@dataclass(frozen=True)
class Verdict:
    kind: str
    ok: bool
    reason: str
    message: str


def _phase(status: StatusModel, ready: Collection[str | None], message: str) -> Verdict:
    phase = getattr(status, "phase", None) or "Pending"
    return Verdict(READY, phase in ready, phase, message)


def _failing(status: ClusterPoolStatus | SandboxPoolStatus) -> str:
    """Why the pool is not Healthy, as its other conditions say."""
    return "; ".join(problems(status.conditions))


def _cluster_lease(status: ClusterLeaseStatus) -> list[Verdict]:
    message = status.message
    if not message and status.phase == ClusterLease.phases.usable and status.cluster_name:
        message = f"cluster {status.cluster_name} is bound"
    elif not message and status.queue_position:
        message = f"position {status.queue_position} in the pool's queue"
    return [_phase(status, {ClusterLease.phases.usable}, message)]


def _sandbox_lease(status: SandboxLeaseStatus) -> list[Verdict]:
    return [_phase(status, {SandboxLease.phases.usable}, status.message)]


def _instance(status: ClusterInstanceStatus) -> list[Verdict]:
    return [_phase(status, ClusterInstance.phases.serving, status.message)]


def _cluster_pool(status: ClusterPoolStatus) -> list[Verdict]:
    counts = (
        f"{status.ready} ready, {status.leased} leased, {status.creating} creating,"
        f" {status.unhealthy} unhealthy, {status.quarantined} quarantined"
    )
    target = status.target or 0  # the pool reconciler writes it with every status
    warm = status.ready >= target
    return [
        _phase(status, ("Healthy",), _failing(status) or counts),
        Verdict(WARM, warm, "Warm" if warm else "Warming", f"{status.ready} of {target} ready"),
    ]


def _sandbox_pool(status: SandboxPoolStatus) -> list[Verdict]:
    message = _failing(status) or f"{status.ready} ready, {status.leased} leased"
    return [_phase(status, ("Healthy",), message)]


def _execution(status: SandboxExecutionStatus) -> list[Verdict]:
    state = status.state or "Queued"
    finished = state in EXECUTION_FINISHED
    return [
        Verdict(READY, state in ("Running", "Succeeded"), state, status.message),
        Verdict(FINISHED, finished, state if finished else "NotFinished", status.message),
    ]


# Looked up by the status's exact class, so each rule is given the type it is written for.
RULES: dict[type[StatusModel], Callable[[Any], list[Verdict]]] = {
    ClusterLeaseStatus: _cluster_lease,
    SandboxLeaseStatus: _sandbox_lease,
    ClusterInstanceStatus: _instance,
    ClusterPoolStatus: _cluster_pool,
    SandboxPoolStatus: _sandbox_pool,
    SandboxExecutionStatus: _execution,
}


def stamped(obj: Json, status: S) -> S:
    """`status` with observedGeneration set to the generation of `obj` it was decided from, and
    the conditions its kind derives set (a status without a rule, AccessPolicy's, only gets
    observedGeneration: its reconciler sets Ready itself)."""
    generation = obj["metadata"].get("generation")
    stamped = status.model_copy(deep=True)
    if "observed_generation" in type(status).model_fields:
        setattr(stamped, "observed_generation", generation)  # noqa: B010 - not on every status
    rule = RULES.get(type(status))
    if rule is not None:
        conditions = getattr(status, "conditions")  # noqa: B009 - every ruled status has them
        for verdict in rule(status):
            conditions = with_condition(
                conditions,
                verdict.kind,
                verdict.ok,
                verdict.reason,
                verdict.message,
                generation=generation,
            )
        setattr(stamped, "conditions", conditions)  # noqa: B010
    return stamped
