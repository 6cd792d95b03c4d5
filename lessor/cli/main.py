"""The `lessor` command: parse, run one handler, turn every failure into one line and an exit
code (see `lessor.cli.errors`). `lessor apiserver` and `lessor operator` hand over to the server
components, imported only when asked for, so the client never loads server code."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from lessor.cli import completion, progress
from lessor.cli.errors import INTERRUPTED, USAGE, CliError
from lessor.cli.late_options import apply_shared
from lessor.cli.parser import build_parser


def _handler(reference: str) -> Callable[..., int]:
    module, _, function = reference.partition(":")
    handler: Callable[..., int] = getattr(importlib.import_module(module), function)
    return handler


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    servers = {"apiserver": "lessor.apiserver.server:main", "operator": "lessor.operator.main:main"}
    if arguments[:1] and arguments[0] in servers:
        try:
            server = _handler(servers[arguments[0]])
        except ModuleNotFoundError as missing:  # `pip install lessor` is the client alone
            print(
                f"lessor: `lessor {arguments[0]}` needs the server components ({missing.name} is"
                " not installed): pip install 'lessor[server]'",
                file=sys.stderr,
            )
            return USAGE
        return server(arguments[1:])
    parser = build_parser()
    if completion.requested():
        completion.complete(parser)  # answers the shell's Tab and exits
    if not arguments:  # `lessor` alone is a question: what can this do?
        parser.print_help()
        return 0
    args, unknown = parser.parse_known_args(arguments)
    if unknown:  # named, rather than a missing COMMAND when the flag came first
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.error("a COMMAND is required")
    apply_shared(args)  # read by every client this run makes
    try:
        return _handler(args.handler)(args)
    except CliError as error:
        progress.clear_all()  # a wait that failed: its line is not left under the error
        print(f"lessor: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        progress.clear_all()
        print("lessor: interrupted", file=sys.stderr)
        return INTERRUPTED
    finally:
        progress.clear_all()


if __name__ == "__main__":
    sys.exit(main())
