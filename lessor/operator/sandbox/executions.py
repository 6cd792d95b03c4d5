"""The SandboxExecution reconciler: owns each execution's status (spec 3.3).

An execution without a terminal state is brought to the runner in its sandbox pod: `start`
(idempotent in the runner, which reserves the id with an atomic mkdir, so this is safe whether
or not the API already started it) with the argv and cwd of the execution's Secret, checked
against its `spec.commandDigest`, `cancel` once `spec.cancelRequested` is set, and `status`
while it runs; the runner's answer becomes the status. When the runner can no longer be reached
because the lease has left Ready (its sandbox is being removed), an execution that was not
recorded as finished becomes Unknown: it may have run, and must not be rerun blindly.

An ended execution's command Secret is deleted, just before the status that says it ended is
written: nothing reads it any more (the runner has the command, and the API compares keyed
retries with the execution's digest), and a tenant's argv does not stay in etcd for the
lease's lifetime and retention.
"""

from __future__ import annotations

import asyncio
import datetime
import logging

from kubernetes import client as kubernetes

from lessor.operator.core.kinds import EXECUTIONS, SANDBOX_LEASES, SECRETS
from lessor.operator.core.typed import Cached
from lessor.operator.core.writes import delete_present, write_status
from lessor.operator.runtime.client import KubeClient, NotFoundError
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.wiring.context import Context
from lessor.protocol.durations import parse_duration
from lessor.protocol.json_object import Json
from lessor.protocol.phases import EXECUTION_FINISHED
from lessor.protocol.timestamps import utcnow
from lessor.resources.sandbox import (
    ExecutionCommand,
    SandboxExecution,
    SandboxExecutionSpec,
    SandboxExecutionStatus,
    SandboxLease,
    command_secret_name,
)
from lessor.runner.client import Runner, RunnerAnswer, RunnerError, call_runner, configuration

log = logging.getLogger(__name__)

POLL_SECONDS, MAX_POLL_SECONDS = 0.25, 5.0
RETRY_SECONDS = 2.0
START_WINDOW = datetime.timedelta(seconds=60)


def _poll_interval(started_at: datetime.datetime | None) -> float:
    """Quick for short commands, and a tenth of the age for long ones (at most 5 s): a command
    that has run ten minutes is not asked about four times a second."""
    if started_at is None:
        return POLL_SECONDS
    age = (utcnow() - started_at).total_seconds()
    return min(MAX_POLL_SECONDS, max(POLL_SECONDS, age / 10))


def _start_overdue(execution: SandboxExecution, status: SandboxExecutionStatus) -> str | None:
    """The start window, once a never-started execution has outlived it: its own timeout, at
    most START_WINDOW (a command that cannot start within its timeout could not have ended in
    time either)."""
    if status.state not in (None, "Queued"):
        return None
    window = min(START_WINDOW, parse_duration(execution.spec.timeout))
    created = execution.metadata.creation_timestamp
    if created is None or utcnow() - created < window:
        return None
    return f"{window.total_seconds():g}s"


def setup(context: Context) -> Controller:
    """An execution is reconciled when it changes; while it runs, by its own requeues."""
    executions = context.cache(SandboxExecution)
    reconciler = ExecutionReconciler(
        context.client, exec_settings=configuration(context.settings.kubeconfig)
    )
    return context.controller(SandboxExecution).for_(executions, reconciler.reconcile)


