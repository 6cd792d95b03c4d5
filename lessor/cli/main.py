"""The `lessor` command: parse, run one handler, turn every failure into one line and an exit
code (see `lessor.cli.errors`). `lessor apiserver` and `lessor operator` hand over to the server
components, imported only when asked for, so the client never loads server code."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable

from lessor.cli import completion
from lessor.cli.debug import DEBUG_ENV
from lessor.cli.errors import INTERRUPTED, CliError
from lessor.cli.parser import build_parser


def _handler(reference: str) -> Callable[..., int]:
    module, _, function = reference.partition(":")
    handler: Callable[..., int] = getattr(importlib.import_module(module), function)
    return handler


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["apiserver"]:
        return _handler("lessor.apiserver.server:main")(arguments[1:])
    if arguments[:1] == ["operator"]:
        return _handler("lessor.operator.main:main")(arguments[1:])
    parser = build_parser()
    if completion.requested():
        completion.complete(parser)  # answers the shell's Tab and exits
    args = parser.parse_args(arguments)
    if getattr(args, "verbose", False):
        os.environ[DEBUG_ENV] = "1"  # every client this run makes traces its exchanges
    try:
        return _handler(args.handler)(args)
    except CliError as error:
        print(f"lessor: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        print("lessor: interrupted", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
