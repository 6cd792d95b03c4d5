"""`lessor release` and `lessor extend`: the two changes a lease owner can ask for."""

from __future__ import annotations

import argparse

from lessor.cli import context, output
from lessor.cli.errors import USAGE, CliError
from lessor.resources.durations import parse_duration


def release(args: argparse.Namespace) -> int:
    context.client(args).call("DELETE", f"/v1/leases/{args.lease_id}")
    if output.wants_json(args):
        output.emit_json({"id": args.lease_id, "release_requested": True})
    else:
        print(f"released lease {args.lease_id}: its cluster is destroyed and replaced")
    return 0


def extend(args: argparse.Namespace) -> int:
    try:
        if parse_duration(args.ttl).total_seconds() <= 0:
            raise ValueError("the extension must be longer than zero")
    except ValueError as error:
        raise CliError(f"--ttl: {error}", USAGE) from None
    answer = context.client(args).call(
        "PATCH", f"/v1/leases/{args.lease_id}", {"extend_ttl": args.ttl}
    )
    if output.wants_json(args):
        output.emit_json({"id": args.lease_id, **answer})
    else:
        print(f"lease {args.lease_id} now expires {output.until(answer['expires_at'])}")
    return 0
