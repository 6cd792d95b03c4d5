"""Coming back to a lease: `lessor get` (your leases, or one in full), `lessor kubeconfig` (its
kubeconfig again, after `--no-wait` or a lost file, or merged into your kubeconfig) and
`lessor wait` (until it reaches a phase), each by id or alias.

The spec has no standalone leases command (4.7: active leases are read with `status`); listing
is `lessor get` without a lease, as `kubectl get` lists what it is not given a name of.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, get_args

from lessor.cli import context, kubeconfigs, output
from lessor.cli.answers import as_sent
from lessor.cli.client import Client
from lessor.cli.commands.leases import resolve
from lessor.cli.errors import TIMEOUT, USAGE, ApiError, CliError
from lessor.cli.progress import Progress
from lessor.protocol.durations import parse_duration
from lessor.protocol.phases import (
    CLUSTER_LEASE,
    SANDBOX_LEASE,
    ClusterLeasePhase,
    SandboxLeasePhase,
)
from lessor.protocol.responses import Lease, LeaseEvent, LeaseSummary, SandboxLease

# Seconds a GET of a Pending cluster lease may wait for it to change (as `lessor lease`).
_LONG_POLL = 20
_FIRST_PAUSE, _MAX_PAUSE = 0.2, 2.0


def _path(sandbox: bool, lease_id: str) -> str:
    return f"/v1/{'sandbox-leases' if sandbox else 'leases'}/{lease_id}"


def _name(sandbox: bool, lease_id: str) -> tuple[str, str]:
    """`-o name`'s kind/id: `lease/l...` for a cluster lease, `sandbox/s...` for a Sandbox
    lease; LEASE takes either form back (lessor.cli.parser.lease_name)."""
    return ("sandbox" if sandbox else "lease"), lease_id


def _pool(lease: LeaseSummary | SandboxLease) -> str:
    """The pool a lease is from: a cluster lease names it `profile`, a Sandbox lease `pool`."""
    return lease.profile if isinstance(lease, LeaseSummary) else lease.pool


def _kind(lease: LeaseSummary | SandboxLease) -> str:
    return "Cluster" if isinstance(lease, LeaseSummary) else "Sandbox"


def get(args: argparse.Namespace) -> int:
    client = context.client(args)
    if args.lease_id is None:
        return _list(client, args)
    sandbox, lease_id = resolve(client, args.lease_id)
    lease = _read(client, sandbox, _path(sandbox, lease_id))
    if output.wants_names(args):
        output.names([_name(sandbox, lease.id)])
        return 0
    events = [] if sandbox else _events(client, lease.id)
    if output.wants_json(args):
        # A credential is never printed: `lessor kubeconfig` writes it to a private file.
        shown = {key: value for key, value in as_sent(lease).items() if key != "kubeconfig"}
        listed = {} if sandbox else {"events": [as_sent(event) for event in events]}
        output.emit(args, {**shown, "kind": _kind(lease), **listed})
        return 0
    output.fields(_rows(lease))
    if events:
        print("\nEvents:")
        output.table(["TYPE", "REASON", "AGE", "MESSAGE"], [_event_row(e) for e in events])
    return 0


def _rows(lease: Lease | SandboxLease) -> list[tuple[str, object]]:
    """`lessor get LEASE`'s lines: what both kinds have, in one order, and each kind's own."""
    cluster = lease if isinstance(lease, Lease) else None
    rows: list[tuple[str, object]] = [("lease", lease.id)]
    if lease.alias:
        rows.append(("name", lease.alias))
    rows += [("pool", _pool(lease)), ("kind", _kind(lease)), ("phase", lease.phase)]
    if cluster and cluster.queue_position:
        rows.append(("queue position", cluster.queue_position))
    if lease.expires_at:
        rows.append(("expires", output.until(lease.expires_at)))
    health = cluster.cluster_health if cluster else None
    if health:
        state = "healthy" if health.healthy else "unhealthy"
        rows.append(("cluster", f"{state} since {health.since}: {health.message}"))
    if isinstance(lease, SandboxLease) and lease.message:
        rows.append(("message", lease.message))
    if cluster and cluster.kubeconfig:
        rows.append(("kubeconfig", f"`lessor kubeconfig {lease.id}` writes it"))
    return rows


def _events(client: Client, lease_id: str) -> list[LeaseEvent]:
    """The lease's recent Events, oldest first, as `kubectl describe` ends with them; none
    from a server that does not serve them (older than 0.3)."""
    try:
        return client.get_models(f"/v1/leases/{lease_id}/events", LeaseEvent)
    except ApiError as error:
        if error.status != 404:
            raise
        return []


def _event_row(event: LeaseEvent) -> list[object]:
    seen = output.age(event.last_seen)
    if event.count > 1:  # `3m (x4 over 10m)`, as kubectl folds repeats
        seen += f" (x{event.count} over {output.age(event.first_seen)})"
    return [event.type, event.reason, seen, event.message]


def _list(client: Client, args: argparse.Namespace) -> int:
    leases: list[LeaseSummary | SandboxLease] = []
    leases += client.get_models("/v1/leases", LeaseSummary)
    try:
        leases += client.get_models("/v1/sandbox-leases", SandboxLease)
    except ApiError as error:
        if error.status != 404:  # the Sandbox API is not served here
            raise
    if output.wants_names(args):
        output.names([_name(isinstance(lease, SandboxLease), lease.id) for lease in leases])
        return 0
    if output.wants_json(args):
        output.emit(args, [{**as_sent(lease), "kind": _kind(lease)} for lease in leases])
        return 0
    written = kubeconfigs.written()
    wide = args.output == "wide"
    headers = ["ID", "NAME", "POOL", "KIND", "PHASE", "EXPIRES"]
    if wide:
        headers += ["EXPIRES AT", "KUBECONFIG"]
    rows = []
    for lease in leases:
        row = [
            lease.id,
            lease.alias or "-",
            _pool(lease),
            _kind(lease),
            lease.phase,
            output.relative(lease.expires_at),
        ]
        if wide:
            row += [lease.expires_at or "-", ", ".join(written.get(lease.id, [])) or "-"]
        rows.append(row)
    output.table(headers, rows, no_headers=args.no_headers)
    return 0


def kubeconfig(args: argparse.Namespace) -> int:
    client = context.client(args)
    sandbox, lease_id = resolve(client, args.lease_id)
    if sandbox:
        raise CliError(f"{lease_id} is a Sandbox lease: sandboxes have no kubeconfig", USAGE)
    lease = client.get_model(_path(False, lease_id), Lease)
    if not lease.kubeconfig:
        usable = CLUSTER_LEASE.usable
        waiting = CLUSTER_LEASE.waiting(lease.phase)
        hint = f" (`lessor wait {lease_id} --for {usable}`)" if waiting else ""
        raise CliError(
            f"lease {lease_id} is {lease.phase}: a kubeconfig exists only while it is {usable}"
            + hint
        )
    result: dict[str, Any] = {"id": lease_id}
    allow = args.allow_unsafe_kubeconfig  # review N11: refused unless the user says otherwise
    if args.merge:
        path, name = kubeconfigs.merge(lease_id, lease.kubeconfig, allow_unsafe=allow)
        result.update(kubeconfig=str(path), context=name)
        message = f"merged into {path} as context {name}: kubectl --context {name} get nodes"
    else:
        path = kubeconfigs.write(lease_id, lease.kubeconfig, args.kubeconfig, allow_unsafe=allow)
        result.update(kubeconfig=str(path))
        message = f"wrote {path}: KUBECONFIG={path} kubectl get nodes"
    if output.wants_json(args):
        output.emit(args, result)
    else:
        print(message)
    return 0


def wait(args: argparse.Namespace) -> int:
    try:
        timeout = parse_duration(args.timeout).total_seconds()
    except ValueError as error:
        raise CliError(f"--timeout: {error}", USAGE) from None
    client = context.client(args)
    sandbox, lease_id = resolve(client, args.lease_id)
    phases = get_args(SandboxLeasePhase if sandbox else ClusterLeasePhase)
    if args.phase not in phases:
        kind = "a Sandbox lease" if sandbox else "a cluster lease"
        raise CliError(f"--for: {kind}'s phases are {', '.join(phases)}", USAGE)
    finished = (SANDBOX_LEASE if sandbox else CLUSTER_LEASE).finished
    deadline = time.monotonic() + timeout
    progress = Progress()
    pause = _FIRST_PAUSE
    while True:
        left = deadline - time.monotonic()
        phase = _phase(client, sandbox, lease_id, left)
        if phase == args.phase:
            break
        if phase in finished:
            progress.clear()
            raise CliError(f"lease {lease_id} ended {phase}, never {args.phase}")
        if time.monotonic() >= deadline:
            progress.clear()
            raise CliError(f"lease {lease_id} is {phase} after {args.timeout}", TIMEOUT)
        progress.update(f"lease {lease_id}: {phase}, waiting for {args.phase}")
        if sandbox or not CLUSTER_LEASE.waiting(phase):  # no long poll holds it: pause, growing
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 1.5, _MAX_PAUSE)
    progress.clear()
    if output.wants_json(args):
        output.emit(args, {"id": lease_id, "phase": phase})
    else:
        print(f"lease {lease_id} is {phase}")
    return 0


def _phase(client: Client, sandbox: bool, lease_id: str, left: float) -> str:
    """The lease's phase now, or once it changed (a cluster lease's long poll)."""
    return _read(client, sandbox, _wait_path(sandbox, lease_id, left)).phase


def _read(client: Client, sandbox: bool, path: str) -> Lease | SandboxLease:
    """A lease of either kind, read through its kind's model."""
    if sandbox:
        return client.get_model(path, SandboxLease)
    return client.get_model(path, Lease)


def _wait_path(sandbox: bool, lease_id: str, left: float) -> str:
    """A cluster lease's GET holds a Pending lease's answer until it changes (`waitSeconds`)."""
    if sandbox:
        return _path(True, lease_id)
    return f"{_path(False, lease_id)}?waitSeconds={max(0, int(min(_LONG_POLL, left)))}"
