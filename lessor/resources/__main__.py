"""`python -m lessor.resources write|check [DIR]`: generate the CRDs, or check them for drift."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lessor.resources.crdgen import drift, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lessor.resources", description="CRDs generated from lessor's models."
    )
    parser.add_argument("command", choices=["write", "check"])
    parser.add_argument("directory", nargs="?", type=Path, default=Path("crds"))
    args = parser.parse_args(argv)
    if args.command == "write":
        for name in write(args.directory):
            print(args.directory / name)
        return 0
    problems = drift(args.directory)
    for problem in problems:
        print(f"{args.directory}/{problem}", file=sys.stderr)
    if problems:
        print("regenerate with: python -m lessor.resources write crds", file=sys.stderr)
        return 1
    print(f"{args.directory}: up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
