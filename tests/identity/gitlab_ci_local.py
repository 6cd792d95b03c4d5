"""gitlab-ci-local, which runs a .gitlab-ci.yml's jobs on this machine as a GitLab runner would,
installed once from npm into the cache outside the repository for the tests of the shipped
GitLab CI template (tests/integration/test_gitlab_template.py).

No GitLab instance is reachable from the machines this project is tested on; gitlab-ci-local
reads the pipeline as GitLab does (`include:`, `extends:`, `before_script`/`after_script`,
variables) and runs jobs without `image:` with its shell executor, so the template runs for
real. It is a developer's tool, so it is kept in `<cache>/gitlab-ci-local-<version>/`, keyed by
the version pinned below, like the binaries built from Go modules (lessor.controlplane.binaries).
Their `build_once` insists on the Go toolchain, so this reuses its lock and its
build-aside-then-rename instead: a crash never leaves a half-installed package that looks
complete, and concurrent test sessions install it once.

`python -m tests.identity.gitlab_ci_local` installs it before the tests, outside their time
limits, and says how long that took.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from lessor.controlplane.binaries import Progress, cache_root, file_lock

PACKAGE = "gitlab-ci-local"
# 4.75.1 is the newest, but from 4.74.0 on it uses execa 10, which calls Set.prototype.union:
# Node 22. This machine and CI have Node 20, where 4.73.0 (execa 5) runs.
VERSION = "4.73.0"
MISSING_NPM = (
    f"npm (Node.js) is needed to install {PACKAGE} {VERSION}, which runs the GitLab CI "
    "template's tests, but `npm` is not on PATH; install Node.js and npm"
)
# Every run copies the project's tracked files with rsync (even for the shell executor): installed
# with apt-get when missing, as the kind suite installs docker (e2e/kind/docker_setup.py).
MISSING_TOOLS = f"{PACKAGE} runs `rsync` and `git`, and apt-get is not here to install them"


def install_dir(version: str = VERSION) -> Path:
    return cache_root() / f"{PACKAGE}-{version}"


def _executable(directory: Path) -> Path:
    return directory / "node_modules" / ".bin" / PACKAGE


def gitlab_ci_local(progress: Progress = print, version: str = VERSION) -> Path:
    """The `gitlab-ci-local` executable of `version`, installed first when it is not cached."""
    _ensure_tools(progress)
    target = install_dir(version)
    if _executable(target).is_file():
        return _executable(target)
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(MISSING_NPM)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with file_lock(root / f"{PACKAGE}.lock"):
        if not _executable(target).is_file():
            _install(npm, version, target, progress)
    return _executable(target)


def _ensure_tools(progress: Progress) -> None:
    missing = [tool for tool in ("rsync", "git") if shutil.which(tool) is None]
    if not missing:
        return
    if shutil.which("apt-get") is None:
        raise RuntimeError(MISSING_TOOLS)
    progress(f"installing {' '.join(missing)} with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", *missing]):
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"`{' '.join(command)}` failed: {last}")


def _install(npm: str, version: str, target: Path, progress: Progress) -> None:
    """npm installs into a scratch directory that is renamed into place once complete (npm's
    .bin links are relative, so they survive the rename)."""
    progress(f"installing {PACKAGE}@{version} into {target}")
    with tempfile.TemporaryDirectory(prefix="npm-", dir=target.parent) as scratch:
        out = Path(scratch) / "out"
        command = [npm, "install", "--prefix", str(out), "--no-audit", "--no-fund"]
        result = subprocess.run(
            [*command, f"{PACKAGE}@{version}"],
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        if result.returncode != 0 or not _executable(out).is_file():
            raise RuntimeError(
                f"`npm install {PACKAGE}@{version}` failed:\n{result.stderr[-4000:]}"
            )
        if target.exists():
            shutil.rmtree(target)
        out.rename(target)


def main() -> None:
    started = time.monotonic()
    executable = gitlab_ci_local()
    print(f"{PACKAGE} {VERSION}: {executable} ({time.monotonic() - started:.1f}s)")


if __name__ == "__main__":
    main()
