"""Options written between a command's positional and `--` (`lessor with-lease POOL --ttl 30m
-- make e2e`, `lessor exec LEASE --timeout 5m -- ls`), and the options every command shares.

argparse hands everything after the positional to the command line (REMAINDER), so the options
there are read here, with the meaning they have before it: the command's own, and the shared
ones (`--target`, `--endpoint`, `--request-timeout`, `--retry-budget`, `-v`). An option unknown
there is named in one line, never argparse's usage and a second error.
"""

from __future__ import annotations

import argparse
import os

from lessor.cli.debug import DEBUG_ENV
from lessor.cli.errors import USAGE, CliError
from lessor.cli.limits import REQUEST_TIMEOUT_ENV, RETRY_BUDGET_ENV

SHARED_VALUES = ("--target", "--endpoint", "--request-timeout", "--retry-budget")


def command_line(
    args: argparse.Namespace,
    values: tuple[str, ...],
    switches: tuple[str, ...] = (),
    *,
    example: str,
    output: bool = False,
) -> list[str]:
    """The command after `--`; the options before it set on `args` (`values` take a value,
    `switches` none; `output`: `-o/--output text|json`)."""
    argv = list(args.argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    elif argv and argv[0].startswith("-"):
        if "--" not in argv:
            raise CliError(f"end the options with --, then give the command: -- {example}", USAGE)
        split = argv.index("--")
        options, argv = argv[:split], argv[split + 1 :]
        late = argparse.ArgumentParser(add_help=False, exit_on_error=False)
        for flag in (*values, *SHARED_VALUES):
            late.add_argument(flag)
        for flag in switches:
            late.add_argument(flag, action="store_true", default=None)
        late.add_argument("-v", "--verbose", action="store_true", default=None)
        if output:
            late.add_argument("-o", "--output", choices=("text", "json"))
        try:
            parsed, unknown = late.parse_known_args(options)
        except argparse.ArgumentError as error:
            raise CliError(f"before --: {error}", USAGE) from None
        if unknown:
            raise CliError(f"unknown options before --: {' '.join(unknown)}", USAGE)
        for name, value in vars(parsed).items():
            if value is not None:
                setattr(args, name, value)
    if not argv:
        raise CliError(f"give the command after --, for example: -- {example}", USAGE)
    apply_shared(args)
    return argv


def apply_shared(args: argparse.Namespace) -> None:
    """The shared options that every HTTP client of this run reads from the environment."""
    if getattr(args, "verbose", False):
        os.environ[DEBUG_ENV] = "1"
    for flag, variable in (
        ("request_timeout", REQUEST_TIMEOUT_ENV),
        ("retry_budget", RETRY_BUDGET_ENV),
    ):
        if getattr(args, flag, None):
            os.environ[variable] = getattr(args, flag)
