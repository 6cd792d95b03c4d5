"""`python -m lessor.resources write|check [DIR] [--chart CHART]`: generate the CRDs, or check
them for drift; with `--chart`, also the copy in a Helm chart's `crds/` (charts/lessor)."""

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
    parser.add_argument(
        "--chart",
        type=Path,
        help="also a Helm chart's crds/ (the CRDs without the Kustomization), e.g. charts/lessor",
    )
    args = parser.parse_args(argv)
    # A chart's crds/ is what Helm installs before the templates; it has no Kustomization.
    targets = [(args.directory, True)]
    if args.chart is not None:
        targets.append((args.chart / "crds", False))
    if args.command == "write":
        for directory, kustomization in targets:
            for name in write(directory, kustomization=kustomization):
                print(directory / name)
        return 0
    failed = False
    for directory, kustomization in targets:
        problems = drift(directory, kustomization=kustomization)
        for problem in problems:
            print(f"{directory}/{problem}", file=sys.stderr)
        if problems:
            failed = True
        else:
            print(f"{directory}: up to date")
    if failed:
        chart = f" --chart {args.chart}" if args.chart is not None else ""
        print(f"regenerate with: python -m lessor.resources write crds{chart}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
