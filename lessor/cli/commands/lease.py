"""`lessor lease POOL`: create (or, with --ensure, reuse) a cluster lease, wait until it is Bound,
write its kubeconfig (mode 0600), and print what was leased; for a Sandbox pool, create a
Sandbox lease and wait until it is Ready (no kubeconfig: exec, logs, attach, port-forward).

Giving up (Ctrl-C or --wait-timeout) on a lease this command created releases it, so an
abandoned wait never holds a cluster until its TTL; a lease reused with --ensure is left alone.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from pathlib import Path
from typing import Any

from lessor.cli import context, kubeconfigs, output
from lessor.cli.client import Client, server_id
from lessor.cli.commands.sandbox import wait_ready
from lessor.cli.errors import INTERRUPTED, REFUSED, TIMEOUT, USAGE, ApiError, CliError
from lessor.cli.progress import Progress
from lessor.protocol.durations import parse_duration
from lessor.protocol.phases import CLUSTER_LEASE, SANDBOX_LEASE
from lessor.protocol.responses import (
    Lease,
    LeaseCreated,
    LeaseSummary,
    PoolRecord,
    SandboxLease,
    SandboxLeaseCreated,
)

# What `create` hands back: the POST's answer, the lease read back from the Location of an
# answer that was cut short (a Lease), or the caller's listed lease that --ensure reuses.
Created = LeaseCreated | LeaseSummary

_FIRST_POLL, _MAX_POLL = 0.1, 1.0
# Seconds each GET may wait for the lease to change: well under the client's 30 s socket timeout.
_LONG_POLL = 20


def metadata_from(value: str | None) -> dict[str, Any] | None:
    if value is None:
        return None
    source = "--metadata-json"
    if value.startswith("@"):
        source = value[1:]
        try:
            value = Path(source).read_text(encoding="utf-8")
        except OSError as error:
            raise CliError(
                f"--metadata-json: cannot read {source}: {error.strerror}", USAGE
            ) from None
    try:
        parsed = json.loads(value)
    except ValueError as error:
        raise CliError(f"{source} is not JSON: {error}", USAGE) from None
    if not isinstance(parsed, dict):
        raise CliError(f"{source} must be a JSON object", USAGE)
    return parsed


def seconds(flag: str, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value).total_seconds()
    except ValueError as error:
        raise CliError(f"{flag}: {error}", USAGE) from None


def _existing(client: Client, pool: str, alias: str) -> LeaseSummary | None:
    for lease in client.get_models("/v1/leases", LeaseSummary):
        if lease.alias == alias:
            if lease.profile != pool:
                raise CliError(
                    f"your lease {lease.id} named {alias} is from pool {lease.profile}, not {pool}",
                    REFUSED,
                )
            return lease
    return None


def _queue_position(lease: Created) -> int | None:
    """A created or read lease's place in its pool's queue; a listed one says none."""
    return lease.queue_position if isinstance(lease, LeaseCreated | Lease) else None


def create(
    client: Client, args: argparse.Namespace, metadata: dict[str, Any] | None
) -> tuple[Created, bool]:
    """(the lease, whether it was reused)."""
    if args.ensure:
        found = _existing(client, args.pool, args.name)
        if found is not None:
            return found, True
    body: dict[str, Any] = {"profile": args.pool}
    if args.ttl:
        body["ttl"] = args.ttl
    if args.name:
        body["alias"] = args.name
    if metadata is not None:
        body["metadata"] = metadata
    try:
        # No idempotency key on cluster leases (spec 4.1): recovered from Location, never resent.
        return client.create("/v1/leases", body, LeaseCreated, Lease, keyed=False), False
    except ApiError as error:
        # Two `--ensure` runs raced and the other created it first: use that one.
        if args.ensure and error.reason == "alias_active":
            found = _existing(client, args.pool, args.name)
            if found is not None:
                return found, True
        raise


def wait_bound(
    client: Client, lease_id: str, timeout: float | None, progress: Progress
) -> tuple[Lease, str]:
    """(the lease once Bound, its kubeconfig). Long polls (`waitSeconds`): each answer comes
    when the lease changed, so the kubeconfig arrives the moment the lease is bound. An answer
    that comes back early and unchanged (a server that does not wait, one that is stopping) is
    followed by a pause that grows, as plain polling would be."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pause, previous = _FIRST_POLL, None
    while True:
        left = _LONG_POLL if deadline is None else deadline - time.monotonic()
        wait = max(0, int(min(_LONG_POLL, left)))
        asked = time.monotonic()
        lease = client.get_model(f"/v1/leases/{lease_id}?waitSeconds={wait}", Lease)
        phase = lease.phase
        if phase == CLUSTER_LEASE.usable and lease.kubeconfig:
            return lease, lease.kubeconfig
        if phase in CLUSTER_LEASE.ended:
            raise CliError(f"lease {lease_id} ended while waiting: {phase}")
        queue = lease.queue_position
        progress.update(
            f"lease {lease_id}: {phase}" + (f", queue position {queue}" if queue else "")
        )
        early = lease == previous and time.monotonic() - asked < wait / 2
        previous = lease
        if deadline is not None and time.monotonic() + (pause if early else 0) > deadline:
            raise TimeoutError
        if early or wait == 0:
            time.sleep(pause)
            pause = min(pause * 1.5, _MAX_POLL)


