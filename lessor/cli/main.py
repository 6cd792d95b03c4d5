"""The `lessor` command. Its full set of commands arrives with the CLI; this is the entry point."""

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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "version":
        print(f"lessor {__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
