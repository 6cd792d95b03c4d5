"""The `lessor` command. Client commands (lease, release, status, ...) arrive with the CLI issue;
`lessor apiserver` and `lessor operator` start the two server components, which are imported only
when asked for, so the client never loads server code."""

from __future__ import annotations

import argparse
import sys

from lessor import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lessor",
        description="Lease ephemeral Kubernetes clusters and agent sandboxes from warm pools.",
    )
    parser.add_argument("--version", action="version", version=f"lessor {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("version", help="print the local lessor version")
    commands.add_parser(
        "apiserver", help="run the HTTP API (gunicorn); `lessor apiserver --help`", add_help=False
    )
    commands.add_parser(
        "operator", help="run the operator; `lessor operator --help`", add_help=False
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["apiserver"]:
        from lessor.apiserver.server import main as apiserver  # noqa: PLC0415 - on demand

        return apiserver(arguments[1:])
    if arguments[:1] == ["operator"]:
        from lessor.operator.main import main as operator  # noqa: PLC0415 - on demand

        return operator(arguments[1:])
    args = build_parser().parse_args(arguments)
    if args.command == "version":
        print(f"lessor {__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
