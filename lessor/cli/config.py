"""Named targets in `$XDG_CONFIG_HOME/lessor/config.json` (default `~/.config/lessor`).

A target is an endpoint and how to authenticate to it. The file is validated on every read and
before every write, so a hand edit that breaks it is reported with the field at fault instead of
failing later inside a request; it is written atomically with mode 0600 because a `token` target
may hold a static token.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from lessor.cli.errors import NOT_FOUND, USAGE, CliError
from lessor.cli.files import write_private
from lessor.protocol.validation_errors import describe

AuthMode = Literal["ssh", "token", "oidc", "none"]
TARGET_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"


def _endpoint(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"endpoint {url!r} is not an http(s) URL like https://lessor.example.com")
    if parts.query or parts.fragment:
        raise ValueError("the endpoint takes no query string or fragment")
    return url.rstrip("/")


Endpoint = Annotated[str, AfterValidator(_endpoint)]


class Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


def secure_url(url: str) -> bool:
    """https, or http on loopback: the issuer rule of AccessPolicies, for the same reason."""
    parts = urlsplit(url)
    loopback = parts.hostname in ("127.0.0.1", "localhost", "::1")
    return parts.scheme == "https" or (parts.scheme == "http" and loopback)


def _issuer(url: str) -> str:
    if not secure_url(url):
        raise ValueError(
            f"issuer {url!r} is not https: the login's codes and tokens would cross the network "
            "in the clear (http is accepted on loopback only)"
        )
    return url


class OidcSettings(Model):
    """The browser (authorization code with PKCE) and device flows both need only these."""

    issuer: Annotated[Endpoint, AfterValidator(_issuer)]
    client_id: str = Field(min_length=1)
    scopes: list[str] = Field(default_factory=lambda: ["openid"])


class CiSettings(Model):
    """How `lessor login --ci` gets the job's ID token: the audience it asks GitHub Actions'
    runner for, and the variable GitLab CI's `id_tokens:` puts the token in."""

    audience: str = Field(default="lessor", min_length=1, max_length=256)
    token_variable: str = Field(
        default="LESSOR_ID_TOKEN", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
    )


class Target(Model):
    endpoint: Endpoint
    auth: AuthMode = "none"
    token: str | None = Field(default=None, min_length=1, description="static token (auth token)")
    ssh_key: str | None = Field(
        default=None, description="which agent key signs: SHA256 fingerprint or key comment"
    )
    oidc: OidcSettings | None = None
    ci: CiSettings | None = None
    ca_file: str | None = Field(default=None, description="PEM CA bundle to verify the endpoint")


class Config(Model):
    current: str | None = None
    targets: dict[Annotated[str, Field(pattern=TARGET_NAME)], Target] = Field(default_factory=dict)

    def target(self, name: str) -> Target:
        if name not in self.targets:
            known = ", ".join(sorted(self.targets)) or "none; add one with `lessor config set`"
            raise CliError(f"no target named {name!r} (targets: {known})", NOT_FOUND)
        return self.targets[name]


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "lessor"


def config_path() -> Path:
    return config_dir() / "config.json"


def parse(text: str, source: str) -> Config:
    try:
        config = Config.model_validate_json(text)
    except ValidationError as error:
        raise CliError(
            f"{source} is not a valid lessor config: {describe(error, root='config')}", USAGE
        ) from None
    if config.current is not None and config.current not in config.targets:
        raise CliError(f"{source}: current target {config.current!r} is not defined", USAGE)
    return config


def load() -> Config:
    path = config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Config()
    except OSError as error:
        raise CliError(f"cannot read {path}: {error.strerror}", USAGE) from None
    return parse(text, str(path))


def render(config: Config) -> str:
    return json.dumps(config.model_dump(by_alias=True, exclude_none=True), indent=2) + "\n"


def save(config: Config) -> Path:
    path = config_path()
    write_private(path, render(config))
    return path
