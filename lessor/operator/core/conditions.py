"""Status conditions in the shape of metav1.Condition, written the way Kubernetes controllers do:
a condition's lastTransitionTime moves only when its status does, so it says since when the
condition has held (how long a cluster has been failing its health checks, for one)."""

from __future__ import annotations

from typing import Literal

from lessor.protocol.timestamps import now_seconds
from lessor.resources.base import Condition

MESSAGE_LIMIT = 1000


def find(conditions: list[Condition], kind: str) -> Condition | None:
    return next((c for c in conditions if c.type == kind), None)


def is_false(conditions: list[Condition], kind: str) -> bool:
    found = find(conditions, kind)
    return found is not None and found.status == "False"


def with_condition(
    conditions: list[Condition],
    kind: str,
    ok: bool,
    reason: str,
    message: str,
    *,
    generation: int | None = None,
) -> list[Condition]:
    """`conditions` with the one of type `kind` set; the others kept in their order."""
    previous = find(conditions, kind)
    status: Literal["True", "False"] = "True" if ok else "False"
    if previous is None or previous.status != status:
        transition = now_seconds()
    else:
        transition = previous.last_transition_time
    updated = Condition(
        type=kind,
        status=status,
        reason=reason,
        message=message[:MESSAGE_LIMIT],
        last_transition_time=transition,
        observed_generation=generation,
    )
    if previous is None:
        return [*conditions, updated]
    return [updated if c.type == kind else c for c in conditions]
