"""`python -m lessor.resources write|check [DIR] [--chart CHART]`: generate the CRDs, or check
them for drift; with `--chart`, also the copy in a Helm chart's `crds/` (charts/lessor).

`python -m lessor.resources write|check chart-readme --chart CHART`: the values table of the
chart's README.md, generated from its values.yaml and values.schema.json (chart_readme.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lessor.resources import chart_readme
from lessor.resources.crdgen import drift, write

# In place of the CRDs' directory: the chart's README (a name no CRD directory of lessor has).
CHART_README = Path("chart-readme")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lessor.resources", description="CRDs generated from lessor's models."
    )
    parser.add_argument("command", choices=["write", "check"])
    parser.add_argument(
        "directory",
        nargs="?",
        type=Path,
        default=Path("crds"),
        help="where the CRDs go (default: crds), or `chart-readme`: the values table of "
        "--chart's README.md",
    )
    parser.add_argument(
        "--chart",
        type=Path,
        help="also a Helm chart's crds/ (the CRDs without the Kustomization), e.g. charts/lessor",
    )
    args = parser.parse_args(argv)
    if args.directory == CHART_README:
        if args.chart is None:
            parser.error("chart-readme needs --chart, e.g. --chart charts/lessor")
        return _chart_readme(args.command, args.chart)
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


def _chart_readme(command: str, chart: Path) -> int:
    readme = chart / "README.md"
    try:
        if command == "write":
            print(f"{readme}: {'written' if chart_readme.write(chart) else 'unchanged'}")
            return 0
        if chart_readme.stale(chart):
            print(
                f"{readme}: its values table differs from values.yaml and values.schema.json",
                file=sys.stderr,
            )
            print(
                f"regenerate with: python -m lessor.resources write chart-readme --chart {chart}",
                file=sys.stderr,
            )
            return 1
    except chart_readme.ChartReadmeError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"{readme}: up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
