"""One audit record for every request that changes something, and for every attach and
port-forward session: who, what, which object, and the result.

Kubernetes' own audit log sees every lessor object written by the API server's ServiceAccount,
never the person behind it; this is where "who released lease l-3f2a, and when" is answered.
The records are log lines (lessor.logs) of their own logger, `lessor.audit`, so that a log
pipeline routes them apart (to longer retention) by that one field; `audit=true` marks them
too. They never carry a credential, a body or a session token: the object is an id.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lessor.apiserver.auth.authenticator import Principal

log = logging.getLogger("lessor.audit")

_SANDBOX = "/v1/sandbox-leases/{lease_id}"
_EXECUTION = _SANDBOX + "/executions/{execution}"

# (method, route template): the action's name. Every route that changes state is here (a unit
# test holds every POST, PATCH and DELETE of the route table to it).
ACTIONS: dict[tuple[str, str], str] = {
    ("POST", "/v1/leases"): "lease.create",
    ("PATCH", "/v1/leases/{lease_id}"): "lease.extend",
    ("DELETE", "/v1/leases/{lease_id}"): "lease.release",
    ("POST", "/v1/sandbox-leases"): "sandbox_lease.create",
    ("PATCH", _SANDBOX): "sandbox_lease.extend",
    ("DELETE", _SANDBOX): "sandbox_lease.release",
    ("POST", _SANDBOX + "/executions"): "execution.create",
    ("DELETE", _EXECUTION): "execution.cancel",
    ("POST", "/v1/login"): "login",
    ("DELETE", "/v1/login"): "logout",
}


def outcome(status: int) -> str:
    return "allowed" if status < 400 else "refused" if status < 500 else "failed"


def of_request(
    action: str,
    *,
    caller: Principal | None,
    status: int,
    params: dict[str, Any],
    answer: object,
    request_id: str,
) -> None:
    """The record of a request: the object is the route's (`lease_id`, `execution`), or, for a
    create that succeeded, the one its answer names (only its `id` is read from the answer)."""
    lease, execution = params.get("lease_id"), params.get("execution")
    made = answer.get("id") if isinstance(answer, dict) and status < 300 else None
    if made and action == "execution.create":
        execution = made
    elif made and action.endswith(".create"):
        lease = made
    record(
        action,
        caller=caller,
        status=status,
        lease=lease,
        execution=execution,
        request_id=request_id,
    )


def record(
    action: str,
    *,
    caller: Principal | None,  # None: not authenticated
    status: int | None,
    lease: str | None = None,
    execution: str | None = None,
    request_id: str | None = None,
    **detail: Any,
) -> None:
    """`status`: the HTTP status answered, or None for what has no single answer (a session's
    end: its `reason` says how it ended)."""
    who = caller.owner if caller is not None else None
    target = "/".join(part for part in (lease, execution) if part)
    log.info(
        "%s %s by %s: %s",
        action,
        target or "-",
        who or "an unauthenticated caller",
        status if status is not None else detail.get("reason", "-"),
        extra={
            "audit": True,
            "action": action,
            "identity": who,
            "auth": caller.method if caller is not None else None,
            "lease": lease,
            "execution": execution,
            "status": status,
            "outcome": outcome(status) if status is not None else None,
            "request_id": request_id,
            **detail,
        },
    )
