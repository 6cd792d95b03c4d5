"""A real OpenSSH ssh-agent holding a fresh Ed25519 key, for tests of SSH authentication."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunningAgent:
    socket: str
    public_key: str  # the `ssh-ed25519 AAAA... comment` line


@contextmanager
def ssh_agent(directory: Path, comment: str) -> Iterator[RunningAgent]:
    key = directory / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)],
        check=True,
    )
    socket_path = str(directory / "agent.sock")
    output = subprocess.run(
        ["ssh-agent", "-a", socket_path], capture_output=True, text=True, check=True
    ).stdout
    found = re.search(r"SSH_AGENT_PID=(\d+)", output)
    assert found, output
    try:
        subprocess.run(
            ["ssh-add", "-q", str(key)],
            env={**os.environ, "SSH_AUTH_SOCK": socket_path},
            check=True,
            capture_output=True,
        )
        yield RunningAgent(socket_path, (directory / "id_ed25519.pub").read_text().strip())
    finally:
        os.kill(int(found.group(1)), signal.SIGTERM)
