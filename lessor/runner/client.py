"""Calls to lessor-runner in a sandbox pod (lessor.runner.runner), through the Kubernetes
pods/exec WebSocket: one JSON request on stdin, one JSON answer on stdout. One client for both
the API server (under gevent) and the operator (which runs it in a thread).

The runner runs as the tenant, in the tenant's sandbox, among files the tenant can write, so its
answer is untrusted input, like a request body. A call is bounded in time (one deadline for the
whole exchange, connection included) and in bytes (at most MAX_ANSWER_BYTES of stdout are kept,
and stderr is read and dropped), and the answer is validated against RunnerAnswer: only the
fields lessor knows, each within its bounds; anything else is a RunnerError, never passed on.

The frames are read here, one at a time, rather than through kubernetes.stream's WSClient, which
buffers everything the peer has already sent (and a copy of it) before returning. (Proxies of
a kubeconfig are not used: both components reach kube-apiserver directly, in a cluster.)
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import ssl
import time
from dataclasses import dataclass
from typing import Annotated, cast
from urllib.parse import quote

from kubernetes import client, config
from kubernetes.stream.ws_client import get_websocket_url
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from websocket import ABNF, WebSocket, WebSocketException

from lessor.protocol.json_object import Json
from lessor.protocol.phases import ExecutionState
from lessor.protocol.runner import LOG_WINDOW

log = logging.getLogger(__name__)

PROTOCOL = "v4.channel.k8s.io"
STDIN, STDOUT, STDERR, STATUS = 0, 1, 2, 3
# The largest honest answer is two windows of LOG_WINDOW bytes, base64-encoded, and a few fields.
MAX_ANSWER_BYTES = 4 * LOG_WINDOW
MAX_MESSAGE = 1000
Timestamp = Annotated[str, Field(max_length=40, pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$")]


class RunnerError(Exception):
    """The runner could not be reached, did not answer in time, or answered out of bounds."""


class Window(BaseModel):
    """A window of retained output: base64 of at most LOG_WINDOW bytes."""

    model_config = ConfigDict(extra="ignore")

    data: str = Field(default="", max_length=(LOG_WINDOW + 2) // 3 * 4)
    next_offset: int = Field(default=0, ge=0, le=1 << 40, alias="nextOffset")
    more: bool = False

    @property
    def raw(self) -> bytes:
        try:
            decoded = base64.b64decode(self.data, validate=True)
        except binascii.Error as error:
            raise RunnerError("the runner sent output that is not base64") from error
        return decoded


class RunnerAnswer(BaseModel):
    """What lessor takes from a runner's answer: these fields, validated; nothing else."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    state: ExecutionState | None = None
    exit_code: int | None = Field(default=None, ge=-(1 << 31), lt=1 << 31, alias="exitCode")
    started_at: Timestamp | None = Field(default=None, alias="startedAt")
    finished_at: Timestamp | None = Field(default=None, alias="finishedAt")
    message: str | None = Field(default=None, max_length=MAX_MESSAGE)
    truncated: bool = False
    error: str | None = Field(default=None, max_length=MAX_MESSAGE)
    stdout: Window | None = None
    stderr: Window | None = None

    def status_fields(self) -> Json:
        """The fields an execution's status and the API's view take from the runner."""
        return self.model_dump(
            by_alias=True,
            include={"state", "exit_code", "started_at", "finished_at", "message", "truncated"},
            exclude_none=True,
        )


def configuration(kubeconfig: str | None) -> client.Configuration:
    """The Kubernetes client configuration of a kubeconfig file, else of the pod's service
    account (the token file reread as it rotates)."""
    settings = client.Configuration()
    if kubeconfig:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=settings
        )
    else:
        config.load_incluster_config(client_configuration=settings)  # type: ignore[no-untyped-call]
    return settings


@dataclass(frozen=True)
class Runner:
    """Where an execution's runner is: its pod and container, and its path there."""

    namespace: str
    pod: str
    container: str | None
    path: str

    @classmethod
    def of(cls, execution: Json) -> Runner:
        """The runner of a SandboxExecution, as its spec recorded it at reservation."""
        spec = execution["spec"]
        runner = spec.get("runner") or {}
        return cls(
            namespace=spec["pod"].get("namespace") or execution["metadata"]["namespace"],
            pod=spec["pod"]["name"],
            container=spec.get("container") or runner.get("container"),
            path=runner["path"],
        )


