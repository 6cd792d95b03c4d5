"""The Sandbox commands (run, exec, logs, cancel, attach, port-forward) are part of the command
line already, so scripts and man pages see the final interface; they do their work once the
service serves Sandbox leases and executions."""

from __future__ import annotations

import argparse

from lessor.cli.errors import SERVER, CliError


def not_served(args: argparse.Namespace) -> int:
    raise CliError(
        f"`lessor {args.command}` works on Sandbox leases, which this version of lessor does not "
        "serve yet; cluster leases work with `lessor lease`",
        SERVER,
    )
