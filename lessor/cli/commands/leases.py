"""`lessor release` and `lessor extend`: the two changes a lease owner can ask for, of a cluster
lease or of a Sandbox lease (told apart by the id's form)."""

from __future__ import annotations

import argparse

from lessor.cli import context, output
from lessor.cli.errors import USAGE, CliError
from lessor.protocol.durations import parse_duration
from lessor.protocol.lease_ids import SANDBOX_LEASE_ID


def _sandbox(lease_id: str) -> bool:
    """Cluster lease ids never have the Sandbox lease id's form."""
    return SANDBOX_LEASE_ID.match(lease_id) is not None


def release(args: argparse.Namespace) -> int:
    sandbox = _sandbox(args.lease_id)
    path = f"/v1/{'sandbox-leases' if sandbox else 'leases'}/{args.lease_id}"
    context.client(args).call("DELETE", path)
    if output.wants_json(args):
        output.emit_json({"id": args.lease_id, "release_requested": True})
    elif sandbox:
        print(f"released sandbox lease {args.lease_id}: its sandbox is deleted")
    else:
        print(f"released lease {args.lease_id}: its cluster is destroyed and replaced")
    return 0


def extend(args: argparse.Namespace) -> int:
    try:
        if parse_duration(args.ttl).total_seconds() <= 0:
            raise ValueError("the extension must be longer than zero")
    except ValueError as error:
        raise CliError(f"--ttl: {error}", USAGE) from None
    client = context.client(args)
    if _sandbox(args.lease_id):
        answer = client.call(
            "PATCH", f"/v1/sandbox-leases/{args.lease_id}", {"extendTtl": args.ttl}
        )
        expires = answer["expiresAt"]
    else:
        answer = client.call("PATCH", f"/v1/leases/{args.lease_id}", {"extend_ttl": args.ttl})
        expires = answer["expires_at"]
    if output.wants_json(args):
        output.emit_json({"id": args.lease_id, **answer})
    else:
        print(f"lease {args.lease_id} now expires {output.until(expires)}")
    return 0