class ExecutionReconciler:
    def __init__(
        self,
        client: KubeClient,
        *,
        exec_settings: kubernetes.Configuration,
    ) -> None:
        self.client = client
        # The runner is called with the client the API server uses too (lessor.runner.client:
        # bounded, validated), in a thread, with the kubernetes client's configuration.
        self.exec_settings = exec_settings

    async def reconcile(self, key: str, cached: Cached[SandboxExecution] | None) -> Result:
        if cached is None or cached.deleting:
            return Result()
        obj, execution = cached.raw, cached.model
        status = (execution.status or SandboxExecutionStatus()).model_copy(deep=True)
        if status.state in EXECUTION_FINISHED:
            return Result()
        request: Json = {"op": "status"}
        refused = None  # why it must not start, if it must not
        if execution.spec.cancel_requested:
            request = {"op": "cancel"}  # never started: the runner knows none, and none starts
        elif status.state in (None, "Queued"):
            request, refused = await self._start(obj, execution.spec)
        try:
            answer = await self._call(obj, request)
        except RunnerError as error:
            return await self._unreachable(obj, execution, status, str(error))
        if not answer.state:
            if request["op"] == "cancel":
                answer = RunnerAnswer(state="Cancelled", message="cancelled before it started")
            elif refused is not None:
                answer = RunnerAnswer(state="Failed", message=refused)
            else:
                return await self._unreachable(obj, execution, status, str(answer.error))
        answered = SandboxExecutionStatus.model_validate(answer.status_fields())
        # The runner's answer, field by field as the runner set them: each one validated again
        # by assignment, so what the sandbox sent is checked once more on its way in.
        status = status.model_copy(deep=True)
        for name in answered.model_fields_set:
            setattr(status, name, getattr(answered, name))
        await self._record(obj, status)
        if status.state in EXECUTION_FINISHED:
            return Result()
        return Result(requeue_after=_poll_interval(status.started_at))

    async def _start(self, obj: Json, spec: SandboxExecutionSpec) -> tuple[Json, str | None]:
        """`start` with the argv and cwd of the execution's Secret once they have its
        commandDigest. Without such a Secret (deleted, or changed since) nothing is started:
        `status` then asks whether the API started it (with the caller's request, checked
        against the same digest), and the reason is what it fails with if the runner knows none.
        """
        name = command_secret_name(obj["metadata"]["name"])
        try:
            secret = await self.client.get(SECRETS.path(obj["metadata"]["namespace"], name))
            command = ExecutionCommand.from_secret(secret.get("data"), spec.command_digest)
        except NotFoundError:
            return {"op": "status"}, f"not started: its command Secret {name} does not exist"
        except ValueError:
            return {"op": "status"}, (
                f"not started: its command Secret {name} does not hold the command it was"
                " reserved with (spec.commandDigest)"
            )
        start = {"op": "start", "argv": command.command, "cwd": command.cwd}
        return {**start, "timeout": parse_duration(spec.timeout).total_seconds()}, None

    async def _record(self, obj: Json, status: SandboxExecutionStatus) -> None:
        """Write the status; for an ended execution, delete its command Secret first (read
        first, then deleted with its uid as precondition; gone already is fine). In that order a
        crash between the two leaves an execution that is not recorded as ended and has no
        Secret: the next pass asks the runner (`_start` then asks for the status only), which
        knows the outcome, and records it. Once recorded as ended, no pass reads the Secret."""
        if status.state in EXECUTION_FINISHED:
            name = command_secret_name(obj["metadata"]["name"])
            await delete_present(self.client, SECRETS.path(obj["metadata"]["namespace"], name))
        await write_status(self.client, EXECUTIONS, obj, status)

    async def _call(self, obj: Json, request: Json) -> RunnerAnswer:
        request = {"id": obj["metadata"]["name"], **request}
        return await asyncio.to_thread(call_runner, self.exec_settings, Runner.of(obj), request)

    async def _unreachable(
        self,
        obj: Json,
        execution: SandboxExecution,
        status: SandboxExecutionStatus,
        why: str,
    ) -> Result:
        """Retry while the lease is Ready (a passing fault), except for an execution that has
        not been seen starting within its start window (a wrong runner path, a sandbox without
        python3); otherwise the outcome is lost. Either way it becomes Unknown, never Failed:
        an attempt that did not answer may still have started the command."""
        lease_ref = execution.spec.lease
        try:
            lease = SandboxLease.model_validate(
                await self.client.get(
                    SANDBOX_LEASES.path(obj["metadata"]["namespace"], lease_ref.name)
                )
            )
            ready = (
                lease.metadata.uid == lease_ref.uid
                and lease.status is not None
                and lease.status.phase == SandboxLease.phases.usable
            )
        except NotFoundError:
            ready = False
        waited = _start_overdue(execution, status)
        if ready and waited is None:
            log.info("runner for %s not reachable, retrying: %s", obj["metadata"]["name"], why)
            return Result(requeue_after=RETRY_SECONDS)
        if ready:
            message = f"the runner did not answer for {waited}; the outcome is unknown ({why})"
        else:
            message = f"the sandbox is gone; the outcome is unknown ({why})"
        status.state, status.message = "Unknown", message[:1000]
        await self._record(obj, status)
        return Result()
