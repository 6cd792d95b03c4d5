"""A JavaScript action's steps run as a GitHub Actions runner runs them, for the tests of
actions/lease: the same Node, the same environment contract, the same file commands.

- Inputs as `INPUT_<NAME>` (upper case, spaces as underscores, hyphens kept), defaults from the
  action's `action.yml` as the runner fills them.
- A fresh file per step behind GITHUB_OUTPUT, GITHUB_ENV and GITHUB_STATE, read after the step in
  both forms the runner accepts (`name=value`, `name<<DELIMITER`): outputs for the workflow, the
  environment for the later steps, the state for the post step as `STATE_<name>`.
- Workflow commands on stdout (`::add-mask::`, `::error::`, `::warning::`) collected.
- A cancel as the runner sends it: SIGINT, then SIGTERM 7.5 s later if the step still runs.
- The job's OIDC token from ACTIONS_ID_TOKEN_REQUEST_URL: the stand-in runner endpoint of
  tests/identity/ci_issuers.GithubRunner.

What is not the runner: Node is the one on PATH (the action declares the runner's current
runtime, and uses only the standard library both have).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.identity.ci_issuers import GithubRunner

CANCEL_GRACE_SECONDS = 7.5  # the runner's wait between SIGINT and SIGTERM
COMMAND = re.compile(r"^::([a-z-]+)(?: [^:]*)?::(.*)$")


def parse_file_command(text: str) -> dict[str, str]:
    """Entries of a GITHUB_OUTPUT/ENV/STATE file, in either form."""
    entries: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            value: list[str] = []
            for body in lines:
                if body == delimiter:
                    break
                value.append(body)
            else:
                raise ValueError(f"{name}: no closing {delimiter}")
            entries[name] = "\n".join(value)
        elif line:
            name, _, value_text = line.partition("=")
            entries[name] = value_text
    return entries


def _unescape(data: str) -> str:
    return data.replace("%0A", "\n").replace("%0D", "\r").replace("%25", "%")


@dataclass
class Step:
    """One step's run: its exit status, output, and what its file commands said."""

    returncode: int
    stdout: str
    stderr: str
    outputs: dict[str, str]
    env: dict[str, str]
    state: dict[str, str]

    def commands(self, name: str) -> list[str]:
        found = (COMMAND.match(line) for line in self.stdout.splitlines())
        return [_unescape(match.group(2)) for match in found if match and match.group(1) == name]

    @property
    def log(self) -> str:
        return self.stdout + self.stderr


@dataclass
class Job:
    """One job using the action: its main, later steps' environment, its post."""

    action: Path
    token_runner: GithubRunner
    workdir: Path
    inputs: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)  # what GITHUB_ENV set so far
    state: dict[str, str] = field(default_factory=dict)
    _steps: int = 0

    def main(self) -> Step:
        return self._finish(self.start("main"))

    def post(self) -> Step:
        return self._finish(self.start("post"))

    def start(self, which: str) -> subprocess.Popen[str]:
        self._steps += 1
        files = self.workdir / f"step-{self._steps}"
        files.mkdir(parents=True)
        for kind in ("OUTPUT", "ENV", "STATE"):
            (files / kind).touch()
        node = shutil.which("node")
        assert node, "the action's tests need Node (node on PATH), as a runner has"
        runs = yaml.safe_load((self.action / "action.yml").read_text())["runs"]
        environment = {
            "PATH": os.environ["PATH"],
            "HOME": str(self.workdir),
            "GITHUB_ACTIONS": "true",
            "RUNNER_TEMP": str(self.workdir),
            "GITHUB_OUTPUT": str(files / "OUTPUT"),
            "GITHUB_ENV": str(files / "ENV"),
            "GITHUB_STATE": str(files / "STATE"),
            "ACTIONS_ID_TOKEN_REQUEST_URL": self.token_runner.url,
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN": self.token_runner.request_token,
            **self.env,
            **{f"STATE_{name}": value for name, value in self.state.items()},
            **{f"INPUT_{name.replace(' ', '_').upper()}": value for name, value in self._inputs()},
        }
        return subprocess.Popen(
            [node, str(self.action / runs[which])],
            env=environment,
            cwd=self.workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def cancel(self, running: subprocess.Popen[str]) -> Step:
        """Cancel the job while this step runs, as the runner does."""
        running.send_signal(signal.SIGINT)
        try:
            running.wait(timeout=CANCEL_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            running.send_signal(signal.SIGTERM)
        return self._finish(running)

    def live_state(self) -> dict[str, str]:
        """The state the running step has saved so far (the runner reads it at the end)."""
        return parse_file_command((self.workdir / f"step-{self._steps}" / "STATE").read_text())

    def _inputs(self) -> list[tuple[str, str]]:
        declared = yaml.safe_load((self.action / "action.yml").read_text())["inputs"]
        defaults = {name: str(spec.get("default", "")) for name, spec in declared.items()}
        return list({**defaults, **self.inputs}.items())

    def _finish(self, running: subprocess.Popen[str]) -> Step:
        stdout, stderr = running.communicate(timeout=300)
        files = self.workdir / f"step-{self._steps}"
        step = Step(
            running.returncode,
            stdout,
            stderr,
            parse_file_command((files / "OUTPUT").read_text()),
            parse_file_command((files / "ENV").read_text()),
            parse_file_command((files / "STATE").read_text()),
        )
        self.env.update(step.env)
        self.state.update(step.state)
        return step
