"""/v1/sandbox-leases/:id/executions (spec 4.5, 3.3): reserve, start, wait, read, cancel.

A POST that makes a new execution first spends a token of the caller's execution bucket (each
one stores objects in etcd), then reserves: one more unit of the lease's per-lifetime budget
and the command's bytes of the lease's command bytes (one fenced write of both, so replicas
cannot overspend either), then a Secret holding the argv and cwd (never the SandboxExecution:
see ExecutionCommand), then a SandboxExecution whose name is a digest of the exact lease
instance (uid) and the idempotency key, created atomically. Only then is the runner asked to
start it, and the runner itself reserves again with an atomic mkdir of the execution's id, so
neither a keyed retry, nor two replicas, nor the operator's replay can run a command twice. The
operator (lessor.operator.sandbox.executions) starts any reserved execution the API did not get to,
owns the execution's status, and deletes the command Secret once the execution has ended; the
API answers from the runner directly where it must answer at once (wait mode, logs windows,
cancel), and never reads the Secret of an execution that exists.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import time
from collections.abc import Callable

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lessor.apiserver.auth.authenticator import Principal
from lessor.apiserver.http import metrics
from lessor.apiserver.http.bodies import CreateExecution
from lessor.apiserver.http.errors import (
    BadRequestError,
    HttpConflictError,
    HttpNotFoundError,
    NotImplementedYetError,
    TooManyRequestsError,
    UnavailableError,
)
from lessor.apiserver.leases.cluster_leases import OBJECT_NAME, requester_label
from lessor.apiserver.sandboxes.sandbox_leases import SandboxLeaseService, live_pod, placed_pod
from lessor.apiserver.state.admission_limit import AdmissionLimiter
from lessor.apiserver.state.fencing import FenceConflictError, fenced_patch
from lessor.apiserver.state.kube import TIMEOUT, Kube
from lessor.protocol.backoff import Backoff
from lessor.protocol.durations import format_duration, parse_duration
from lessor.protocol.json_object import Json
from lessor.protocol.phases import EXECUTION_FINISHED
from lessor.protocol.responses import (
    Execution,
    ExecutionLogs,
    ExecutionResult,
    ExecutionWindow,
    serialized,
)
from lessor.protocol.runner import OUTPUT_CAP
from lessor.protocol.sandbox_limits import DEFAULT_TIMEOUT, MAX_TIMEOUT
from lessor.protocol.timestamps import utcnow
from lessor.resources import labels
from lessor.resources.base import ObjectMeta, ObjectRef, instant_json, json_pointer
from lessor.resources.sandbox import (
    ExecutionCommand,
    SandboxExecution,
    SandboxExecutionSpec,
    SandboxExecutionStatus,
    SandboxLease,
    SandboxPool,
    command_secret_name,
)
from lessor.resources.sandbox import Runner as RunnerSpec
from lessor.runner.client import Runner, RunnerAnswer, RunnerError, Window, call_runner

# Executions of one lease that may be running at once: the operator asks the runner about each
# running one every 0.25-5 s through pods/exec (review N6), so this bounds what one lease costs
# it and kube-apiserver. Counted when a new one is admitted, from kube-apiserver's cache:
# creates racing on several replicas can pass it by their number, never by more.
MAX_RUNNING_PER_LEASE = 16
# The bytes of command and cwd a SandboxLease's executions have stored (ExecutionCommand's
# stored_bytes), summed, never given back: written with `spec.executionsReserved` in one fenced
# patch. An annotation, not a spec field, so that an API server upgraded before the CRDs still
# counts (a field the installed schema lacks would be pruned, and the cap would never bind).
COMMAND_BYTES_ANNOTATION = "lessor.dev/command-bytes-reserved"
SPEND_ATTEMPTS = 10  # fenced increments of the budget before a 409 conflict_retryable
SPEND_BACKOFF = Backoff(first=0.02, cap=0.2)
WAIT_MARGIN = 15.0  # seconds past the timeout a wait-mode request waits for the outcome
RUNNER_WAIT = 10.0  # seconds the runner holds one status call open while the command runs
RUNNER_CALL = 15.0  # seconds a runner call may take besides that wait


def execution_name(lease_uid: str, key: str) -> str:
    return "x" + hashlib.sha256(f"{lease_uid}\0{key}".encode()).hexdigest()[:24]


def _owned_by(lease: SandboxLease) -> list[Json]:
    """Owner references to the exact lease instance: its executions and their Secrets are
    garbage-collected with it."""
    return [lease.owner_reference()]


def command_bytes_reserved(lease: SandboxLease) -> int:
    """The lease's command bytes so far; none recorded (or an administrator's removal) is 0."""
    value = lease.metadata.annotations.get(COMMAND_BYTES_ANNOTATION, "0")
    return int(value) if value.isascii() and value.isdigit() else 0


def _annotate(lease: SandboxLease, key: str, value: str) -> Json:
    """The JSON-patch operation setting one annotation of `lease` as read (a missing or empty
    map is written whole, with it)."""
    if not lease.metadata.annotations:
        path = json_pointer("metadata", "annotations", model=SandboxLease)
        return {"op": "add", "path": path, "value": {key: value}}
    path = json_pointer("metadata", "annotations", key, model=SandboxLease)
    return {"op": "add", "path": path, "value": value}


def _view(execution: SandboxExecution) -> Execution:
    """An execution as GET shows it: never its output, never its requester."""
    status = execution.status or SandboxExecutionStatus()
    view = Execution(
        id=execution.metadata.name,
        state=status.state or "Queued",
        truncated=status.truncated,
        timeout=execution.spec.timeout,
    )
    if status.exit_code is not None:
        view.exit_code = status.exit_code
    if status.started_at is not None:
        view.started_at = instant_json(status.started_at)
    if status.finished_at is not None:
        view.finished_at = instant_json(status.finished_at)
    if "message" in status.model_fields_set:  # as stored: an empty message is shown empty
        view.message = status.message
    return view


def _merge(view: Execution, answer: RunnerAnswer) -> Execution:
    """The runner's newer word on an execution over what its status last recorded: the view
    as it is answered, with the fields the runner reported (spelt alike) laid over it."""
    if not answer.state:
        return view
    return Execution.model_validate(serialized(view) | answer.status_fields())


def _result(view: Execution, stdout: bytearray, stderr: bytearray) -> ExecutionResult:
    """The execution once it ended, with at most OUTPUT_CAP bytes of each stream."""
    output = {
        "stdout": stdout[:OUTPUT_CAP].decode("utf-8", errors="replace"),
        "stderr": stderr[:OUTPUT_CAP].decode("utf-8", errors="replace"),
    }
    return ExecutionResult.model_validate(serialized(view) | output)


def _window(window: Window | None, truncated: bool) -> ExecutionWindow:
    window = window or Window()
    return ExecutionWindow(
        data=window.raw.decode("utf-8", errors="replace"),
        next_offset=window.next_offset,
        more=window.more,
        truncated=truncated,
    )


class ExecutionService:
    def __init__(
        self,
        kube: Kube,
        leases: SandboxLeaseService,
        limiter: AdmissionLimiter,
        max_command_bytes: int,
    ) -> None:
        self.kube = kube
        self.leases = leases
        self.limiter = limiter
        # Bytes of command and cwd one lease may store over its lifetime (its executions summed).
        self.max_command_bytes = max_command_bytes

    # -- create ----------------------------------------------------------------------------

    def create(
        self,
        principal: Principal,
        lease_name: str,
        request: CreateExecution,
        may_wait: bool = True,
        gone: Callable[[], bool] = lambda: False,
    ) -> tuple[int, Execution]:
        """202 with the execution started when it is detached, or may not wait (the caller's
        share of waits is held: lessor.apiserver.state.held_requests); else 200 with its
        outcome, or 202 when that comes too late or the client hung up (`gone`)."""
        lease = self.leases.owned(principal, lease_name)
        name = execution_name(lease.metadata.uid or "", request.idempotency_key)
        command = ExecutionCommand(command=request.command, cwd=request.cwd)
        existing = self.kube.find_model(SandboxExecution, name)
        if existing is None:
            self._admit(principal)
            existing = self._reserve(principal, lease, name, request, command)
        self._require_same_intent(existing, request, command)
        if request.detach or not may_wait:
            return 202, self._started(existing, command)
        return self._wait(existing, command, gone)

    def _admit(self, principal: Principal) -> None:
        """A token of the caller's bucket for a request that will store objects (a keyed retry
        of an execution that exists stores nothing, and spends nothing); without one, 429 with
        Retry-After, and nothing spent or stored."""
        decision = self.limiter.take(principal.owner)
        if not decision.allowed:
            metrics.EXECUTION_ADMISSION_RATE_LIMITED.inc()
            raise TooManyRequestsError.rate_limited("execution requests", decision.retry_after)

    def _reserve(
        self,
        principal: Principal,
        lease: SandboxLease,
        name: str,
        request: CreateExecution,
        command: ExecutionCommand,
    ) -> SandboxExecution:
        phase = (lease.status.phase if lease.status else None) or "Pending"
        if phase in SandboxLease.phases.ended:
            raise HttpConflictError(f"the lease is {phase}; request a new lease", reason="expired")
        if phase != SandboxLease.phases.usable:
            raise HttpConflictError("the sandbox is not Ready yet", reason="not_ready")
        self._require_a_running_slot(lease)
        pool = self._pool(lease.spec.pool)
        if pool.spec.runner is None:
            raise NotImplementedYetError(
                f"SandboxPool {pool.metadata.name} has no runner, so it runs no executions"
            )
        if request.container is not None and request.container not in pool.spec.containers():
            raise BadRequestError(f"the sandbox has no container {request.container}")
        pod = placed_pod(lease)
        live_pod(self.kube, pod)  # not spent on a pod being replaced: 409, retry
        timeout = self._timeout(request, lease)
        made_meanwhile = self._spend_one(lease, name, command.stored_bytes())
        if made_meanwhile is not None:
            return made_meanwhile
        self._keep_command(lease, name, command)
        lease_name, lease_uid = lease.metadata.name or "", lease.metadata.uid or ""
        execution = SandboxExecution(
            metadata=ObjectMeta(
                name=name,
                labels={
                    labels.REQUESTER: requester_label(principal.owner),
                    labels.SANDBOX_LEASE: lease_name,
                },
                owner_references=_owned_by(lease),
            ),
            spec=SandboxExecutionSpec(
                lease=ObjectRef(name=lease_name, uid=lease_uid),
                pod=pod,
                runner=RunnerSpec(path=pool.spec.runner.path, container=self._container(pool)),
                command_digest=command.digest(),
                timeout=timeout,
                idempotency_key=request.idempotency_key,
                detach=request.detach,
                requester=principal.owner,
                container=request.container,
                requested_timeout=request.timeout,
            ),
        )
        try:
            created = self.kube.create(SandboxExecution.crd.plural, execution.manifest())
        except ApiException as error:
            if error.status != 409:
                raise
            # A request with this key won the name.
            found = self.kube.find_model(SandboxExecution, name)
            if found is None:
                raise HttpConflictError(
                    "the idempotency key is in use", reason="idempotency_conflict"
                ) from error
            return found
        return SandboxExecution.model_validate(created)

    def _require_a_running_slot(self, lease: SandboxLease) -> None:
        """429 `concurrency_limit` (no Retry-After: it clears when one ends, not with time)
        while the lease has MAX_RUNNING_PER_LEASE executions that have not ended."""
        selector = f"{labels.SANDBOX_LEASE}={lease.metadata.name}"
        executions = self.kube.list_models(SandboxExecution, selector, cached=True)
        running = sum(
            1
            for execution in executions
            if (execution.status.state if execution.status else None) not in EXECUTION_FINISHED
        )
        if running >= MAX_RUNNING_PER_LEASE:
            raise TooManyRequestsError(
                f"the lease has {running} executions that have not ended (at most "
                f"{MAX_RUNNING_PER_LEASE} at once); wait for one to end or cancel one",
                reason="concurrency_limit",
            )

    def _keep_command(self, lease: SandboxLease, name: str, command: ExecutionCommand) -> None:
        """The argv and cwd, in a Secret of their own (ExecutionCommand says why), made before
        the execution so that no execution is ever without one, and owned by the lease so that
        it goes with the lease and its executions (a Secret left by a crash before the execution
        was made included). Immutable: nothing rewrites it. One that exists already was made by a
        request with this key, concurrent or interrupted: with the same command this request goes
        on to meet that request's execution; with another, it is 409."""
        secret = client.V1Secret.model_validate(
            {
                "metadata": {
                    "name": command_secret_name(name),
                    "labels": {
                        labels.SANDBOX_LEASE: lease.metadata.name or "",
                        labels.SANDBOX_EXECUTION: name,
                    },
                    "ownerReferences": _owned_by(lease),
                },
                "type": "Opaque",
                "immutable": True,
                "data": command.secret_data(),
            }
        )
        core, namespace = self.kube.core, self.kube.namespace
        try:
            core.create_namespaced_secret(namespace, secret, _request_timeout=TIMEOUT)
            return
        except ApiException as error:
            if error.status != 409:
                raise
        try:
            found = core.read_namespaced_secret(
                command_secret_name(name), namespace, _request_timeout=TIMEOUT
            )
        except ApiException as error:
            if error.status != 404:
                raise
            return  # deleted since, so its execution has ended: the create meets that execution
        try:
            ExecutionCommand.from_secret(found.data, command.digest())
        except ValueError:
            raise HttpConflictError(
                "the idempotency key is in use", reason="idempotency_conflict"
            ) from None

    def _pool(self, name: str) -> SandboxPool:
        """The lease's pool, whose runner a new execution uses. A pool deleted under a Ready
        lease is the administrator's to resolve: 503 `pool_unresolvable`, not a 404 that would
        read as "no such lease"."""
        try:
            return self.leases.pool(name)
        except HttpNotFoundError:
            raise UnavailableError(
                f"SandboxPool {name} of this lease no longer exists, so it runs no executions",
                reason="pool_unresolvable",
            ) from None

    @staticmethod
    def _container(pool: SandboxPool) -> str | None:
        """The runner's container: the pool's choice, else the sandbox's first container (exec
        needs a name when a pod has several)."""
        assert pool.spec.runner is not None
        return pool.spec.runner.container or next(iter(pool.spec.containers()), None)

    @staticmethod
    def _timeout(request: CreateExecution, lease: SandboxLease) -> str:
        timeout = min(
            parse_duration(request.timeout) if request.timeout else DEFAULT_TIMEOUT, MAX_TIMEOUT
        )
        expires = lease.status.expires_at if lease.status else None
        if expires is not None:
            left = expires - utcnow()
            if left.total_seconds() < 1:
                raise HttpConflictError(
                    "the lease expires now; request a new lease", reason="expired"
                )
            timeout = min(timeout, datetime.timedelta(seconds=int(left.total_seconds())))
        return format_duration(timeout)

    def _spend_one(self, lease: SandboxLease, name: str, size: int) -> SandboxExecution | None:
        """One unit of the lease's execution budget and `size` of its command bytes, by one
        fenced write retried on races; or, when a request with the same key made the execution
        meanwhile, that execution (it paid). Without that check, identical retries sent at once
        would each pay, and race each other for the increment until one ran out of attempts."""
        for attempt in range(SPEND_ATTEMPTS):
            try:
                fenced_patch(self.kube, lease, self._spending(lease, size))
                return None
            except FenceConflictError:
                made = self.kube.find_model(SandboxExecution, name)
                if made is not None:
                    return made
                time.sleep(SPEND_BACKOFF.delay(attempt))
                lease = self.kube.find_model(SandboxLease, lease.metadata.name or "") or lease
        raise HttpConflictError(
            "the lease changed while reserving; retry", reason="conflict_retryable"
        )

    def _spending(self, lease: SandboxLease, size: int) -> list[Json]:
        """The patch spending one execution and `size` command bytes of `lease` as read; 409
        `execution_limit_exhausted` (spec 7.2's per-lifetime bound) when either is spent."""
        spec = lease.spec
        if spec.executions_reserved >= spec.max_executions:
            raise HttpConflictError(
                f"this lease has run its {spec.max_executions} executions; request a new lease",
                reason="execution_limit_exhausted",
            )
        stored = command_bytes_reserved(lease)
        if stored + size > self.max_command_bytes:
            raise HttpConflictError(
                f"this lease's commands have stored {stored} of the {self.max_command_bytes} "
                f"bytes of command and cwd a lease may store, too few for this one's {size}: "
                "large input belongs in a file in the sandbox; or request a new lease",
                reason="execution_limit_exhausted",
            )
        spent = spec.executions_reserved + 1
        return [
            {
                "op": "add",
                "path": json_pointer("spec", "executions_reserved", model=SandboxLease),
                "value": spent,
            },
            _annotate(lease, COMMAND_BYTES_ANNOTATION, str(stored + size)),
        ]

    @staticmethod
    def _require_same_intent(
        found: SandboxExecution, request: CreateExecution, command: ExecutionCommand
    ) -> None:
        """The command and cwd are compared by their digest: the execution holds no more."""
        spec = found.spec
        stored = (spec.command_digest, spec.requested_timeout, spec.container, spec.detach)
        sent = (command.digest(), request.timeout, request.container, request.detach)
        if stored != sent:
            raise HttpConflictError(
                "this idempotency key was used for an execution with a different command, cwd,"
                " timeout, container or detach",
                reason="idempotency_conflict",
            )

    # -- talking to the runner -------------------------------------------------------------

    def _runner(self, execution: SandboxExecution, request: Json) -> RunnerAnswer:
        """The runner's validated answer: a runner that cannot be reached, or answers out of
        bounds (it runs as the tenant, among the tenant's files), is a 503, never a 500."""
        settings = self.kube.api_client.configuration
        request = {"id": execution.metadata.name, **request}
        timeout = RUNNER_CALL + float(request.get("wait") or 0)
        # lessor.runner reads the execution's JSON: it sits beside lessor.resources, not above.
        runner = Runner.of(execution.model_dump(mode="json", by_alias=True))
        try:
            return call_runner(settings, runner, request, timeout=timeout)
        except RunnerError as error:
            raise UnavailableError(f"the sandbox's runner cannot be reached: {error}") from error

    def _started(self, execution: SandboxExecution, command: ExecutionCommand) -> Execution:
        """Ask the runner to start it (a no-op if it already did); the answer is the state.

        `command` is the request's, which has the execution's commandDigest (it passed
        `_require_same_intent`), so it is what the execution's Secret holds: no need to read it.
        """
        timeout = parse_duration(execution.spec.timeout).total_seconds()
        start = {"op": "start", "argv": command.command, "cwd": command.cwd, "timeout": timeout}
        view = _view(execution)
        try:
            return _merge(view, self._runner(execution, start))
        except UnavailableError:
            return view  # reserved: the operator starts it when the runner answers again

    def _wait(
        self, execution: SandboxExecution, command: ExecutionCommand, gone: Callable[[], bool]
    ) -> tuple[int, Execution]:
        """200 with the output once the command has ended; 202 (poll the execution) if the
        outcome is still not known well past the timeout.

        Bounded whatever the runner says, since the tenant can make it say anything: one
        deadline for every state (reading the output of an ended command included), and at
        most OUTPUT_CAP bytes of each stream, the runner's own retention; a runner that would go on
        past either gets its output cut there, marked truncated."""
        view = self._started(execution, command)
        deadline = time.monotonic() + parse_duration(execution.spec.timeout).total_seconds()
        deadline += WAIT_MARGIN
        # One runner call waits (up to RUNNER_WAIT) for the end and brings the first windows.
        offsets = {"stdoutOffset": 0, "stderrOffset": 0}
        stdout, stderr = bytearray(), bytearray()
        while True:
            left = deadline - time.monotonic()
            if gone() and view.state not in EXECUTION_FINISHED:
                return 202, view  # nobody reads the answer: stop calling the runner for it
            if left <= 0:
                if view.state not in EXECUTION_FINISHED:
                    return 202, view
                view.truncated = True  # ended, but its output would not
                break
            wait = 0.0 if view.state in EXECUTION_FINISHED else min(RUNNER_WAIT, left)
            answer = self._runner(execution, {"op": "logs", "wait": wait, **offsets})
            if not answer.state:
                raise UnavailableError("the runner has no record of this execution")
            view = _merge(view, answer)
            if (
                view.state not in EXECUTION_FINISHED
                or answer.stdout is None
                or answer.stderr is None
            ):
                continue
            stdout += answer.stdout.raw
            stderr += answer.stderr.raw
            offsets = {"stdoutOffset": answer.stdout.next_offset,
                       "stderrOffset": answer.stderr.next_offset}  # fmt: skip
            if not (answer.stdout.more or answer.stderr.more):
                break
            if len(stdout) >= OUTPUT_CAP or len(stderr) >= OUTPUT_CAP:
                view.truncated = True  # an honest runner keeps no more than OUTPUT_CAP
                break
        return 200, _result(view, stdout, stderr)

    # -- read, logs, cancel ----------------------------------------------------------------

    def owned(self, principal: Principal, lease_name: str, execution: str) -> SandboxExecution:
        """404 unless the lease is the caller's and the execution belongs to that exact lease
        instance (a lease recreated under the same name is another instance)."""
        lease = self.leases.owned(principal, lease_name)
        found = (
            self.kube.find_model(SandboxExecution, execution)
            if OBJECT_NAME.match(execution)
            else None
        )
        if (
            found is None
            or found.spec.lease.uid != lease.metadata.uid
            or found.spec.requester != principal.owner
        ):
            raise HttpNotFoundError(f"no execution {execution[:80]} in this lease")
        return found

    def read(self, principal: Principal, lease_name: str, execution: str) -> Execution:
        return _view(self.owned(principal, lease_name, execution))

    def logs(
        self, principal: Principal, lease_name: str, execution: str, stdout: int, stderr: int
    ) -> ExecutionLogs:
        found = self.owned(principal, lease_name, execution)
        answer = self._runner(found, {"op": "logs", "stdoutOffset": stdout, "stderrOffset": stderr})
        if not answer.state:
            raise UnavailableError("the runner has no record of this execution")
        logs = ExecutionLogs(
            id=execution,
            state=answer.state,
            stdout=_window(answer.stdout, answer.truncated),
            stderr=_window(answer.stderr, answer.truncated),
        )
        if answer.exit_code is not None:  # so a follower needs no other call at the end
            logs.exit_code = answer.exit_code
        return logs

    def cancel(self, principal: Principal, lease_name: str, execution: str) -> Execution:
        found = self.owned(principal, lease_name, execution)
        view = _view(found)
        if view.state in EXECUTION_FINISHED:
            return view  # unchanged, and no claim of a cancellation
        if not found.spec.cancel_requested:
            # The intent, for the operator; if the execution changed meanwhile (another cancel,
            # a status update), the runner below has the last word all the same.
            with contextlib.suppress(HttpConflictError):
                path = json_pointer("spec", "cancel_requested", model=SandboxExecution)
                fenced_patch(self.kube, found, [{"op": "add", "path": path, "value": True}])
        return _merge(view, self._runner(found, {"op": "cancel"}))
