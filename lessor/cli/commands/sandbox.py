"""The Sandbox commands `run`, `exec`, `logs`, `cancel` (`attach` and `port-forward` are in
lessor.cli.commands.streams).

`exec` and `run` start the command detached and then follow its output windows, so output
appears as it is produced and no HTTP request has to stay open for as long as the command runs;
each start carries a fresh idempotency key, reused once if the connection fails, so a retry
never runs the command twice. The exit status is the command's own: its exit code, 124 when it
timed out (as timeout(1)), 125 when it was cancelled, and 1 when it has none (it could not start,
a signal ended it, or its outcome is unknown).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
import uuid
from types import FrameType
from typing import Any
from urllib.parse import urlencode

from lessor.cli import context, late_options, output
from lessor.cli.answers import as_sent
from lessor.cli.client import Client, server_id
from lessor.cli.errors import INTERRUPTED, USAGE, CliError
from lessor.cli.progress import Progress
from lessor.protocol.durations import parse_duration
from lessor.protocol.phases import EXECUTION_FINISHED, SANDBOX_LEASE
from lessor.protocol.responses import (
    Execution,
    ExecutionLogs,
    SandboxLease,
    SandboxLeaseCreated,
    SandboxLogs,
)
from lessor.protocol.sandbox_limits import LOG_TAIL_MAX

TIMED_OUT, CANCELLED = 124, 125
FOLLOW_PAUSE = 0.2
CANCELS = (signal.SIGTERM, signal.SIGHUP)


def _argv(args: argparse.Namespace) -> list[str]:
    """The command after `--`, the options before it read (lessor.cli.late_options)."""
    values = tuple(flag for flag in ("--ttl", "--timeout", "--cwd") if hasattr(args, flag[2:]))
    switches = ("--detach",) if hasattr(args, "detach") else ()
    return late_options.command_line(args, values, switches, example="make test", output=True)


def _check_duration(flag: str, value: str | None) -> None:
    if value is None:
        return
    try:
        if parse_duration(value).total_seconds() <= 0:
            raise ValueError("it must be longer than zero")
    except ValueError as error:
        raise CliError(f"{flag}: {error}", USAGE) from None


def exit_status(execution: ExecutionLogs) -> int:
    if execution.state == "TimedOut":
        return TIMED_OUT
    if execution.state == "Cancelled":
        return CANCELLED
    if execution.exit_code is not None:
        return execution.exit_code
    return 1


def start(client: Client, lease_id: str, argv: list[str], args: argparse.Namespace) -> str:
    body: dict[str, Any] = {"command": argv, "idempotencyKey": str(uuid.uuid4()), "detach": True}
    for field in ("timeout", "cwd"):
        if getattr(args, field, None):
            body[field] = getattr(args, field)
    path = f"/v1/sandbox-leases/{lease_id}/executions"
    started = client.create(path, body, Execution, Execution)  # the key: it cannot run twice
    return server_id(started.id, "execution")


def follow(
    client: Client, lease_id: str, execution: str, *, until_end: bool = True
) -> ExecutionLogs:
    """Print the retained output from the start; with `until_end`, keep following until the
    execution is over and both windows are drained. Returns the last windows (their state and,
    once the command has ended, its exit code)."""
    stdout_offset = stderr_offset = 0
    while True:
        query = f"stdoutOffset={stdout_offset}&stderrOffset={stderr_offset}"
        path = f"/v1/sandbox-leases/{lease_id}/executions/{execution}/logs?{query}"
        logs = client.get_model(path, ExecutionLogs)
        for window, sink in ((logs.stdout, sys.stdout), (logs.stderr, sys.stderr)):
            if window.data:
                sink.write(window.data)
                sink.flush()
        stdout_offset, stderr_offset = logs.stdout.next_offset, logs.stderr.next_offset
        more = logs.stdout.more or logs.stderr.more
        if not more and (logs.state in EXECUTION_FINISHED or not until_end):
            return logs
        if not more:
            time.sleep(FOLLOW_PAUSE)


def _run_in(client: Client, lease_id: str, argv: list[str], args: argparse.Namespace) -> int:
    execution = start(client, lease_id, argv, args)
    try:
        final = follow(client, lease_id, execution)
    except KeyboardInterrupt:
        client.call("DELETE", f"/v1/sandbox-leases/{lease_id}/executions/{execution}")
        raise
    if final.state == "Unknown":
        print(f"lessor: the outcome of execution {execution} is unknown", file=sys.stderr)
    return exit_status(final)


def execute(args: argparse.Namespace) -> int:
    argv = _argv(args)
    _check_duration("--timeout", args.timeout)
    client = context.client(args)
    if args.detach:
        execution = start(client, args.lease_id, argv, args)
        if output.wants_json(args):
            output.emit(args, {"id": execution, "lease": args.lease_id})
        else:
            print(execution)
        return 0
    return _run_in(client, args.lease_id, argv, args)


def logs(args: argparse.Namespace) -> int:
    if args.tail is not None and not 1 <= args.tail <= LOG_TAIL_MAX:
        raise CliError(f"--tail must be from 1 to {LOG_TAIL_MAX}", USAGE)
    if args.execution is not None and (args.tail is not None or args.container):
        raise CliError("--tail and -c read a sandbox's log, not an execution's output", USAGE)
    client = context.client(args)
    if args.execution is None:
        query = {"tailLines": args.tail, "container": args.container}
        asked = urlencode({k: v for k, v in query.items() if v is not None})
        path = f"/v1/sandbox-leases/{args.lease_id}/logs" + (f"?{asked}" if asked else "")
        tail = client.get_model(path, SandboxLogs)
        if output.wants_json(args):
            output.emit(args, as_sent(tail))
        else:
            sys.stdout.write(tail.data)
        return 0
    follow(client, args.lease_id, args.execution, until_end=args.follow)
    return 0


def cancel(args: argparse.Namespace) -> int:
    path = f"/v1/sandbox-leases/{args.lease_id}/executions/{args.execution}"
    cancelled = context.client(args).call_model("DELETE", path, Execution)
    if output.wants_json(args):
        output.emit(args, as_sent(cancelled))
    else:
        print(f"execution {cancelled.id}: {cancelled.state}")
    return 0


def wait_ready(
    client: Client, lease_id: str, progress: Progress, timeout: float | None = None
) -> SandboxLease:
    """The lease once Ready; CliError if it ends first, TimeoutError after `timeout` seconds."""
    started = time.monotonic()
    while True:
        lease = client.get_model(f"/v1/sandbox-leases/{lease_id}", SandboxLease)
        if lease.phase == SANDBOX_LEASE.usable:
            return lease
        if lease.phase in SANDBOX_LEASE.ended:
            usable = SANDBOX_LEASE.usable
            raise CliError(f"sandbox lease {lease_id} ended before it was {usable}: {lease.phase}")
        if timeout is not None and time.monotonic() - started > timeout:
            raise TimeoutError
        progress.update(f"sandbox {lease_id}: {lease.phase}")
        time.sleep(0.2)


def run(args: argparse.Namespace) -> int:
    """Lease, run, release: the release happens whatever the command or the caller does. A CI
    runner cancels with SIGTERM or SIGHUP as well as SIGINT: each cancels the execution and
    releases the lease, as Ctrl-C does."""
    argv = _argv(args)
    _check_duration("--ttl", args.ttl)
    _check_duration("--timeout", args.timeout)
    client = context.client(args)
    body: dict[str, Any] = {"pool": args.pool, "idempotencyKey": str(uuid.uuid4())}
    if args.ttl:
        body["ttl"] = args.ttl
    previous = {signum: signal.signal(signum, _interrupt) for signum in CANCELS}
    try:
        created = client.create("/v1/sandbox-leases", body, SandboxLeaseCreated, SandboxLease)
        lease_id = server_id(created.id)  # keyed: one lease
        progress = Progress()
        try:
            wait_ready(client, lease_id, progress)
            progress.clear()
            return _run_in(client, lease_id, argv, args)
        except KeyboardInterrupt:
            progress.clear()
            raise CliError(f"interrupted; sandbox lease {lease_id} released", INTERRUPTED) from None
        finally:
            progress.clear()
            for signum in CANCELS:  # a second signal must not cut the release short
                signal.signal(signum, signal.SIG_IGN)
            try:
                client.call("DELETE", f"/v1/sandbox-leases/{lease_id}")
            except CliError as error:
                why = f"releasing sandbox lease {lease_id} failed: {error}"
                print(f"lessor: {why}", file=sys.stderr)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt
