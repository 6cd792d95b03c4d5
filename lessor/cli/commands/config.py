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

from lessor.cli import config, output
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
