"""The release's artifacts in dist/: `python -m release build` (`make release`, `tox -e release`).

    lessor-X.Y.Z.tar.gz              the sdist            (uv build)
    lessor-X.Y.Z-py3-none-any.whl    the wheel, built from that sdist
    lessor-image-X.Y.Z.oci.tar       the image lessor:X.Y.Z, an OCI layout docker can load too
    lessor-X.Y.Z.tgz                 the Helm chart       (helm package)
    SHA256SUMS                       `sha256sum -c SHA256SUMS` checks them

The wheel and the sdist come from `uv build`. uv is already what tox-uv runs on (the Makefile's
`tools`), and the release environment's one dependency; it builds the sdist first and the wheel
from the unpacked sdist (so a file the sdist leaves out, a man page, fails here and not for a
user installing from PyPI), in an isolated environment of the build backend pyproject.toml asks
for, which it keeps in its cache: after one run it builds with no network at all
(UV_OFFLINE=1: 3.5 s). `pip wheel --no-deps` makes no sdist, `python -m build` is not
installed, and setuptools' own PEP 517 hooks would need setuptools >= 69 in the environment,
which a Python 3.12 virtualenv no longer seeds. SOURCE_DATE_EPOCH is the commit's time, so the
wheel is the same file however often it is built (the sdist and the chart still record the
time they were made).

The image is e2e/kind/lessor_image.py's build (the Debian base made here and wheels over
loopback, or LESSOR_IMAGE_BASE, e.g. python:3.12-slim, where a registry answers: the release
workflow) tagged lessor:X.Y.Z, with its OCI labels' revision the commit (full) and its source
the GitHub repository when GITHUB_REPOSITORY says which (in Actions), else the Dockerfile's.

Every step is skipped or quick when its input has not changed: the image when its key label
matches, its archive when it holds that image, Helm when it is cached.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from e2e.kind import lessor_image
from e2e.kind.docker_setup import DockerSetupError
from lessor.controlplane.binaries import Progress
from lessor.controlplane.errors import ControlPlaneError
from lessor.controlplane.helm import ensure_helm
from release import versioning

ROOT = versioning.ROOT
DIST = ROOT / "dist"
CHART = ROOT / "charts" / "lessor"
SUMS = "SHA256SUMS"


class ReleaseError(Exception):
    """A step of the release build failed; the message says which."""


def git(*args: str) -> str | None:
    """`git args` in the repository, its output; None outside a checkout or when git fails."""
    try:
        found = subprocess.run(
            ["git", "-C", str(ROOT), *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return found.stdout.strip() if found.returncode == 0 else None


def revision(progress: Progress) -> str:
    """The full commit the artifacts are built from ("" outside a checkout: an sdist's)."""
    commit = git("rev-parse", "HEAD") or ""
    if commit and git("status", "--porcelain", "--untracked-files=no"):
        progress(f"warning: uncommitted changes; the image's revision {commit[:12]} lacks them")
    return commit


def source() -> str:
    """The repository's address in GitHub Actions (a fork publishes with its own), else ""
    (the Dockerfile's default)."""
    server, repository = os.environ.get("GITHUB_SERVER_URL"), os.environ.get("GITHUB_REPOSITORY")
    return f"{server}/{repository}" if server and repository else ""


def uv() -> str:
    """The uv binary: the release environment's (tox -e release installs it), else PATH's."""
    scripts = Path(sys.executable).parent
    found = shutil.which("uv", path=f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        raise ReleaseError("uv is needed to build the wheel and sdist: `tox -e release` has it")
    return found


def python_distributions(version: str, dist: Path, progress: Progress) -> list[Path]:
    """The sdist, and the wheel built from it."""
    progress("building the sdist and the wheel (uv build)")
    epoch = git("log", "-1", "--format=%ct")
    env = {**os.environ, **({"SOURCE_DATE_EPOCH": epoch} if epoch else {})}
    with tempfile.TemporaryDirectory(prefix=".uv-build-", dir=dist) as scratch:
        result = subprocess.run(
            [uv(), "build", "--quiet", "--out-dir", scratch, str(ROOT)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=600,
        )
        if result.returncode != 0:
            raise ReleaseError(f"uv build failed:\n{result.stderr.strip()[-2000:]}")
        # uv also writes a .gitignore of `*` into the directory: not an artifact.
        built = sorted(p for p in Path(scratch).iterdir() if not p.name.startswith("."))
        expected = [f"lessor-{version}-py3-none-any.whl", f"lessor-{version}.tar.gz"]
        if [path.name for path in built] != expected:
            raise ReleaseError(f"uv build made {[p.name for p in built]}, not {expected}")
        return [path.replace(dist / path.name) for path in built]


def chart(version: str, dist: Path, progress: Progress) -> list[Path]:
    """charts/lessor packaged by Helm (its name and version come from Chart.yaml)."""
    helm = ensure_helm(progress)
    progress("packaging the chart (helm package)")
    result = subprocess.run(
        [str(helm), "package", str(CHART), "--destination", str(dist)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    packaged = dist / f"lessor-{version}.tgz"
    if result.returncode != 0 or not packaged.is_file():
        raise ReleaseError(f"helm package failed: {result.stderr.strip()[-2000:]}")
    return [packaged]


def image(version: str, dist: Path, progress: Progress) -> list[Path]:
    """lessor:X.Y.Z, built (or found) and saved as an OCI archive."""
    labels = lessor_image.Labels(revision=revision(progress), source=source())
    tag = lessor_image.build(
        progress,
        tag=f"lessor:{version}",
        labels=labels,
        base=os.environ.get("LESSOR_IMAGE_BASE") or None,
    )
    return [lessor_image.save_archive(tag, dist / f"lessor-image-{version}.oci.tar", progress)]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_sums(artifacts: list[Path], dist: Path) -> Path:
    """SHA256SUMS in sha256sum's own format: `cd dist && sha256sum -c SHA256SUMS`."""
    lines = [f"{sha256(path)}  {path.name}\n" for path in sorted(artifacts)]
    (dist / SUMS).write_text("".join(lines))
    return dist / SUMS


def clear_stale(dist: Path, keep: set[str]) -> None:
    """Leave dist/ holding this release only: an older version's files would be attached to
    this release and uploaded to PyPI with it. Only what a release build writes is removed
    (lessor-*, SHA256SUMS); `keep` (this version's image archive) may be reused as it is."""
    for path in dist.iterdir():
        ours = path.name.startswith("lessor-") or path.name == SUMS
        if ours and path.is_file() and path.name not in keep:
            path.unlink()


def build(dist: Path = DIST, progress: Progress = print) -> list[Path]:
    """Every artifact of the version in lessor/__init__.py into `dist`; refuses when a place
    that carries the version disagrees with it (`python -m release version X.Y.Z` first)."""
    problems = versioning.disagreements()
    if problems:
        raise ReleaseError("the version is not the same everywhere:\n  " + "\n  ".join(problems))
    version = versioning.current()
    dist.mkdir(parents=True, exist_ok=True)
    clear_stale(dist, {f"lessor-image-{version}.oci.tar"})
    steps = []
    artifacts: list[Path] = []
    for name, step in (
        ("wheel and sdist", python_distributions),
        ("chart", chart),
        ("image", image),
    ):
        started = time.monotonic()
        artifacts.extend(step(version, dist, progress))
        steps.append(f"{name} {time.monotonic() - started:.1f}s")
    write_sums(artifacts, dist)
    progress(f"lessor {version}: {', '.join(steps)}")
    return artifacts


def report(dist: Path) -> str:
    """What the release made, as a person reads it: the sums file's lines, with sizes."""
    rows = [f"{dist}/:"]
    for line in (dist / SUMS).read_text().splitlines():
        digest, name = line.split("  ", 1)
        rows.append(f"  {name:<34} {(dist / name).stat().st_size / 1e6:8.1f} MB  sha256:{digest}")
    return "\n".join([*rows, f"  {SUMS} (`cd {dist.name} && sha256sum -c {SUMS}`)"])


def main(argv: list[str]) -> int:
    """`python -m release build [DIR]`: dist/ by default."""
    if len(argv) > 1:
        print("usage: python -m release build [DIR]", file=sys.stderr)
        return 2
    dist = Path(argv[0]).resolve() if argv else DIST
    started = time.monotonic()

    def progress(message: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    try:
        build(dist, progress)
    except (ReleaseError, ControlPlaneError, DockerSetupError, OSError) as error:
        print(f"release build: {error}", file=sys.stderr)
        return 1
    print(report(dist))
    progress("done")
    return 0
