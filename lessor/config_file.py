"""The configuration file both servers read: the `config.yaml` key of the `lessor-config`
ConfigMap in `manifests/`, given as `--config PATH` (or `LESSOR_CONFIG`).

Every key is optional and stands for the command-line flag of the same name; a flag given
explicitly wins over the file, and the file over the built-in default. One file for both
components keeps a deployment's settings in one reviewed place. Keys (see docs/operations.md):

    namespace: lessor-system        # where pools, leases and policies live
    agentSandbox:
      mode: disabled                # disabled | external (the Sandbox API, see sandbox_gate)
      namespace: lessor-sandboxes   # where sandboxes run (default: `namespace`); the operator's
    log:
      level: info                   # debug | info | warning | error
      format: text                  # text (logfmt) | json: one object per line
    apiserver: {bind, metricsBind, workers, workerConnections, timeout, gracefulTimeout,
                sandboxAdmissionRate, sandboxAdmissionBurst, sandboxStreamIdleTimeout,
                sandboxStreamMaxDuration, sandboxStreamMaxPerIdentity, sshAudiences,
                sshSignedRate, sshSignedBurst, sessionKeyTtl,
                defaultMaxConcurrentLeases, executionAdmissionRate, executionAdmissionBurst,
                maxCommandBytesPerLease, loginRate, loginBurst, maxSessionsPerOwner,
                maxInFlight, maxWaitsPerIdentity, trustedProxies, hidePoolStatus,
                publicPoolStatus (deprecated)}
    operator:  {workers, httpPort, leaseDuration, renewDeadline, retryPeriod, teardownGrace,
                leaseRetention, localBackendDir, allowPrivilegedBackends}
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class AgentSandbox(_Section):
    mode: Literal["disabled", "external"] | None = None
    # Where the agent-sandbox objects and the sandboxes' pods live: a namespace of their own, so
    # that the API server's exec/attach/port-forward rights reach only tenant pods.
    namespace: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class Log(_Section):
    level: Literal["debug", "info", "warning", "error"] | None = None
    format: Literal["text", "json"] | None = None


class ApiServer(_Section):
    bind: str | None = None
    metrics_bind: str | None = None
    workers: int | None = Field(default=None, ge=1, le=64)
    worker_connections: int | None = Field(default=None, ge=1)
    timeout: int | None = Field(default=None, ge=1)
    graceful_timeout: int | None = Field(default=None, ge=0)
    sandbox_admission_rate: float | None = Field(default=None, gt=0)
    sandbox_admission_burst: int | None = Field(default=None, ge=1)
    sandbox_stream_idle_timeout: float | None = Field(default=None, gt=0)
    sandbox_stream_max_duration: float | None = Field(default=None, gt=0)
    sandbox_stream_max_per_identity: int | None = Field(default=None, ge=1)
    ssh_audiences: list[str] | None = None
    trusted_proxies: list[str] | None = None
    ssh_signed_rate: float | None = Field(default=None, gt=0)
    session_key_ttl: float | None = Field(default=None, gt=0)
    ssh_signed_burst: int | None = Field(default=None, ge=1)
    default_max_concurrent_leases: int | None = Field(default=None, ge=1)
    hide_pool_status: bool | None = None
    # Deprecated (lessor.apiserver.server._hide_pool_status): true does nothing, false hides.
    public_pool_status: bool | None = None
    lease_admission_rate: float | None = Field(default=None, gt=0)
    lease_admission_burst: int | None = Field(default=None, ge=1)
    execution_admission_rate: float | None = Field(default=None, gt=0)
    execution_admission_burst: int | None = Field(default=None, ge=1)
    max_command_bytes_per_lease: int | None = Field(default=None, ge=1)
    login_rate: float | None = Field(default=None, gt=0)
    login_burst: int | None = Field(default=None, ge=1)
    max_sessions_per_owner: int | None = Field(default=None, ge=1)
    max_in_flight: int | None = Field(default=None, ge=1)
    max_waits_per_identity: int | None = Field(default=None, ge=1)

    @field_validator("trusted_proxies")
    @classmethod
    def _cidrs(cls, value: list[str] | None) -> list[str] | None:
        for cidr in value or []:
            ipaddress.ip_network(cidr, strict=False)  # ValueError: pydantic names the key
        return value


class Operator(_Section):
    workers: int | None = Field(default=None, ge=1, le=64)
    http_port: int | None = Field(default=None, ge=1, le=65535)
    lease_duration: float | None = Field(default=None, gt=0)
    renew_deadline: float | None = Field(default=None, gt=0)
    retry_period: float | None = Field(default=None, gt=0)
    teardown_grace: float | None = Field(default=None, gt=0)
    lease_retention: float | None = Field(default=None, ge=0)
    local_backend_dir: Path | None = None
    local_orphan_grace: float | None = Field(default=None, ge=0)
    allow_privileged_backends: bool | None = None


class ConfigFile(_Section):
    namespace: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    agent_sandbox: AgentSandbox = Field(default_factory=AgentSandbox)
    log: Log = Field(default_factory=Log)
    apiserver: ApiServer = Field(default_factory=ApiServer)
    operator: Operator = Field(default_factory=Operator)


def load(path: Path) -> ConfigFile:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        return ConfigFile.model_validate(document)
    except OSError as error:
        raise SystemExit(f"--config {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise SystemExit(f"--config {path}: not YAML: {error}") from None
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()
        )
        raise SystemExit(f"--config {path}: {problems}") from None


def apply_defaults(parser: argparse.ArgumentParser, argv: list[str] | None, section: str) -> None:
    """Add the options both components share (`--config`, `--agent-sandbox-mode`, `--log-*`)
    and make the file's values (the shared keys and this component's section) the parser's
    defaults."""
    parser.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), default="info"
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text: logfmt lines; json: one object per line (both on stderr)",
    )
    parser.add_argument(
        "--agent-sandbox-mode",
        choices=("disabled", "external"),
        default="disabled",
        help="use an installed agent-sandbox for Sandbox pools and leases (external)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=os.environ.get("LESSOR_CONFIG") or None,
        help="YAML configuration file (env LESSOR_CONFIG); flags override it",
    )
    known, _ = parser.parse_known_args(argv)
    if known.config is None:
        return
    config = load(known.config)
    values: dict[str, Any] = getattr(config, section).model_dump(exclude_none=True)
    if config.namespace:
        values["namespace"] = config.namespace
    if config.agent_sandbox.mode:
        values["agent_sandbox_mode"] = config.agent_sandbox.mode
    if config.agent_sandbox.namespace:
        values["sandbox_namespace"] = config.agent_sandbox.namespace
    if config.log.level:
        values["log_level"] = config.log.level
    if config.log.format:
        values["log_format"] = config.log.format
    parser.set_defaults(**values)
