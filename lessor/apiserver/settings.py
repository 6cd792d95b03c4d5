"""The API server's settings: light to import, so the gunicorn master loads nothing else."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    namespace: str = "lessor-system"
    kubeconfig: str | None = None
    agent_sandbox_mode: str = "disabled"  # or "external": see lessor.apiserver.sandbox_gate
