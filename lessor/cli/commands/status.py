"""`lessor status` and `lessor version`: what the endpoint is, and what the caller holds there."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path
from typing import Any

import lessor
from lessor import __version__
from lessor.cli import answers, context, output
from lessor.cli.answers import as_sent
from lessor.cli.client import Client, Credential
from lessor.cli.errors import CliError
from lessor.cli.sessions import Session
from lessor.protocol.phases import SANDBOX_LEASE
from lessor.protocol.responses import LeaseSummary, SandboxLease, Status, StatusPool


def _credential(client: Client) -> Credential | None:
    """Status needs no credential; use one only if the target has one ready."""
    try:
        return client.credential()
    except CliError:
        return None


def _session_line(session: Session | None, authenticated: bool) -> str:
    if session is None:
        return (
            "none; each request carries the target's credential"
            if authenticated
            else ("none (`lessor login`)")
        )
    return f"{session.identity} via {session.method}, expires {output.until(session.expires_at)}"


def status(args: argparse.Namespace) -> int:
    name, target = context.target(args)
    client = Client(target)
    credential = _credential(client)
    answer = client.send("GET", "/v1/status", credential=credential)
    note = None
    if answer.status == 401 and credential is not None:
        note = "your credentials were refused; showing the anonymous view"
        credential, answer = None, client.send("GET", "/v1/status")
    if answer.status != 200:
        raise CliError(f"{target.endpoint}/v1/status answered {answer.status}")
    body = answers.read(Status, answer.body, "GET", "/v1/status")
    leases = client.get_models("/v1/leases", LeaseSummary) if credential is not None else None
    sandbox_leases = None
    if credential is not None and body.sandbox.served:
        sandbox_leases = [
            lease
            for lease in client.get_models("/v1/sandbox-leases", SandboxLease)
            if lease.phase not in SANDBOX_LEASE.finished
        ]
    session = client.session
    result = {
        "endpoint": target.endpoint,
        "target": name,
        "version": body.version,
        "auth": as_sent(body.auth),
        "session": (
            {
                "identity": session.identity,
                "method": session.method,
                "expires_at": session.expires_at,
            }
            if session
            else None
        ),
        "pools": [as_sent(pool) for pool in body.pools],
        "leases": None if leases is None else [as_sent(lease) for lease in leases],
        "sandbox_leases": (
            None if sandbox_leases is None else [as_sent(lease) for lease in sandbox_leases]
        ),
    }
    if output.wants_names(args):
        output.names(
            [("pool", pool.name) for pool in body.pools]
            + [("lease", lease.id) for lease in leases or []]
            + [("sandbox", lease.id) for lease in sandbox_leases or []]
        )
        return 0
    if output.wants_json(args):
        output.emit(args, result)
        return 0
    output.fields(
        [
            ("endpoint", target.endpoint + (f" (target {name})" if name else "")),
            ("version", body.version),
            ("auth methods", ", ".join(body.auth.methods) or "-"),
            ("sessions", ", ".join(body.auth.sessions) or "-"),
            ("session", _session_line(session, credential is not None)),
        ]
    )
    if note:
        print(f"note: {note}")
    print()
    _pools_table(body.pools, no_headers=args.no_headers)
    if leases is not None:
        print()
        rows = [[row.id, row.profile, row.phase, row.alias, row.expires_at] for row in leases]
        rows += [
            [row.id, row.pool, row.phase, row.alias, row.expires_at] for row in sandbox_leases or []
        ]
        if rows:
            output.table(
                ["LEASE", "POOL", "PHASE", "NAME", "EXPIRES"], rows, no_headers=args.no_headers
            )
        else:
            print("no active leases")
    return 0


def _pools_table(pools: list[StatusPool], *, no_headers: bool) -> None:
    """The pools, with their phase and quarantined count where the server says them (one
    that shows the caller pool details)."""
    detailed = any("phase" in pool.model_fields_set for pool in pools)
    headers = ["POOL", "READY", "LEASED", "CREATING"] + (
        ["PHASE", "QUARANTINED"] if detailed else []
    )
    rows: list[list[object]] = [
        [pool.name, pool.ready, pool.leased, pool.creating]
        + ([pool.phase, pool.quarantined] if detailed else [])
        for pool in pools
    ]
    output.table(headers, rows, no_headers=no_headers)


# `git rev-parse` answers in milliseconds; a hung filesystem or a credential prompt must not
# hold `lessor version` up for longer than this.
GIT_TIMEOUT = 2.0


def source_commit(checkout: Path | None = None) -> str | None:
    """The abbreviated commit of the checkout lessor runs from, else None.

    Between releases every build says the same version, so a bug report from a checkout (or an
    editable install) needs the commit to say which code it is. `checkout` is the directory
    holding the `lessor` package; it must be the top of a git work tree itself (its own `.git`):
    an installed wheel lives in site-packages, which may well be inside some other repository
    (tox's environments are inside this one), whose commit says nothing about the wheel. No
    git, no repository, or a git that fails or hangs: None, and `lessor version` still works.
    """
    if checkout is None:
        checkout = Path(lessor.__file__).resolve().parent.parent
    if not (checkout / ".git").exists():
        return None
    try:
        found = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = found.stdout.strip()
    return commit if found.returncode == 0 and commit else None


def _server_version(body: object) -> str | None:
    """The server's version, read alone from its status rather than through the Status model:
    `lessor version` is what one runs when client and server may not agree, so it names the
    server's version even when the rest of its status does not fit this client's model."""
    version = body.get("version") if isinstance(body, dict) else None
    return version if isinstance(version, str) else None


def version(args: argparse.Namespace) -> int:
    result: dict[str, Any] = {"client": __version__, "endpoint": None, "server": None}
    commit = source_commit()
    if commit is not None:
        # Only from a checkout: an installed wheel's output is what it always was.
        result["commit"] = commit
    try:
        _, target = context.target(args)
        result["endpoint"] = target.endpoint
        answer = Client(target).send("GET", "/v1/status")
        server = _server_version(answer.body) if answer.status == 200 else None
        if server is not None:
            result["server"] = server
        elif answer.status == 200:
            result["error"] = "/v1/status answered no version"
        else:
            result["error"] = f"/v1/status answered {answer.status}"
    except CliError as error:
        result["error"] = str(error)
    if output.wants_json(args):
        output.emit(args, result)
        return 0
    print(f"lessor {__version__}" + (f" (commit {commit})" if commit else ""))
    if result["server"]:
        print(f"endpoint {result['endpoint']}: lessor {result['server']}")
    elif result["endpoint"]:
        print(f"endpoint {result['endpoint']}: unreachable ({result['error']})")
    return 0
