"""`lessor release` and `lessor extend`: the two changes a lease owner can ask for, of a cluster
lease or of a Sandbox lease (told apart by the id's form), named by its id or its alias."""

from __future__ import annotations

import argparse

from lessor.cli import context, kubeconfigs, output
from lessor.cli.answers import as_sent
from lessor.cli.client import Client, server_id
from lessor.cli.errors import NOT_FOUND, USAGE, ApiError, CliError
from lessor.protocol.durations import parse_duration
from lessor.protocol.lease_ids import SANDBOX_LEASE_ID, looks_like_an_id
from lessor.protocol.responses import Expiry, Lease, SandboxExpiry, SandboxLease


def resolve(client: Client, name: str) -> tuple[bool, str]:
    """(whether it is a Sandbox lease, its id) for an id or an alias. An id tells its kind by
    its form (lessor.protocol.lease_ids); an alias is looked up on the server, among the
    caller's cluster leases first, then its Sandbox leases (the server resolves an alias where
    an id goes, docs/api.md)."""
    if looks_like_an_id(name):
        return SANDBOX_LEASE_ID.match(name) is not None, name
    try:
        return False, server_id(client.get_model(f"/v1/leases/{name}", Lease).id)
    except ApiError as error:
        if error.status != 404:
            raise
    try:
        return True, server_id(client.get_model(f"/v1/sandbox-leases/{name}", SandboxLease).id)
    except ApiError as error:
        if error.status != 404:
            raise
    raise CliError(f"no lease of yours is named {name}", NOT_FOUND)


def release(args: argparse.Namespace) -> int:
    client = context.client(args)
    sandbox, lease_id = resolve(client, args.lease_id)
    client.call("DELETE", f"/v1/{'sandbox-leases' if sandbox else 'leases'}/{lease_id}")
    # Its kubeconfig is worthless now, and a stale context sends kubectl to the wrong place.
    removed = kubeconfigs.remove(lease_id)
    if output.wants_json(args):
        output.emit(args, {"id": lease_id, "release_requested": True, "removed": removed})
        return 0
    if sandbox:
        print(f"released sandbox lease {lease_id}: its sandbox is deleted")
    else:
        print(f"released lease {lease_id}: its cluster is destroyed and replaced")
    for what in removed:
        print(f"removed {what}")
    return 0


def extend(args: argparse.Namespace) -> int:
    try:
        if parse_duration(args.ttl).total_seconds() <= 0:
            raise ValueError("the extension must be longer than zero")
    except ValueError as error:
        raise CliError(f"--ttl: {error}", USAGE) from None
    client = context.client(args)
    sandbox, lease_id = resolve(client, args.lease_id)
    answer: Expiry | SandboxExpiry
    if sandbox:
        path, asked = f"/v1/sandbox-leases/{lease_id}", {"extendTtl": args.ttl}
        answer = client.call_model("PATCH", path, SandboxExpiry, asked)
    else:
        path, asked = f"/v1/leases/{lease_id}", {"extend_ttl": args.ttl}
        answer = client.call_model("PATCH", path, Expiry, asked)
    if output.wants_json(args):
        output.emit(args, {"id": lease_id, **as_sent(answer)})
    else:
        print(f"lease {lease_id} now expires {output.until(answer.expires_at)}")
    return 0
