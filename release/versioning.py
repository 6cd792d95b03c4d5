"""lessor's version, and every file that must carry it: `python -m release version X.Y.Z`.

`lessor/__init__.py` is the one source (setup.cfg reads `__version__` with `attr:`, so it is
the wheel's and the sdist's version, and the CLI and the API server report it). The other
places cannot read it: YAML that kustomize and Helm take as is, and the Dockerfile's default
build argument, which labels the image. They are written from it by this module, one regular
expression each, so a comment or a neighbouring key is never touched, and each must match
exactly once: a file reshaped so that its version line is gone, or doubled, fails loudly here
rather than being released with the old number. tests/unit/test_release.py fails when any of
them differs from `lessor.__version__`.

Two generated files carry the version too, and have tests that fail when they are stale: the
man pages (man/man1, from the CLI's parser: their header) and docs/api-reference.md (from the
API's OpenAPI document: its `info.version`). `version` regenerates them with their own
generators rather than editing them.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# SemVer's release form only: a pre-release is spelt differently by PEP 440 (1.0.0rc1), which the
# wheel needs, and SemVer (1.0.0-rc.1), which Helm needs, so one string cannot serve both.
VERSION = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)")


@dataclass(frozen=True)
class Place:
    """One version string in one file: `pattern` matches its line, its one group the version."""

    path: str
    pattern: str
    what: str

    def file(self, root: Path = ROOT) -> Path:
        return root / self.path

    def _matches(self, text: str) -> list[re.Match[str]]:
        found = list(re.finditer(self.pattern, text, re.MULTILINE))
        if len(found) != 1:
            raise ValueError(
                f"{self.path}: expected one line matching {self.pattern!r} ({self.what}), "
                f"found {len(found)}"
            )
        return found

    def read(self, root: Path = ROOT) -> str:
        return self._matches(self.file(root).read_text())[0].group(1)

    def replaced(self, text: str, version: str) -> str:
        match = self._matches(text)[0]
        return text[: match.start(1)] + version + text[match.end(1) :]


SOURCE = Place(
    "lessor/__init__.py", r'^__version__ = "([^"]+)"$', "the package: the wheel's version"
)
PLACES = (
    SOURCE,
    Place("charts/lessor/Chart.yaml", r"^version: (\S+)$", "the chart's version"),
    Place(
        "charts/lessor/Chart.yaml", r'^appVersion: "([^"]+)"$', "the chart's appVersion: its tag"
    ),
    Place(
        "manifests/base/kustomization.yaml",
        r"^    newTag: (\S+)$",
        "the kustomize base's image tag",
    ),
    Place(
        "manifests/overlays/production-like/kustomization.yaml",
        r"^    newTag: (\S+)$",
        "the production-like overlay's pinned image tag",
    ),
    Place(
        "charts/lessor/ci/production-like-values.yaml",
        r"^  tag: (\S+)$",
        "the production-like values' pinned image tag",
    ),
    Place(
        "Dockerfile",
        r"^ARG VERSION=(\S+)$",
        "the image's org.opencontainers.image.version label",
    ),
)


def current(root: Path = ROOT) -> str:
    """The version in lessor/__init__.py, read from the file (not imported: a process that has
    imported lessor before a bump would report the old one)."""
    return SOURCE.read(root)


def disagreements(root: Path = ROOT) -> list[str]:
    """One line for each place whose version is not the source's; empty when all agree."""
    version = current(root)
    return [
        f"{place.path}: {place.what} is {found}, lessor/__init__.py says {version}"
        for place in PLACES
        if (found := place.read(root)) != version
    ]


def write(version: str, root: Path = ROOT) -> list[Path]:
    """Write `version` into every place; returns the files that changed. Every file is checked
    before any is written, so a refused bump leaves them all as they were."""
    if VERSION.fullmatch(version) is None:
        raise ValueError(f"{version!r} is not a release version X.Y.Z (SemVer, docs/releasing.md)")
    texts: dict[Path, str] = {}
    for place in PLACES:
        file = place.file(root)
        texts[file] = place.replaced(texts[file] if file in texts else file.read_text(), version)
    changed = [file for file, text in texts.items() if file.read_text() != text]
    for file in changed:
        file.write_text(texts[file])
    return changed


# The generators of the files that carry the version, each run as its docstring says.
GENERATED = (
    ("lessor.cli.manpages", "write", "man/man1"),
    ("lessor.apiserver.routes.reference", "write", "docs/api-reference.md"),
)


def write_generated(root: Path = ROOT) -> None:
    """Regenerate the man pages and the API reference, each in a new process, which imports the
    lessor/__init__.py just written (this one has the old version imported, if any)."""
    for module, *args in GENERATED:
        subprocess.run([sys.executable, "-m", module, *args], cwd=root, check=True, timeout=300)
        print(f"wrote {args[-1]} ({module})")


def changelog_entry(version: str, root: Path = ROOT) -> str:
    """The CHANGELOG.md entry of `version`, without its heading: the GitHub release's notes."""
    text = (root / "CHANGELOG.md").read_text()
    heading = re.search(rf"^## \[{re.escape(version)}\].*$", text, re.MULTILINE)
    if heading is None:
        raise ValueError(f"CHANGELOG.md has no entry for {version}")
    end = re.compile(r"^(## \[|\[[^\]]+\]: )", re.MULTILINE).search(text, heading.end())
    return text[heading.end() : end.start() if end else len(text)].strip() + "\n"


def notes(argv: list[str]) -> int:
    """`python -m release notes [X.Y.Z]`: the version's CHANGELOG.md entry (the current one's)."""
    try:
        sys.stdout.write(changelog_entry(argv[0] if argv else current()))
    except ValueError as error:
        print(f"release notes: {error}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    """`python -m release version` prints the version and whether every place agrees;
    `python -m release version X.Y.Z` writes it everywhere."""
    if not argv:
        print(current())
        problems = disagreements()
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    if len(argv) != 1:
        print("usage: python -m release version [X.Y.Z]", file=sys.stderr)
        return 2
    previous = current()
    try:
        changed = write(argv[0])
    except ValueError as error:
        print(f"release version: {error}", file=sys.stderr)
        return 2
    for file in changed:
        print(f"wrote {file.relative_to(ROOT)}")
    try:
        write_generated()
    except (OSError, subprocess.SubprocessError) as error:
        print(f"release version: regenerating failed ({error}); run it again", file=sys.stderr)
        return 1
    print(f"lessor {previous} -> {argv[0]}; now add its entry to CHANGELOG.md (docs/releasing.md)")
    return 0
