"""The Falcon resources of Sandbox leases: /v1/sandbox-leases and what is under it.

They exist only with `agentSandbox.mode: external` and while the installed agent-sandbox passes
the compatibility check (spec 1): otherwise every one is a 404, before any credential is looked
at, whose detail says why (as /v1/status does). The verdict is checked again at most once a
minute (lessor.apiserver.sandboxes.gate), so the routes appear once agent-sandbox is fixed,
without a restart.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Protocol

import falcon
from pydantic import Field

from lessor.apiserver.auth.authenticator import Principal
from lessor.apiserver.auth.middleware import principal
from lessor.apiserver.http.answers import responds
from lessor.apiserver.http.bodies import (
    CreateExecution,
    CreateSandboxLease,
    ExtendSandboxLease,
)
from lessor.apiserver.http.errors import HttpNotFoundError, UpgradeRequiredError
from lessor.apiserver.http.queries import Digits, Query
from lessor.apiserver.http.resource import Resource
from lessor.apiserver.http.shedding import set_aside
from lessor.apiserver.sandboxes.executions import ExecutionService
from lessor.apiserver.sandboxes.gate import SandboxGate
from lessor.apiserver.sandboxes.sandbox_leases import SandboxLeaseService
from lessor.apiserver.state.held_requests import HeldRequests, client_gone
from lessor.protocol.responses import (
    Execution,
    ExecutionLogs,
    ExecutionResult,
    SandboxExpiry,
    SandboxLease,
    SandboxLeaseCreated,
    SandboxLogs,
)
from lessor.protocol.sandbox_limits import LOG_TAIL_DEFAULT, LOG_TAIL_MAX

# Where an execution's output may be read from: any byte offset a 64-bit client can name.
MAX_OFFSET = 1 << 40
OFFSET = "0, or the last answer's `nextOffset` of that stream, unchanged."


class SandboxServices(Protocol):
    """What the Sandbox routes use of the process's services."""

    @property
    def sandbox(self) -> SandboxGate: ...

    @property
    def sandbox_leases(self) -> SandboxLeaseService: ...

    @property
    def executions(self) -> ExecutionService: ...

    @property
    def held(self) -> HeldRequests: ...


class SandboxLogsQuery(Query):
    tail_lines: Digits = Field(default=LOG_TAIL_DEFAULT, ge=1, le=LOG_TAIL_MAX, alias="tailLines")
    container: str | None = Field(
        default=None, description="Which container; may be left out when the pod has one."
    )


class ExecutionLogsQuery(Query):
    stdout_offset: Digits = Field(
        default=0, ge=0, le=MAX_OFFSET, alias="stdoutOffset", description=OFFSET
    )
    stderr_offset: Digits = Field(
        default=0, ge=0, le=MAX_OFFSET, alias="stderrOffset", description=OFFSET
    )


class SandboxResource(Resource[SandboxServices]):
    """Every /v1/sandbox-leases path: a 404 where the Sandbox API is not served."""

    def gate(self) -> None:
        verdict = self.services.sandbox.verdict()
        if not verdict.served:
            raise HttpNotFoundError(f"the Sandbox API is not served here: {verdict.reason}")

    def served(self, req: falcon.Request) -> tuple[Principal, SandboxLeaseService]:
        return principal(req), self.services.sandbox_leases


class SandboxLeasesResource(SandboxResource):
    @responds(SandboxLeaseCreated, status=202)
    def on_post(self, req: falcon.Request, resp: falcon.Response, body: CreateSandboxLease) -> None:
        caller, service = self.served(req)
        created = service.create(caller, body)
        resp.media = created
        resp.set_header("Location", f"/v1/sandbox-leases/{created.id}")

    @responds(SandboxLease, many=True)
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        caller, service = self.served(req)
        resp.media = service.list_mine(caller)


class SandboxLeaseResource(SandboxResource):
    @responds(SandboxLease)
    def on_get(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        caller, service = self.served(req)
        resp.media = service.read(caller, lease_id)

    @responds(SandboxExpiry)
    def on_patch(
        self, req: falcon.Request, resp: falcon.Response, lease_id: str, body: ExtendSandboxLease
    ) -> None:
        caller, service = self.served(req)
        resp.media = service.extend(caller, lease_id, body)

    @responds(status=204)
    def on_delete(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        caller, service = self.served(req)
        service.release(caller, lease_id)


class SandboxLogsResource(SandboxResource):
    @responds(SandboxLogs)
    def on_get(
        self, req: falcon.Request, resp: falcon.Response, lease_id: str, query: SandboxLogsQuery
    ) -> None:
        caller, service = self.served(req)
        resp.media = service.logs(caller, lease_id, query.tail_lines, query.container)


class ExecutionsResource(SandboxResource):
    # 200: it ended, with its output; 202: detached, or no outcome yet (routes/openapi.py).
    @responds(ExecutionResult, others={202: Execution})
    def on_post(
        self, req: falcon.Request, resp: falcon.Response, lease_id: str, body: CreateExecution
    ) -> None:
        caller, _ = self.served(req)
        held = self.services.held
        waits = not body.detach
        with held.hold("execution", caller.owner) if waits else nullcontext(False) as may:
            if may:
                set_aside(req)  # held for as long as its command runs, in a bound of its own
            gone = client_gone(req, "execution")
            status, execution = self.services.executions.create(caller, lease_id, body, may, gone)
        resp.status = status
        resp.media = execution
        resp.set_header("Location", f"/v1/sandbox-leases/{lease_id}/executions/{execution.id}")


class ExecutionResource(SandboxResource):
    @responds(Execution)
    def on_get(
        self, req: falcon.Request, resp: falcon.Response, lease_id: str, execution: str
    ) -> None:
        caller, _ = self.served(req)
        resp.media = self.services.executions.read(caller, lease_id, execution)

    @responds(Execution)
    def on_delete(
        self, req: falcon.Request, resp: falcon.Response, lease_id: str, execution: str
    ) -> None:
        caller, _ = self.served(req)
        resp.media = self.services.executions.cancel(caller, lease_id, execution)


class ExecutionLogsResource(SandboxResource):
    @responds(ExecutionLogs)
    def on_get(
        self,
        req: falcon.Request,
        resp: falcon.Response,
        lease_id: str,
        execution: str,
        query: ExecutionLogsQuery,
    ) -> None:
        caller, _ = self.served(req)
        resp.media = self.services.executions.logs(
            caller, lease_id, execution, query.stdout_offset, query.stderr_offset
        )


class SandboxStreamResource(SandboxResource):
    """Attach and port-forward without `Upgrade: websocket` (the upgrade itself never reaches
    Falcon: lessor.apiserver.sandboxes.upgrade): 426 once the caller is known and the API is
    served."""

    @responds(status=101)
    def on_get(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        self.served(req)
        raise UpgradeRequiredError(
            "this endpoint is a WebSocket: send Upgrade: websocket (docs/api.md)",
            headers={"Upgrade": "websocket"},
        )
