"""`python -m release COMMAND`: one entry point for the release's steps (docs/releasing.md).

version [X.Y.Z]      print the version and check every place agrees; or write X.Y.Z
build [DIR]          the artifacts in dist/ (or DIR), with SHA256SUMS
actionlint [FILE...] lint .github/workflows and docs/examples/github-* (actionlint is built
                     from its Go module on first use)
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    # Each command imports only what it needs: `version` runs without docker's or Go's modules
    # being loaded, and before the package it rewrites is imported.
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command == "version":
        from release import versioning  # noqa: PLC0415

        return versioning.main(rest)
    if command == "notes":
        from release import versioning  # noqa: PLC0415

        return versioning.notes(rest)
    if command == "build":
        from release import build  # noqa: PLC0415

        return build.main(rest)
    if command == "actionlint":
        from release import actionlint  # noqa: PLC0415

        return actionlint.main(rest)
    print(__doc__, file=sys.stderr)
    return 0 if command in {"-h", "--help"} else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
