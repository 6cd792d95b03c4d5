"""The release (docs/releasing.md): one version everywhere, `lessor version`'s commit, the
artifacts' checksums, and actionlint's verdict on workflows."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml

import lessor
from e2e.kind import lessor_image
from lessor.cli.commands import status
from lessor.controlplane.helm import helm_version
from release import actionlint, build, versioning

ROOT = Path(__file__).resolve().parents[2]
VERSION = lessor.__version__


def test_every_place_that_carries_the_version_says_the_packages() -> None:
    assert versioning.current() == VERSION
    assert versioning.disagreements() == [], "python -m release version X.Y.Z writes them all"


def test_the_wheels_version_is_the_packages() -> None:
    """setuptools takes the wheel's and the sdist's version from lessor/__init__.py itself, and
    the wheel tox installs says so in its metadata."""
    setup = (ROOT / "setup.cfg").read_text()
    assert re.search(r"^version = attr: lessor\.__version__$", setup, re.MULTILINE)
    wheels = [
        found
        for found in metadata.distributions(name="lessor")
        # A wheel's .dist-info, not a source tree's lessor.egg-info (left by any setuptools
        # build) nor an editable install's, whose metadata is as old as its `pip install -e`.
        if found.read_text("WHEEL") is not None
        and not json.loads(found.read_text("direct_url.json") or "{}")
        .get("dir_info", {})
        .get("editable")
    ]
    if not wheels and "TOX_ENV_NAME" not in os.environ:
        pytest.skip("lessor is not installed from a wheel here (tox installs one)")
    assert [found.version for found in wheels] == [VERSION]


def test_the_chart_the_manifests_and_the_image_say_the_packages_version() -> None:
    """Read as Helm, kustomize and docker read them, not with the writer's expressions."""
    chart = yaml.safe_load((ROOT / "charts/lessor/Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)
    for overlay in ("manifests/base", "manifests/overlays/production-like"):
        images = yaml.safe_load((ROOT / overlay / "kustomization.yaml").read_text())["images"]
        assert [image["newTag"] for image in images] == [VERSION], overlay
    values = yaml.safe_load((ROOT / "charts/lessor/ci/production-like-values.yaml").read_text())
    assert values["image"]["tag"] == VERSION
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"ARG VERSION={VERSION}\n" in dockerfile
    assert "org.opencontainers.image.version=${VERSION}" in dockerfile
    # The helm the image ships for chart addons is the one pinned beside the control plane's.
    assert f"ARG HELM_VERSION={helm_version()}\n" in dockerfile
    # The image built here (lessor:dev and a release's) passes the version explicitly.
    assert f"--build-arg=VERSION={VERSION}" in lessor_image.Labels().build_args()


def test_the_changelog_has_an_entry_for_the_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[{re.escape(VERSION)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", changelog, re.M)
    assert f"[{VERSION}]: " in changelog, "the entry's link to its tag"


def test_the_release_notes_are_the_changelog_entry_alone() -> None:
    notes = versioning.changelog_entry(VERSION)
    assert notes.strip() and not notes.startswith("## ")
    assert "## [" not in notes and f"[{VERSION}]: " not in notes, "the next entry, the links"
    with pytest.raises(ValueError, match=r"no entry for 0\.0\.0"):
        versioning.changelog_entry("0.0.0")


def copy_places(root: Path) -> None:
    for place in versioning.PLACES:
        target = place.file(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(place.file(), target)


def test_version_writes_every_place_and_only_the_version(tmp_path: Path) -> None:
    copy_places(tmp_path)
    before = {p.path: p.file(tmp_path).read_text() for p in versioning.PLACES}
    changed = versioning.write("10.20.30", root=tmp_path)
    assert {path.relative_to(tmp_path).as_posix() for path in changed} == set(before)
    assert versioning.current(tmp_path) == "10.20.30"
    assert versioning.disagreements(tmp_path) == []
    for path, text in before.items():
        after = (tmp_path / path).read_text()
        assert after.replace("10.20.30", VERSION) == text, path
    assert versioning.write("10.20.30", root=tmp_path) == [], "a second write changes nothing"


def test_version_refuses_what_is_not_a_release_and_changes_nothing(tmp_path: Path) -> None:
    copy_places(tmp_path)
    for wrong in ("1.2", "v1.2.3", "1.2.3-rc.1", "1.2.3rc1", "01.2.3"):
        with pytest.raises(ValueError, match="not a release version"):
            versioning.write(wrong, root=tmp_path)
    chart = tmp_path / "charts/lessor/Chart.yaml"
    chart.write_text(chart.read_text() + "version: 0.0.1\n")  # reshaped: two version lines
    with pytest.raises(ValueError, match="found 2"):
        versioning.write("9.9.9", root=tmp_path)
    assert versioning.current(tmp_path) == VERSION, "nothing is written when any place is wrong"


def git(directory: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(directory), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A git work tree with one commit, holding a `lessor` directory."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repository = tmp_path / "repository"
    (repository / "lessor").mkdir(parents=True)
    (repository / "lessor" / "__init__.py").write_text("")
    git(repository, "init", "--quiet")
    git(repository, "add", ".")
    git(repository, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "c")
    return repository


def test_the_commit_of_a_checkout(checkout: Path) -> None:
    assert status.source_commit(checkout) == git(checkout, "rev-parse", "--short", "HEAD")


def test_no_commit_for_an_installed_package_even_inside_another_repository(
    checkout: Path,
) -> None:
    """A wheel in site-packages of a virtualenv that lies in some repository (tox's do)."""
    site_packages = checkout / ".tox" / "unit" / "lib" / "site-packages"
    (site_packages / "lessor").mkdir(parents=True)
    assert status.source_commit(site_packages) is None


def test_no_commit_and_no_error_when_git_is_missing_fails_or_hangs(
    checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    assert status.source_commit(checkout) is None, "no git on PATH"
    fake = bin_dir / "git"
    fake.write_text("#!/bin/sh\necho 'fatal: not a git repository' >&2\nexit 128\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    assert status.source_commit(checkout) is None, "git fails"
    fake.write_text("#!/bin/sh\nexec sleep 30\n")
    monkeypatch.setattr(status, "GIT_TIMEOUT", 0.2)
    assert status.source_commit(checkout) is None, "git hangs"


@pytest.mark.parametrize("commit", ["1a2b3c4", None])
def test_lessor_version_prints_the_commit_when_there_is_one(
    commit: str | None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(status, "source_commit", lambda: commit)
    monkeypatch.setattr(status.context, "target", _no_target)
    assert status.version(argparse.Namespace(output="text")) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0] == f"lessor {VERSION}" + (f" (commit {commit})" if commit else "")
    assert status.version(argparse.Namespace(output="json")) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["client"] == VERSION
    assert shown.get("commit") == commit and ("commit" in shown) == (commit is not None)


def _no_target(args: argparse.Namespace) -> object:
    raise status.CliError("no target")


def test_lessor_version_from_this_checkout_names_its_commit(tmp_path: Path) -> None:
    """The command as run: `python -m lessor.cli.main` from the repository's root imports the
    checkout's lessor (tox's wheel is not what runs here)."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LESSOR_")}
    shown = subprocess.run(
        [sys.executable, "-m", "lessor.cli.main", "version", "-o", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**env, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)},
        timeout=60,
        check=True,
    )
    assert json.loads(shown.stdout)["commit"] == git(ROOT, "rev-parse", "--short", "HEAD")


def test_sha256sums_is_what_sha256sum_checks(tmp_path: Path) -> None:
    artifacts = []
    for name, content in (("lessor-1.0.0.tgz", b"chart"), ("lessor-1.0.0.tar.gz", b"sdist")):
        (tmp_path / name).write_bytes(content)
        artifacts.append(tmp_path / name)
    sums = build.write_sums(artifacts, tmp_path).read_text()
    assert sums == (
        f"{hashlib.sha256(b'sdist').hexdigest()}  lessor-1.0.0.tar.gz\n"
        f"{hashlib.sha256(b'chart').hexdigest()}  lessor-1.0.0.tgz\n"
    )
    if shutil.which("sha256sum"):
        subprocess.run(["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=tmp_path, check=True)
    assert "lessor-1.0.0.tgz" in build.report(tmp_path)


@pytest.fixture(scope="module")
def actionlint_binary() -> Path:
    """Built on first use (10 to 21 s; `tox -e lint`, which runs before the unit tests in
    `make test`, has built it already), found in the cache after."""
    found = actionlint.find_actionlint()
    if found is None and shutil.which("go") is None:
        pytest.skip("actionlint is not cached and Go is missing to build it")
    return found or actionlint.ensure_actionlint(lambda message: None)


BROKEN_WORKFLOW = """\
on:
  push:
    tags: ["v*"]
jobs:
  build:
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ github.no_such_context_key }}"
        shell: no-such-shell
"""


def test_actionlint_refuses_a_broken_workflow(actionlint_binary: Path, tmp_path: Path) -> None:
    workflow = tmp_path / "broken.yml"
    workflow.write_text(BROKEN_WORKFLOW)
    verdict = actionlint.lint([workflow])
    assert verdict.returncode == 1, verdict.stdout + verdict.stderr
    assert '"runs-on" section is missing' in verdict.stdout
    assert "no-such-shell" in verdict.stdout


def test_the_release_workflow_passes_actionlint(actionlint_binary: Path) -> None:
    verdict = actionlint.lint([ROOT / ".github" / "workflows" / "release.yml"])
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr
