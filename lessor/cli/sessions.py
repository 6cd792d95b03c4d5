"""Session tokens from `lessor login`, kept per endpoint in `sessions.json` (mode 0600) beside
the config, so every target pointing at the same service shares one login, with what renews
them (an OIDC refresh token) when the provider grants one."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lessor.cli.config import config_dir
from lessor.cli.files import write_private

# A session this close to expiry is not worth sending: the request would race the expiry.
_MARGIN_SECONDS = 30


@dataclass(frozen=True)
class Session:
    token: str
    identity: str
    method: str
    expires_at: str
    expires: float
    # How the session renews itself once it ends, without a person: an OIDC refresh token, or
    # "ci" for a session made from a CI job's token (a new one is asked of the job's runner).
    refresh_token: str | None = None
    renew: str = ""

    @property
    def usable(self) -> bool:
        return self.expires - _MARGIN_SECONDS > time.time()


def _path() -> Path:
    return config_dir() / "sessions.json"


def _read() -> dict[str, Any]:
    try:
        data = json.loads(_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # unreadable sessions only mean logging in again
    return data if isinstance(data, dict) else {}


def load(endpoint: str) -> Session | None:
    entry = _read().get(endpoint)
    try:
        return Session(**entry) if isinstance(entry, dict) else None
    except TypeError:
        return None


def store(endpoint: str, session: Session) -> None:
    data = _read()
    data[endpoint] = asdict(session)
    write_private(_path(), json.dumps(data, indent=2) + "\n")


def forget(endpoint: str) -> bool:
    data = _read()
    if data.pop(endpoint, None) is None:
        return False
    write_private(_path(), json.dumps(data, indent=2) + "\n")
    return True
