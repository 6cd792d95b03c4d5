"""One audit record for every request that changes something, for the reads that hand out
access (a lease's kubeconfig, a diagnostics bundle's pre-signed URL), for every request refused
authentication, and for every attach and port-forward session: who, from which address, what,
which object, and the result.

Kubernetes' own audit log sees every lessor object written by the API server's ServiceAccount,
never the person behind it; this is where "who released lease l-3f2a, and when" is answered.
The records are log lines (lessor.logs) of their own logger, `lessor.audit`, so that a log
pipeline routes them apart (to longer retention) by that one field; `audit=true` marks them
too. They never carry a credential, a body or a session token: the object is an id.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

log = logging.getLogger("lessor.audit")
NAME_LOGGED = 253  # a Kubernetes object name's longest

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


# (method, route template): reads audited when their answer hands out access, named by what
# it handed out. A kubeconfig is in a lease's answer only once it is Bound, so polls before
# that are not records; refusals of these reads are (someone asked for what is not theirs).
READS: dict[tuple[str, str], tuple[str, str]] = {
    ("GET", "/v1/leases/{lease_id}"): ("kubeconfig.read", "kubeconfig"),
    ("GET", "/v1/leases/{lease_id}/diagnostics"): ("diagnostics.read", "url"),
}


class Caller(Protocol):
    """Who made a request, as a record names them: an authenticated principal
    (lessor.apiserver.auth.authenticator), which this bottom layer does not import."""

    @property
    def owner(self) -> str: ...

    @property
    def method(self) -> str: ...


def action_of(method: str, route: str, status: int, answer: object) -> str | None:
    """The audit action of a request, None for one that is not audited."""
    if status == 401:
        return "authenticate"  # a credential refused: worth seeing who keeps trying
    action = ACTIONS.get((method, route))
    if action is not None:
        return action
    read = READS.get((method, route))
    if read is None:
        return None
    name, handed_out = read
    if status >= 400:
        return name
    return name if isinstance(answer, dict) and answer.get(handed_out) else None


def outcome(status: int) -> str:
    return "allowed" if status < 400 else "refused" if status < 500 else "failed"


def of_request(
    action: str,
    *,
    caller: Caller | None,
    status: int,
    params: dict[str, Any],
    answer: object,
    request_id: str,
    client: str | None = None,
    session_id: str | None = None,
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
        client=client,
        **({"session_id": session_id} if session_id else {}),
    )


def record(
    action: str,
    *,
    caller: Caller | None,  # None: not authenticated
    status: int | None,
    lease: str | None = None,
    execution: str | None = None,
    request_id: str | None = None,
    client: str | None = None,
    **detail: Any,
) -> None:
    """`status`: the HTTP status answered, or None for what has no single answer (a session's
    end: its `reason` says how it ended)."""
    who = caller.owner if caller is not None else None
    lease, execution = _bounded(lease), _bounded(execution)  # a refused read's are a client's
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
            "client": client,
            **detail,
        },
    )


def _bounded(name: str | None) -> str | None:
    """An object's name as recorded: a route's id is the client's bytes (a refused read of
    `/v1/leases/<8 KiB>` is audited), so it is cut where no object's name reaches."""
    return name if name is None or len(name) <= NAME_LOGGED else name[:NAME_LOGGED] + "..."
