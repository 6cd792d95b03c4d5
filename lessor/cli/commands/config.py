"""`lessor config`: named targets (endpoint plus auth mode) in the user's config file.

`config edit` opens `$VISUAL`/`$EDITOR` (else `vi`) on a copy of the file and saves it only if it
still validates; on a terminal it offers to re-open the editor with the error, elsewhere it fails
with the config unchanged. An editor beats a bespoke TUI here: the file is small, JSON is
self-describing, and everyone already has an editor configured.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from lessor.cli import config, output, sessions
from lessor.cli.client import tls_context
from lessor.cli.errors import USAGE, CliError
from lessor.protocol.validation_errors import describe

REDACTED = "<redacted>"


def _shown(settings: config.Config, raw: bool) -> dict[str, Any]:
    data: dict[str, Any] = settings.model_dump(by_alias=True, exclude_none=True)
    if not raw:
        for target in data["targets"].values():
            if "token" in target:
                target["token"] = REDACTED
    return data


def view(args: argparse.Namespace) -> int:
    output.emit(args, _shown(config.load(), args.raw))
    return 0


def list_targets(args: argparse.Namespace) -> int:
    settings = config.load()
    if output.wants_names(args):
        # Bare names, as `kubectl config get-contexts -o name`: what --target takes.
        output.names([(None, name) for name in sorted(settings.targets)])
        return 0
    if output.wants_json(args):
        output.emit(
            args,
            [
                {
                    "name": name,
                    "endpoint": t.endpoint,
                    "auth": t.auth,
                    "current": name == settings.current,
                }
                for name, t in sorted(settings.targets.items())
            ],
        )
        return 0
    output.table(
        ["CURRENT", "NAME", "ENDPOINT", "AUTH"],
        [
            ["*" if name == settings.current else "", name, t.endpoint, t.auth]
            for name, t in sorted(settings.targets.items())
        ],
        no_headers=args.no_headers,
    )
    return 0


def current(args: argparse.Namespace) -> int:
    settings = config.load()
    if settings.current is None:
        raise CliError("no current target: `lessor config use NAME`", USAGE)
    if output.wants_json(args):
        target = settings.target(settings.current)
        output.emit(
            args, {"name": settings.current, "endpoint": target.endpoint, "auth": target.auth}
        )
    else:
        print(settings.current)
    return 0


def use(args: argparse.Namespace) -> int:
    settings = config.load()
    settings.target(args.name)
    config.save(settings.model_copy(update={"current": args.name}))
    print(f"current target: {args.name}")
    return 0


def rename(args: argparse.Namespace) -> int:
    """`config rename OLD NEW`: the target keeps everything it holds (a static token
    included), and stays the current one if it was. NEW must be free (exit 2 otherwise, as
    `kubectl config rename-context`): replacing a target is `config set`'s job, never a rename's
    side effect. A session needs nothing: it is kept per endpoint, not per target name."""
    settings = config.load()
    settings.target(args.old)  # exit 4 when there is none
    if args.new in settings.targets:
        raise CliError(f"a target named {args.new!r} already exists: delete it first", USAGE)
    # The same order, the name changed in place.
    targets = {args.new if n == args.old else n: t for n, t in settings.targets.items()}
    current = args.new if settings.current == args.old else settings.current
    try:
        updated = config.Config.model_validate({"current": current, "targets": targets})
    except ValidationError as error:
        raise CliError(describe(error, root="config"), USAGE) from None
    config.save(updated)
    print(f"target {args.old} renamed {args.new}" + (" (current)" if current == args.new else ""))
    return 0


def delete(args: argparse.Namespace) -> int:
    """`config delete NAME`: the target leaves the config (with its static token, if it kept
    one); if it was the current target, none is current afterwards (commands then need
    --target, LESSOR_TARGET or `config use`), rather than some other target picked for the
    user.

    The session of its endpoint (sessions.json) is left alone: sessions are kept per endpoint,
    shared by every target and every `--endpoint` run addressed there, and deleting a local
    copy would not revoke it on the server; `config` never talks to the server. When no target
    is left pointing at that endpoint and a session for it is stored, a note on stderr says how
    to revoke it (`lessor --endpoint URL logout`)."""
    settings = config.load()
    target = settings.target(args.name)
    targets = {n: t for n, t in settings.targets.items() if n != args.name}
    current = None if settings.current == args.name else settings.current
    config.save(config.Config(current=current, targets=targets))
    was_current = settings.current == args.name
    print(f"target {args.name} deleted" + (": no target is current now" if was_current else ""))
    shared = any(t.endpoint == target.endpoint for t in targets.values())
    if not shared and sessions.load(target.endpoint) is not None:
        print(
            f"note: the session for {target.endpoint} is kept; "
            f"`lessor --endpoint {target.endpoint} logout` revokes it",
            file=sys.stderr,
        )
    return 0


def set_target(args: argparse.Namespace) -> int:
    settings = config.load()
    fields: dict[str, Any] = {"endpoint": args.endpoint, "auth": args.auth}
    if args.token_stdin:
        fields["token"] = sys.stdin.readline().strip()
    if args.ssh_key:
        fields["sshKey"] = args.ssh_key
    if args.ca_file:
        fields["caFile"] = str(Path(args.ca_file).expanduser().resolve())
        tls_context(fields["caFile"])  # refused now, not by every later command
    if args.oidc_issuer or args.oidc_client_id:
        oidc: dict[str, Any] = {"issuer": args.oidc_issuer, "clientId": args.oidc_client_id}
        if args.oidc_scope:
            oidc["scopes"] = args.oidc_scope
        fields["oidc"] = oidc
    if args.ci_audience or args.ci_token_variable:
        ci = {"audience": args.ci_audience, "tokenVariable": args.ci_token_variable}
        fields["ci"] = {k: v for k, v in ci.items() if v}
    if args.auth == "oidc" and "oidc" not in fields:
        raise CliError("--auth oidc needs --oidc-issuer and --oidc-client-id", USAGE)
    if args.auth == "token" and "token" not in fields:
        print("note: no --token-stdin; the token comes from LESSOR_TOKEN", file=sys.stderr)
    try:
        target = config.Target.model_validate(fields)
        targets = {**settings.targets, args.name: target}
        updated = config.Config.model_validate(
            {"current": settings.current or args.name, "targets": targets}
        )
    except ValidationError as error:
        raise CliError(describe(error, root="config"), USAGE) from None
    path = config.save(updated)
    print(
        f"target {args.name} saved in {path}"
        + (" (current)" if updated.current == args.name else "")
    )
    return 0


def _editor() -> list[str]:
    return shlex.split(os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi")


def edit(args: argparse.Namespace) -> int:
    path = config.config_path()
    text = config.render(config.load())
    with tempfile.TemporaryDirectory(prefix="lessor-config-") as directory:
        draft = Path(directory) / "config.json"
        draft.write_text(text, encoding="utf-8")
        draft.chmod(0o600)
        while True:
            if subprocess.run([*_editor(), str(draft)], check=False).returncode != 0:
                raise CliError("the editor failed; the config is unchanged", USAGE)
            edited = draft.read_text(encoding="utf-8")
            if edited == text:
                print("no changes")
                return 0
            try:
                settings = config.parse(edited, "the edited config")
            except CliError as error:
                if not sys.stdin.isatty():
                    raise CliError(f"{error}; {path} is unchanged", USAGE) from None
                print(f"lessor: {error}", file=sys.stderr)
                if input("edit again? [Y/n] ").strip().lower() in ("n", "no"):
                    raise CliError(f"{path} is unchanged", USAGE) from None
                continue
            config.save(settings)
            print(f"saved {path}")
            return 0
