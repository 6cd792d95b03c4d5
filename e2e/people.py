"""The people of the e2e scenarios: each has the `lessor` command, a home directory and a
static token, and uses lessor only as a user does (the CLI and the HTTP API)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.installation import Installation, wait_for

ALICE, BOB = "alice-" + secrets.token_hex(8), "bob-" + secrets.token_hex(8)
INSTALLED = Path(sys.executable).parent / "lessor"
LESSOR = [str(INSTALLED)] if INSTALLED.exists() else [sys.executable, "-m", "lessor.cli.main"]


@dataclass
class Person:
    """Someone with the `lessor` command, a home directory, and a static token."""

    installation: Installation
    home: Path
    token: str

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LESSOR_")}
        env.update(HOME=str(self.home), XDG_CONFIG_HOME=str(self.home / ".config"))
        env.update(LESSOR_ENDPOINT=self.installation.endpoint, LESSOR_TOKEN=self.token)
        return env

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*LESSOR, *args], capture_output=True, text=True, env=self.env(), timeout=600,
            check=False,
        )  # fmt: skip

    def json(self, *args: str) -> Any:
        result = self.run(*args, "-o", "json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def http(self, method: str, path: str) -> tuple[int, Any]:
        request = urllib.request.Request(  # noqa: S310 - the local endpoint
            self.installation.endpoint + path,
            method=method,
            headers={"Authorization": f"Bearer {self.token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
                body = answer.read()
                return answer.status, json.loads(body) if body else None
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def phase(self, lease_id: str) -> str:
        return str(self.http("GET", f"/v1/leases/{lease_id}")[1].get("phase"))

    def release(self, lease_id: str) -> None:
        """Release and wait for the teardown to end: until then the lease holds its slot of
        the person's quota (a Recycling cluster is still torn down on their account), and the
        next scenario would find it taken."""
        result = self.run("release", lease_id)
        assert result.returncode == 0, result.stderr
        wait_for("Released", lambda: self.phase(lease_id) == "Released", timeout=300)
