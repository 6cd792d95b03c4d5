"""The shipped GitLab CI template (ci/gitlab/lessor.gitlab-ci.yml) run for real: gitlab-ci-local
(tests/identity/gitlab_ci_local.py) reads a project's .gitlab-ci.yml that includes it as GitLab
does and runs the job with its shell executor, against the real stack, with the ID token GitLab
would mint for the job: a green job uses its leased cluster and the lease is released after it,
a failing job's lease is released too, and a cancelled job's lease is released by with-lease.

gitlab-ci-local mints no `id_tokens:`, so the job's LESSOR_ID_TOKEN is the token the stand-in
issuer lays out as gitlab.com mints it (tests/identity/ci_issuers.py), given with --variable,
and checked by the shipped example policy unchanged, as in test_identity.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.controlplane.binaries import ensure_binaries
from tests.identity.ci_issuers import gitlab
from tests.identity.gitlab_ci_local import gitlab_ci_local
from tests.integration.ci_world import CiWorld, ci_world  # noqa: F401 - the fixture
from tests.integration.operator_harness import wait_for
from tests.integration.test_cli import (  # noqa: F401 - the fixtures
    LESSOR,
    Stack,
    User,
    agent,
    stack,
    user,
)

pytestmark = pytest.mark.integration
TEMPLATE = Path(__file__).resolve().parents[2] / "ci" / "gitlab" / "lessor.gitlab-ci.yml"
INCLUDED = "ci/gitlab/lessor.gitlab-ci.yml"  # include:local only reads the project's own files
PROJECT = "example-org/widgets"  # granted ci-virtual by the shipped policy's namespace rule
ENDING = {"Releasing", "Recycling", "Released"}  # a release, on its way or done


@pytest.fixture(scope="module")
def executable() -> Path:
    """gitlab-ci-local, installed first when it is not cached: without npm this errors with
    what to install (`python -m tests.identity.gitlab_ci_local` installs it ahead)."""
    return gitlab_ci_local()


@dataclass
class LocalRunner:
    """A project including the template, and gitlab-ci-local to run its job `e2e` as a
    GitLab runner's shell executor would, with the lessor under test and kubectl on PATH."""

    executable: Path
    user: User
    world: CiWorld
    project: Path

    def write(self, job: dict[str, Any]) -> None:
        """The project: the template copied in (include:local reads tracked files inside the
        project only) and a .gitlab-ci.yml whose one job is `job`, committed."""
        template = self.project / INCLUDED
        template.parent.mkdir(parents=True)
        template.write_text(TEMPLATE.read_text())
        pipeline = {"include": [{"local": INCLUDED}], "e2e": job}
        (self.project / ".gitlab-ci.yml").write_text(yaml.safe_dump(pipeline, sort_keys=False))
        identity = ["-c", "user.name=ci", "-c", "user.email=ci@example.org"]
        for args in (["init", "-q"], ["add", "-A"], [*identity, "commit", "-qm", "pipeline"]):
            subprocess.run(["git", *args], cwd=self.project, check=True, capture_output=True)

    def command(self) -> list[str]:
        # gitlab-ci-local sets GITLAB_CI=false so that a pipeline can tell it runs locally (and
        # warns when it is overridden); GitLab sets true, and only then does `lessor login --ci`
        # read $LESSOR_ID_TOKEN.
        token = self.world.gitlab.token("lessor", **gitlab(PROJECT))
        variables = {
            "GITLAB_CI": "true",
            "LESSOR_ID_TOKEN": token,
            "LESSOR_ENDPOINT": self.world.api.base,
        }
        pairs = (("--variable", f"{name}={value}") for name, value in variables.items())
        overridden = ["--ignore-predefined-vars", "GITLAB_CI"]
        return [str(self.executable), *overridden, *(arg for pair in pairs for arg in pair), "e2e"]

    def env(self) -> dict[str, str]:
        """The user's environment (HOME and XDG_CONFIG_HOME in the test's directory), with the
        lessor under test (the test's CLI entry, via a shim) and kubectl first on PATH."""
        tools = self.project.parent / "tools"
        tools.mkdir(exist_ok=True)
        shim = tools / "lessor"
        shim.write_text(f'#!/bin/sh\nexec {shlex.join(LESSOR)} "$@"\n')
        shim.chmod(0o755)
        path = os.pathsep.join([str(tools), str(ensure_binaries()), self.user.env["PATH"]])
        return {**self.user.env, "PATH": path}

    def run(self, job: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        self.write(job)
        return subprocess.run(
            self.command(), cwd=self.project, env=self.env(), text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600, check=False,
        )  # fmt: skip

    def start(self, job: dict[str, Any]) -> subprocess.Popen[str]:
        """The job running, in a process group of its own: what a cancel signals."""
        self.write(job)
        return subprocess.Popen(
            self.command(), cwd=self.project, env=self.env(), text=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def lease_id(self) -> str:
        """The id the template recorded for its after_script."""
        return (self.project / ".lessor" / "lease-id").read_text().strip()


@pytest.fixture
def runner(
    executable: Path,
    user: User,  # noqa: F811
    ci_world: CiWorld,  # noqa: F811
    tmp_path: Path,
) -> LocalRunner:
    return LocalRunner(executable, user, ci_world, tmp_path / "project")


def leasing(script: list[str]) -> dict[str, Any]:
    """A job as a user writes it: extends the template's hidden job, names the pool."""
    variables = {"LESSOR_POOL": "ci-virtual", "LESSOR_TTL": "10m"}
    return {"extends": ".lessor-lease", "variables": variables, "script": script}


def phase(stack: Stack, lease_id: str) -> str:  # noqa: F811
    """The lease's phase as the operator keeps it (the API shows a lease to its owner only)."""
    jsonpath = "jsonpath={.status.phase}"
    found = stack.cluster.kubectl(
        "get", "clusterlease", lease_id, "-n", stack.namespace, "-o", jsonpath, check=False
    )
    return found.stdout.strip()


def released(stack: Stack, lease_id: str) -> str:  # noqa: F811
    return wait_for(
        f"{lease_id} released",
        lambda: (now := phase(stack, lease_id)) in ENDING and now,
        timeout=180,
    )


def test_a_green_job_uses_its_leased_cluster_and_the_lease_is_released_after(
    runner: LocalRunner,
) -> None:
    script = ["kubectl create namespace made-by-the-job", "kubectl get namespaces -o name"]
    job = runner.run(leasing(script))
    assert job.returncode == 0, job.stdout
    assert "namespace/made-by-the-job created" in job.stdout, job.stdout
    assert "namespace/kube-system" in job.stdout, job.stdout
    host = runner.user.stack.cluster.kubectl("get", "namespace", "made-by-the-job", check=False)
    assert host.returncode != 0, "the job's kubectl reached the leased cluster, not another"
    assert released(runner.user.stack, runner.lease_id()) in ENDING, job.stdout
    assert not (runner.project / ".lessor" / "kubeconfig").exists(), "removed with the lease"


def test_a_failing_job_fails_and_its_lease_is_still_released(runner: LocalRunner) -> None:
    job = runner.run(leasing(["kubectl get namespaces -o name", "exit 1"]))
    assert job.returncode == 1, job.stdout
    assert "namespace/kube-system" in job.stdout, job.stdout
    assert released(runner.user.stack, runner.lease_id()) in ENDING, job.stdout


def test_a_cancelled_job_leasing_with_with_lease_releases_its_lease(runner: LocalRunner) -> None:
    """A cancel signals the job's process group. Observed with gitlab-ci-local 4.73.0: on
    SIGINT or SIGTERM to its group the script's commands die, it prints "Running after
    script..." and exits 130 or 143 from its own handler before any after_script command runs
    (signalled alone, it exits at once and leaves the job's shell running, orphaned): its
    after_script never releases a cancelled `.lessor-lease` job, as GitLab 17's runner does.
    `lessor with-lease` in the script, signalled with the group, releases by itself."""
    record = 'echo "$LESSOR_LEASE_ID" > "$CI_PROJECT_DIR/lease-id"; exec sleep 600'
    command = 'lessor with-lease "$LESSOR_POOL" --ttl "$LESSOR_TTL" -- sh -c ' + shlex.quote(record)
    variables = {"LESSOR_POOL": "ci-virtual", "LESSOR_TTL": "10m"}
    running = runner.start({"extends": ".lessor", "variables": variables, "script": [command]})
    try:
        lease_file = runner.project / "lease-id"
        lease_id = wait_for(
            "the job holding its lease",
            lambda: lease_file.is_file() and lease_file.read_text().strip(),
            timeout=300,
        )
        assert phase(runner.user.stack, lease_id) == "Bound"
        os.killpg(running.pid, signal.SIGTERM)
        output, _ = running.communicate(timeout=120)
        assert running.returncode == 128 + signal.SIGTERM, output
        assert released(runner.user.stack, lease_id) in ENDING, output
    finally:
        _end_group(running)


def _end_group(running: subprocess.Popen[str]) -> None:
    """Whatever of the job is left (gitlab-ci-local exits before the shells it started)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(running.pid, signal.SIGKILL)
    running.wait(timeout=60)
    if running.stdout:
        running.stdout.close()