def give_up(client: Client, lease_id: str, reused: bool, why: str, code: int) -> CliError:
    if reused:
        return CliError(f"{why}; lease {lease_id} (reused) is left as it was", code)
    try:
        client.call("DELETE", f"/v1/leases/{lease_id}")
    except CliError as error:
        return CliError(
            f"{why}; releasing lease {lease_id} failed ({error}): `lessor release {lease_id}`",
            code,
        )
    return CliError(f"{why}; released lease {lease_id}", code)


def run(args: argparse.Namespace) -> int:
    if args.ensure and not args.name:
        raise CliError("--ensure needs --name: it reuses your active lease with that name", USAGE)
    timeout = seconds("--wait-timeout", args.wait_timeout)
    seconds("--ttl", args.ttl)  # a typo fails here, before any request
    metadata = metadata_from(args.metadata_json)
    client = context.client(args)
    pool = client.get_model(f"/v1/pools/{args.pool}", PoolRecord)
    if pool.resource_kind == "Sandbox":
        return _sandbox(client, args, pool, metadata, timeout)
    lease, reused = create(client, args, metadata)
    lease_id = server_id(lease.id)
    progress = Progress()
    # From the moment the lease exists, an interrupt releases it (unless it was reused): the
    # guard starts here, before anything is shown, so no Ctrl-C can fall between the two.
    try:
        return _finish(client, args, pool, lease, reused=reused, timeout=timeout, progress=progress)
    except KeyboardInterrupt:
        progress.clear()
        raise give_up(client, lease_id, reused, "interrupted", INTERRUPTED) from None
    except TimeoutError:
        progress.clear()
        why = f"lease {lease_id} was not {CLUSTER_LEASE.usable} within {args.wait_timeout}"
        raise give_up(client, lease_id, reused, why, TIMEOUT) from None


def _finish(
    client: Client,
    args: argparse.Namespace,
    pool: PoolRecord,
    lease: Created,
    *,
    reused: bool,
    timeout: float | None,
    progress: Progress,
) -> int:
    """Wait for the lease (unless --no-wait), write its kubeconfig and report."""
    lease_id = lease.id
    result: dict[str, Any] = {
        "id": lease_id,
        "profile": lease.profile,
        "kind": pool.resource_kind,
        "capabilities": pool.capabilities,
        "reused": reused,
    }
    if lease.alias or args.name:
        result["alias"] = lease.alias or args.name
    if args.no_wait:
        result.update(phase=lease.phase, queue_position=_queue_position(lease))
        return _report(args, result)
    progress.update(f"lease {lease_id}: {lease.phase}")
    bound, kubeconfig = wait_bound(client, lease_id, timeout, progress)
    progress.clear()
    allow = args.allow_unsafe_kubeconfig
    try:  # a kubeconfig refused (review N11) is a lease nobody can use: released as on timeout
        kubeconfigs.checked(lease_id, kubeconfig, allow_unsafe=allow)
    except CliError as error:
        raise give_up(client, lease_id, reused, str(error), error.code) from None
    path = kubeconfigs.write(lease_id, kubeconfig, args.kubeconfig, allow_unsafe=allow)
    result.update(phase=bound.phase, expires_at=bound.expires_at, kubeconfig=str(path))
    return _report(args, result)


def _sandbox(
    client: Client,
    args: argparse.Namespace,
    pool: PoolRecord,
    metadata: dict[str, Any] | None,
    timeout: float | None,
) -> int:
    """A Sandbox lease: POST /v1/sandbox-leases with a fresh idempotency key (reused once if the
    connection fails, so a retry never makes two), then wait until Ready. No kubeconfig: the
    sandbox is used through exec, logs, attach and port-forward."""
    for flag, given in (("--kubeconfig", args.kubeconfig), ("--metadata-json", metadata),
                        ("--ensure", args.ensure),
                        (kubeconfigs.ALLOW_FLAG, args.allow_unsafe_kubeconfig)):  # fmt: skip
        if given:
            raise CliError(f"{flag} is for cluster pools; {args.pool} is a Sandbox pool", USAGE)
    body: dict[str, Any] = {"pool": args.pool, "idempotencyKey": str(uuid.uuid4())}
    if args.ttl:
        body["ttl"] = args.ttl
    if args.name:
        body["alias"] = args.name
    # The key: one lease, even if retried.
    lease = client.create("/v1/sandbox-leases", body, SandboxLeaseCreated, SandboxLease)
    lease_id = server_id(lease.id)
    progress = Progress()
    try:  # from the moment the lease exists, as for a cluster lease
        return _finish_sandbox(client, args, pool, lease, timeout=timeout, progress=progress)
    except KeyboardInterrupt:
        progress.clear()
        raise _give_up_sandbox(client, lease_id, "interrupted", INTERRUPTED) from None
    except TimeoutError:
        progress.clear()
        usable = SANDBOX_LEASE.usable
        why = f"sandbox lease {lease_id} was not {usable} within {args.wait_timeout}"
        raise _give_up_sandbox(client, lease_id, why, TIMEOUT) from None


def _finish_sandbox(
    client: Client,
    args: argparse.Namespace,
    pool: PoolRecord,
    lease: SandboxLeaseCreated | SandboxLease,
    *,
    timeout: float | None,
    progress: Progress,
) -> int:
    result: dict[str, Any] = {
        "id": lease.id,
        "profile": args.pool,
        "kind": "Sandbox",
        "capabilities": pool.capabilities,
        "reused": False,
    }
    if args.name:
        result["alias"] = args.name
    if args.no_wait:
        result["phase"] = lease.phase
        return _report(args, result)
    ready = wait_ready(client, lease.id, progress, timeout)
    progress.clear()
    result.update(phase=ready.phase, expires_at=ready.expires_at)
    return _report(args, result)


def _give_up_sandbox(client: Client, lease_id: str, why: str, code: int) -> CliError:
    try:
        client.call("DELETE", f"/v1/sandbox-leases/{lease_id}")
    except CliError as error:
        return CliError(f"{why}; releasing {lease_id} failed ({error}): `lessor release`", code)
    return CliError(f"{why}; released sandbox lease {lease_id}", code)


def _report(args: argparse.Namespace, result: dict[str, Any]) -> int:
    if output.wants_json(args):
        output.emit(args, result)
        return 0
    rows: list[tuple[str, object]] = [("lease", result["id"])]
    if "alias" in result:
        rows.append(("name", result["alias"] + (" (reused)" if result["reused"] else "")))
    rows += [
        ("pool", result["profile"]),
        ("kind", result["kind"]),
        ("capabilities", ", ".join(result["capabilities"]) or "-"),
        ("phase", result["phase"]),
    ]
    if "expires_at" in result:
        rows.append(("expires", output.until(result["expires_at"])))
    if "kubeconfig" in result:
        rows.append(("kubeconfig", result["kubeconfig"]))
    elif result.get("queue_position"):
        rows.append(("queue position", result["queue_position"]))
    output.fields(rows)
    return 0
