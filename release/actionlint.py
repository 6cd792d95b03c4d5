"""actionlint, the linter of GitHub Actions workflows, built from its Go module into the cache
outside the repository: `python -m release actionlint` lints .github/workflows with it.

The release workflow (.github/workflows/release.yml) cannot run here (it publishes from a tag),
so a checker is the only way to know, before a tag is pushed, that it is a valid workflow: its
syntax, the expressions and contexts it uses, the actions' inputs, and its shell steps. Like
Helm (lessor/controlplane/helm.py) it is built with `go install
github.com/rhysd/actionlint/cmd/actionlint@<version>` (its go.mod has no replace directives),
since no release binary is downloaded where this project is developed, and kept in
`<cache>/actionlint-<version>/actionlint`, keyed by the version pinned below. It is a
developer's tool, not lessor's, so it lives under release/ and not in the package.

Measured on two cores (go 1.26.8): the first build 21 s with empty Go module and build caches
(10 s where the build cache already held the standard library and the modules of the other
builds here); finding it cached 0.2 s, the Python process included; linting the release
workflow 0.1 s.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from lessor.controlplane.binaries import Progress, build_once, cache_root, run_go

ACTIONLINT_MODULE = "github.com/rhysd/actionlint"
# The newest the Go module proxy served when this was written (v1.7.12).
ACTIONLINT_VERSION = "v1.7.12"
ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
# The documented example of the GitHub Action (actions/lease): actionlint also checks its use of
# the action against actions/lease/action.yml (inputs, runtime).
EXAMPLES = ROOT / "docs" / "examples"


def actionlint_dir(version: str = ACTIONLINT_VERSION) -> Path:
    return cache_root() / f"actionlint-{version}"


def find_actionlint(version: str = ACTIONLINT_VERSION) -> Path | None:
    """The cached actionlint binary if it is there, else None."""
    binary = actionlint_dir(version) / "actionlint"
    return binary if binary.is_file() else None


def ensure_actionlint(progress: Progress = print, version: str = ACTIONLINT_VERSION) -> Path:
    """The pinned actionlint binary, built first when it is not cached."""

    def build(go: str, work: Path, out: Path) -> None:
        # `go install` has no -o: GOBIN says where the binary goes. -X stamps the version as
        # actionlint's own release builds do (`actionlint -version`).
        run_go(
            go,
            [
                "install",
                "-trimpath",
                f"-ldflags=-s -w -X {ACTIONLINT_MODULE}.version={version}",
                f"{ACTIONLINT_MODULE}/cmd/actionlint@{version}",
            ],
            work,
            progress,
            env={"GOBIN": str(out)},
        )

    directory = build_once(
        actionlint_dir(version),
        lambda: find_actionlint(version) is not None,
        build,
        what=f"actionlint {version}",
        missing_go=(
            "the Go toolchain (go 1.25 or newer) is needed to build actionlint, which lints "
            ".github/workflows, but `go` is not on PATH; install Go"
        ),
        progress=progress,
    )
    return directory / "actionlint"


def lint(paths: Sequence[Path], progress: Progress = print) -> subprocess.CompletedProcess[str]:
    """actionlint's verdict on `paths` (its exit status 1 with one line per finding when any is
    wrong). shellcheck and pyflakes, which it runs on `run:` steps when they are on PATH, are
    used when present: a missing one is not an error."""
    binary = ensure_actionlint(progress)
    return subprocess.run(
        [str(binary), "-no-color", *map(str, paths)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=120,
    )


def main(argv: Sequence[str]) -> int:
    """`python -m release actionlint [FILE...]`: the workflows in .github/workflows and
    docs/examples (github-*) by default."""
    found = [*WORKFLOWS.glob("*"), *EXAMPLES.glob("github-*")]
    paths = [Path(arg) for arg in argv] or sorted(p for p in found if p.suffix in {".yml", ".yaml"})
    if not paths:
        print(f"actionlint: no workflow in {WORKFLOWS}", file=sys.stderr)
        return 1
    result = lint(paths, lambda message: print(message, file=sys.stderr, flush=True))
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.returncode == 0:
        print(f"actionlint: {len(paths)} workflow(s) valid", file=sys.stderr)
    return result.returncode