def call_runner(
    settings: client.Configuration, runner: Runner, request: Json, *, timeout: float = 15.0
) -> RunnerAnswer:
    """Run the runner with `request` and return its validated answer."""
    deadline = time.monotonic() + timeout
    try:
        connection = _connect(settings, runner, timeout)
    except (OSError, WebSocketException, ssl.SSLError) as error:
        # kube-apiserver's own words name the service account, its namespace and its rights:
        # they go to the log, and the caller hears the status only.
        log.warning("exec into %s/%s failed: %s", runner.namespace, runner.pod, error)
        status = getattr(error, "status_code", None)
        raise RunnerError(
            f"exec into {runner.pod} failed" + (f" (HTTP {status})" if status else "")
        ) from None
    try:
        connection.send_binary(bytes([STDIN]) + json.dumps(request).encode() + b"\n")
        output = _read_stdout(connection, deadline)
    except (OSError, WebSocketException) as error:
        log.warning("the runner in %s/%s did not answer: %s", runner.namespace, runner.pod, error)
        raise RunnerError(f"the runner in {runner.pod} did not answer") from None
    finally:
        connection.close()
    lines = output.strip().splitlines()
    if not lines:
        raise RunnerError(
            f"the runner in {runner.pod} did not answer (is the pool's runner path right?)"
        )
    try:
        return RunnerAnswer.model_validate_json(lines[-1])
    except ValidationError as error:
        problem = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise RunnerError(
            f"the runner in {runner.pod} answered out of bounds: {problem[:300]}"
        ) from None


def _connect(settings: client.Configuration, runner: Runner, timeout: float) -> WebSocket:
    """The exec WebSocket, authenticated as the client configuration says (bearer token or
    client certificate), connected within `timeout`. (Not kubernetes.stream's create_websocket:
    it takes its connect timeout from a process-wide default.)"""
    query = [("command", runner.path), ("stdin", "true"), ("stdout", "true"), ("stderr", "true")]
    if runner.container:
        query.append(("container", runner.container))
    pod = f"/api/v1/namespaces/{quote(runner.namespace)}/pods/{quote(runner.pod)}/exec"
    url = get_websocket_url(settings.host + pod, query)  # type: ignore[no-untyped-call]
    tls: Json = {"cert_reqs": ssl.CERT_REQUIRED if settings.verify_ssl else ssl.CERT_NONE}
    for option, value in (
        ("ca_certs", settings.ssl_ca_cert if settings.verify_ssl else None),
        ("certfile", settings.cert_file),
        ("keyfile", settings.key_file),
        ("server_hostname", settings.tls_server_name),
    ):
        if value:
            tls[option] = value
    header = [f"Sec-WebSocket-Protocol: {PROTOCOL}"]
    # The bearer token as the client sends it (refreshed as it rotates), wherever the client's
    # version keeps it; a TypedDict of per-scheme settings, read as plain dicts here.
    for auth in cast(dict[str, Json], settings.auth_settings()).values():
        if auth["in"] == "header" and auth["value"]:
            header.append(f"{auth['key']}: {auth['value']}")
    connection = WebSocket(sslopt=tls, skip_utf8_validation=True)
    connection.connect(url, header=header, timeout=timeout)  # type: ignore[no-untyped-call]
    return connection


def _read_stdout(connection: WebSocket, deadline: float) -> bytes:
    """The runner's stdout until it exits, at most MAX_ANSWER_BYTES, before `deadline`."""
    output = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RunnerError("the runner did not answer in time")
        connection.settimeout(left)
        try:
            opcode, data = connection.recv_data(control_frame=True)
        except TimeoutError as error:
            raise RunnerError("the runner did not answer in time") from error
        if opcode == ABNF.OPCODE_CLOSE:
            return bytes(output)
        if opcode not in (ABNF.OPCODE_BINARY, ABNF.OPCODE_TEXT) or not data:
            continue
        channel, payload = data[0], data[1:]
        if channel == STDOUT:
            output += payload
            if len(output) > MAX_ANSWER_BYTES:
                raise RunnerError(f"the runner's answer is over {MAX_ANSWER_BYTES} bytes")
        elif channel == STATUS:  # the process ended; its output is all here
            return bytes(output)
