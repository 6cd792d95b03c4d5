"""Attach and port-forward sessions (spec 4.4, issue 7 item 5) on the local control plane: the
real agent-sandbox controller places the sandbox, the real operator owns the lease, the real API
server (gunicorn, gevent workers) upgrades to the WebSocket and bridges it to the pod's
pods/attach and pods/portforward through the real kube-apiserver, and kwok plays the kubelet.

What kwok does for the pod's side (lessor.controlplane.cluster): attach streams what is appended
to the node's log file, in the kubelet's CRI log format, and discards the attach's stdin; so the
sandbox's half of the echo is played by the test, which appends what it sent to that file, and
what stdin reaches is checked up to the kubelet (accepted, session intact). Port-forward to a
pod port P reaches whatever listens on 127.0.0.1:P here, so the port tests run real servers.

The clients are the CLI's own (lessor.cli.stream_client in-process, and `lessor attach` /
`lessor port-forward` as subprocesses). Every refusal body is scanned for secrets.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import fcntl
import http.client
import json
import os
import pty
import queue
import re
import select
import signal
import socket
import ssl
import struct
import subprocess
import sys
import termios
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from wsproto.events import Message, TextMessage

from lessor.cli.client import Client
from lessor.cli.config import Target
from lessor.cli.errors import ApiError
from lessor.cli.stream_client import Closed, StreamClient
from lessor.controlplane.cluster import FORWARDED_PORTS, LocalControlPlane
from lessor.controlplane.pki import CertificateAuthority
from lessor.protocol.stream_frames import (
    ACCESS_REVOKED,
    DURATION_LIMIT,
    IDLE_TIMEOUT,
    PROTOCOL_ERROR,
    RESIZE,
    STDIN,
    STDOUT,
    UNSUPPORTED,
)
from tests.integration.http_proxy import HttpProxy
from tests.integration.operator_harness import wait_for
from tests.integration.tcp_relay import _pump
from tests.integration.test_apiserver import Api, start_api
from tests.integration.test_sandbox_leases import (  # noqa: F401
    ALICE,
    BOB,
    DAVE,
    EXTERNAL,
    SECRET_MARKERS,
    Env,
    env,
    policy,
    sandbox_pool,
    scanned,
)
from tests.unit.test_logs import parse_logfmt
from tests.unit.test_stream_client_proxy import ConnectProxy, server_context

pytestmark = pytest.mark.integration
WEB, UNDECLARED = FORWARDED_PORTS[11], FORWARDED_PORTS[12]
STAMP = "2026-01-01T00:00:00.000000000Z"


@pytest.fixture(scope="module")
def pool(env: Env) -> str:  # noqa: F811
    """A pool whose container reads stdin on a terminal and declares one port, `web`."""
    spec = sandbox_pool("sb-ports", 2, ports=[{"name": "web", "port": WEB}])
    container = spec["spec"]["template"]["spec"]["containers"][0]
    container.update(stdin=True, tty=True)
    env.objects.apply(spec)
    wait_for(
        "sb-ports to be Healthy",
        lambda: env.objects.status("sandboxpool", "sb-ports").get("phase") == "Healthy",
        timeout=120,
    )
    return "sb-ports"


@pytest.fixture
def lease(env: Env, pool: str) -> Iterator[str]:  # noqa: F811
    created = env.create(ALICE, pool=pool, ttl="20m").body["id"]
    env.until(ALICE, created, "Ready")
    yield created
    env.release(ALICE, created)


@pytest.fixture(scope="module")
def strict_api(env: Env) -> Iterator[Api]:  # noqa: F811
    """A second API server with short session limits: 3 s idle, 8 s longest."""
    limits = ("--sandbox-stream-idle-timeout=3", "--sandbox-stream-max-duration=8")
    process, api = start_api(
        env.cluster, env.namespace, env.directory / "strict-api.log", (*EXTERNAL, *limits),
        env.directory / "lessor-apiserver.kubeconfig",
    )  # fmt: skip
    yield api
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)


@pytest.fixture(scope="module")
def ceiling_api(env: Env) -> Iterator[Api]:  # noqa: F811
    """A third API server where one identity may hold 2 open sessions (the usual time limits,
    so that no session ends on its own while the test looks at the ceiling)."""
    process, api = start_api(
        env.cluster, env.namespace, env.directory / "ceiling-api.log",
        (*EXTERNAL, "--sandbox-stream-max-per-identity=2"),
        env.directory / "lessor-apiserver.kubeconfig",
    )  # fmt: skip
    yield api
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)


def connect(base: str, lease: str, kind: str, query: str = "", token: str = ALICE) -> StreamClient:
    client = Client(Target(endpoint=base, auth="token", token=token))
    return StreamClient.open(client, f"/v1/sandbox-leases/{lease}/{kind}?{query}")


def refused(env: Env, lease: str, kind: str, query: str = "", token: str = ALICE) -> ApiError:  # noqa: F811
    with pytest.raises(ApiError) as raised:
        connect(env.api.api.base, lease, kind, query, token).close()
    text = str(raised.value)
    for marker in SECRET_MARKERS:
        assert marker not in text, f"{marker!r} in a refusal: {text}"
    return raised.value


class Reader:
    """Collects a session's frames in the background, until it closes."""

    def __init__(self, session: StreamClient) -> None:
        self.session = session
        self.frames: queue.Queue[tuple[int, bytes] | None] = queue.Queue()
        self.closed: Closed | None = None
        self.data: dict[int, bytes] = {}
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            while True:
                for frame in self.session.receive():
                    self.frames.put(frame)
        except Closed as closed:
            self.closed = closed
            self.frames.put(None)

    def until(self, channel: int, needle: bytes, timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while needle not in self.data.get(channel, b""):
            try:
                frame = self.frames.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                return False
            if frame is None:
                return False
            self.data[frame[0]] = self.data.get(frame[0], b"") + frame[1]
        return True

    def size(self, channel: int, size: int, timeout: float = 120) -> bytes:
        """The channel's data once it has `size` bytes (or what came before the timeout)."""
        deadline = time.monotonic() + timeout
        while len(self.data.get(channel, b"")) < size:
            try:
                frame = self.frames.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if frame is None:
                break
            self.data[frame[0]] = self.data.get(frame[0], b"") + frame[1]
        return self.data.get(channel, b"")

    def end(self, timeout: float = 120) -> Closed:
        deadline = time.monotonic() + timeout
        while self.closed is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.closed is not None, "the session did not end"
        return self.closed


def container_says(env: Env, reader: Reader, text: str, stream: str = "stdout") -> None:  # noqa: F811
    """Append a line to the sandbox's output until the session shows it. kwok starts following
    the log file a moment after the attach opens, so the first lines may be before its start."""
    channel = STDOUT if stream == "stdout" else 2
    deadline = time.monotonic() + 120  # a hang guard
    while time.monotonic() < deadline:
        with env.cluster.pod_log.open("a") as log:
            log.write(f"{STAMP} {stream} F {text}\n")
        if reader.until(channel, text.encode(), timeout=1):
            return
    raise AssertionError(f"{text!r} never reached the session; got {reader.data}")


def test_attach_round_trip(env: Env, lease: str) -> None:  # noqa: F811
    session = connect(env.api.api.base, lease, "attach", "tty=false")
    reader = Reader(session)
    marker = f"ready-{uuid.uuid4().hex[:8]}"
    container_says(env, reader, marker)
    # Input, a terminal resize, and the sandbox's echo of the input, on stdout and stderr.
    line = f"ping-{uuid.uuid4().hex[:8]}"
    session.send(STDIN, f"{line}\n".encode())
    session.send(RESIZE, b'{"width": 120, "height": 40}')
    container_says(env, reader, f"echo {line}")
    container_says(env, reader, f"warn {line}", stream="stderr")
    assert reader.closed is None, "input and resize keep the session open"
    session.end()
    assert reader.end().code == 1000
    # Audited: who opened it, and how it ended (docs/operations.md, Audit).
    opened = audited(env, "attach.open", lease)
    assert (opened["status"], opened["outcome"], opened["auth"]) == ("101", "allowed", "token")
    assert "alice" in opened["identity"] and opened["client"] == "127.0.0.1"
    closed = audited(env, "attach.close", lease)
    assert closed["identity"] == opened["identity"] and int(closed["bytes_in"]) > len(line)


def audited(env: Env, action: str, lease: str) -> dict[str, str]:  # noqa: F811
    """The API server's audit record of `action` on `lease` (it is written as the session ends,
    so it is waited for)."""

    def found() -> dict[str, str] | None:
        lines = (env.directory / "api.log").read_text().splitlines()
        records = [parse_logfmt(line) for line in lines if "logger=lessor.audit" in line]
        return next(
            (r for r in records if r.get("action") == action and r.get("lease") == lease), None
        )

    return wait_for(f"the audit record of {action}", found, timeout=30)


def test_attach_refusals(env: Env, lease: str, pool: str) -> None:  # noqa: F811
    assert refused(env, lease, "attach", token=BOB).status == 404, "another identity's lease"
    assert refused(env, "s" + "0" * 24, "attach").status == 404
    missing = refused(env, lease, "attach", "container=nope")
    assert (missing.status, "no container nope" in str(missing)) == (400, True)
    assert refused(env, lease, "attach", "tty=maybe").status == 400
    assert refused(env, lease, "attach", "shell=true").status == 400, "unknown parameter"
    stuck = env.create(ALICE, pool="sb-stuck").body["id"]
    assert refused(env, stuck, "attach").reason == "not_ready"
    assert env.release(ALICE, stuck).status == 204
    # Without the upgrade: 426, after authentication like every Sandbox route.
    plain = env.api.call("GET", f"/v1/sandbox-leases/{lease}/attach", token=ALICE)
    assert (plain.status, plain.headers["Upgrade"]) == (426, "websocket")
    assert env.api.call("GET", f"/v1/sandbox-leases/{lease}/attach").status == 401
    # A handshake that is not one this server speaks.
    connection = http.client.HTTPConnection(env.api.api.base.removeprefix("http://"), timeout=60)
    connection.request(
        "GET", f"/v1/sandbox-leases/{lease}/attach",
        headers={"Authorization": f"Bearer {ALICE}", "Upgrade": "websocket",
                 "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
                 "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                 "Sec-WebSocket-Protocol": "v4.channel.k8s.io"},
    )  # fmt: skip
    bad = connection.getresponse()
    assert bad.status == 400 and b"v1.stream.lessor.dev" in bad.read()
    connection.close()


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (bytes([9]) + b"x", PROTOCOL_ERROR),  # a channel clients do not send on
        (bytes([RESIZE]) + b'{"width": 0}', PROTOCOL_ERROR),  # a malformed size
        (b"", PROTOCOL_ERROR),  # no channel byte
    ],
)
def test_frames_outside_the_protocol_close_the_session(
    env: Env,  # noqa: F811
    lease: str,
    frame: bytes,
    code: int,
) -> None:
    session = connect(env.api.api.base, lease, "attach")
    reader = Reader(session)
    session._send(Message(data=frame))
    closed = reader.end()
    assert (closed.code, closed.error and closed.error["reason"]) == (code, "protocol_error")


def test_text_messages_are_refused(env: Env, lease: str) -> None:  # noqa: F811
    session = connect(env.api.api.base, lease, "attach")
    reader = Reader(session)
    session._send(TextMessage(data="hello"))
    assert reader.end().code == UNSUPPORTED


class EchoServer:
    """A TCP server on 127.0.0.1:port, as a process in the sandbox would listen on its port:
    each connection gets back what it sends."""

    def __init__(self, port: int) -> None:
        self.server = socket.create_server(("127.0.0.1", port))
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._echo, args=(connection,), daemon=True).start()

    @staticmethod
    def _echo(connection: socket.socket) -> None:
        with connection:
            while data := connection.recv(65536):
                connection.sendall(data)

    def close(self) -> None:
        self.server.shutdown(socket.SHUT_RDWR)  # wakes the accept, which holds the port
        self.server.close()


@pytest.fixture
def echo_server(env: Env) -> Iterator[EchoServer]:  # noqa: F811
    """The sandbox's server on its port `web`: kwok forwards the pod port to a host port of
    this session's cluster."""
    assert isinstance(env.cluster, LocalControlPlane)
    server = EchoServer(env.cluster.forward_target(WEB))
    yield server
    server.close()


def test_port_forward_reaches_a_declared_port_only(
    env: Env,  # noqa: F811
    lease: str,
    echo_server: EchoServer,
) -> None:
    for port in (str(WEB), "web"):  # by number and by the declared name
        session = connect(env.api.api.base, lease, "port-forward", f"port={port}")
        reader = Reader(session)
        payload = os.urandom(300_000)  # several frames and reads each way
        for start in range(0, len(payload), 100_000):
            session.send(STDIN, payload[start : start + 100_000])
        assert reader.size(STDOUT, len(payload)) == payload, "every byte back, in order"
        session.end()
        assert reader.end().code == 1000
    assert echo_server.connections == 2
    undeclared = refused(env, lease, "port-forward", f"port={UNDECLARED}")
    assert (undeclared.status, undeclared.reason) == (403, "not_declared")
    assert refused(env, lease, "port-forward", "port=ssh").reason == "not_declared"
    assert refused(env, lease, "port-forward").status == 400, "port is required"
    assert refused(env, lease, "port-forward", f"port={WEB}", token=BOB).status == 404
    # Resize means nothing to a port.
    session = connect(env.api.api.base, lease, "port-forward", "port=web")
    reader = Reader(session)
    session.send(RESIZE, b'{"width": 80, "height": 24}')
    assert reader.end().code == PROTOCOL_ERROR


def test_sessions_end_at_the_idle_and_duration_limits(
    env: Env,  # noqa: F811
    lease: str,
    strict_api: Api,
) -> None:
    idle = Reader(connect(strict_api.base, lease, "attach"))
    closed = idle.end()
    assert closed.code == IDLE_TIMEOUT and closed.error == {
        "reason": "idle_timeout",
        "detail": "no data for 3s",
    }
    asked = time.monotonic()  # the server's session starts after this, so it ends 8 s after
    busy_session = connect(strict_api.base, lease, "attach")
    busy = Reader(busy_session)
    while busy.closed is None and time.monotonic() - asked < 120:  # a hang guard
        busy_session.send(STDIN, b".")  # activity keeps it from idling
        time.sleep(0.2)
    closed = busy.end()
    assert closed.code == DURATION_LIMIT and closed.error
    assert closed.error["reason"] == "duration_limit"
    assert time.monotonic() - asked >= 8, "not before its longest duration"

    def counted() -> bool:  # the server counts a session's end once it has closed it
        metrics = strict_api.metrics()
        return all(
            re.search(
                rf'lessor_sandbox_streams_ended_total{{kind="attach",reason="{reason}"}} [1-9]',
                metrics,
            )
            for reason in ("idle_timeout", "duration_limit")
        )

    wait_for("both ends counted in the metrics", counted)


def test_withdrawing_the_grant_ends_open_sessions(env: Env, lease: str) -> None:  # noqa: F811
    """An administrator narrows the caller's Sandbox grant while a session is open: the session
    ends within a recheck with 4003 `access_revoked` (not only new requests are refused), and
    a new session finds no lease (404, outside the caller's scope)."""
    reader = Reader(connect(env.api.api.base, lease, "attach"))
    container_says(env, reader, f"granted-{uuid.uuid4().hex[:8]}")
    original = policy(env.namespace)
    narrowed = copy.deepcopy(original)
    narrowed["spec"]["sandbox"][0]["pools"] = ["sb-elsewhere"]
    env.objects.apply(narrowed)
    try:
        closed = reader.end()
        assert closed.code == ACCESS_REVOKED and closed.error == {
            "reason": "access_revoked",
            "detail": "your AccessPolicy no longer grants SandboxPool sb-ports",
        }
        assert refused(env, lease, "attach").status == 404
    finally:
        env.objects.apply(original)
        wait_for(
            "the grant to be back",
            lambda: env.api.call("GET", f"/v1/sandbox-leases/{lease}", token=ALICE).status == 200,
        )


def test_revoking_the_credential_ends_the_sessions_it_opened(env: Env, lease: str) -> None:  # noqa: F811
    """Review N20: a session token logged out, and a static token rotated, each end the open
    session they authenticated within a recheck (4003 `access_revoked`, the same words for
    both: which check failed is not the caller's to learn), not hours later."""
    api = env.api.api  # unscanned: a login's answer is a session token, by design
    session = api.call("POST", "/v1/login", token=ALICE).body["session_token"]
    by_session = Reader(connect(env.api.api.base, lease, "attach", token=session))
    by_token = Reader(connect(env.api.api.base, lease, "attach"))
    container_says(env, by_session, f"both-{uuid.uuid4().hex[:8]}")
    container_says(env, by_token, f"both-{uuid.uuid4().hex[:8]}")
    revoked = {"reason": "access_revoked", "detail": "your credential was revoked or expired"}

    assert api.call("DELETE", "/v1/login", token=session).status == 204
    closed = by_session.end()
    assert closed.code == ACCESS_REVOKED and closed.error == revoked
    assert by_token.closed is None, "a session of another credential goes on"

    rotated = {"data": {"alice": base64.b64encode(b"alice-rotated").decode()}}
    original = {"data": {"alice": base64.b64encode(ALICE.encode()).decode()}}
    patch = ("patch", "secret", "tokens", "-n", env.namespace, "--type=merge", "-p")
    env.cluster.kubectl(*patch, json.dumps(rotated))
    try:
        closed = by_token.end()
        assert closed.code == ACCESS_REVOKED and closed.error == revoked
    finally:
        env.cluster.kubectl(*patch, json.dumps(original))
        restored = time.monotonic()
        wait_for(
            "alice's token to be accepted again",
            lambda: env.api.call("GET", f"/v1/sandbox-leases/{lease}", token=ALICE).status == 200,
        )
        # Each worker reads a token's Secret again within 10 s; requests need not have reached
        # every worker, so the next test waits out what a worker may have cached.
        time.sleep(max(0.0, restored + 10.5 - time.monotonic()))


def test_one_identity_holds_a_bounded_number_of_sessions(
    env: Env,  # noqa: F811
    lease: str,
    ceiling_api: Api,
) -> None:
    """At the ceiling (2 on this server, across its workers) a further session of the identity
    is refused before anything is opened: 429 `too_many_sessions`, without Retry-After since
    it clears when a session closes, not with time. Closing one frees its slot."""
    first = Reader(connect(ceiling_api.base, lease, "attach"))
    second = Reader(connect(ceiling_api.base, lease, "attach"))
    connection = http.client.HTTPConnection(ceiling_api.base.removeprefix("http://"), timeout=60)
    connection.request(
        "GET", f"/v1/sandbox-leases/{lease}/attach",
        headers={"Authorization": f"Bearer {ALICE}", "Upgrade": "websocket",
                 "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
                 "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="},
    )  # fmt: skip
    third = connection.getresponse()
    body = json.loads(third.read())
    connection.close()
    assert (third.status, body["code"]) == (429, "too_many_sessions"), body
    assert third.getheader("Retry-After") is None
    first.session.end()
    assert first.end().code == 1000
    # The server frees the slot once it has closed the pod's stream too, a moment later.
    wait_for("the closed session's slot", lambda: _opens(ceiling_api.base, lease))
    assert second.closed is None, "the slot freed was the closed session's"
    second.session.end()
    second.end()


def _opens(base: str, lease: str) -> bool:
    try:
        connect(base, lease, "attach").close()
    except ApiError as error:
        assert error.reason == "too_many_sessions", error
        return False
    return True


def lessor(
    env: Env,  # noqa: F811
    tmp_path: Path,
    *argv: str,
    env_extra: dict[str, str] | None = None,
    **kwargs: object,
) -> subprocess.Popen[str]:
    environment = {
        **os.environ,
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "LESSOR_ENDPOINT": env.api.api.base,
        "LESSOR_TOKEN": ALICE,
        **(env_extra or {}),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "lessor.cli.main", *argv], env=environment, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs,  # type: ignore[call-overload]
    )  # fmt: skip


def test_the_cli_forwards_a_local_port(
    env: Env,  # noqa: F811
    lease: str,
    echo_server: EchoServer,
    tmp_path: Path,
) -> None:
    forward = lessor(env, tmp_path, "port-forward", lease, ":web")
    try:
        assert forward.stdout is not None
        banner = forward.stdout.readline()
        found = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> web", banner)
        assert found, banner
        for attempt in range(3):  # one session per connection
            with socket.create_connection(("127.0.0.1", int(found[1])), timeout=60) as local:
                local.sendall(f"hello {attempt}".encode())
                assert local.recv(100) == f"hello {attempt}".encode()
    finally:
        forward.send_signal(signal.SIGINT)
        forward.wait(timeout=30)
    assert echo_server.connections >= 3, "a session, so a connection, for each"
    wrong = lessor(env, tmp_path, "port-forward", lease, f":{UNDECLARED}")
    _, stderr = wrong.communicate(timeout=60)
    assert wrong.returncode == 3 and "not_declared" in stderr, stderr
    bad = lessor(env, tmp_path, "port-forward", lease, "80:/etc")
    _, stderr = bad.communicate(timeout=60)
    assert bad.returncode == 2 and "REMOTE" in stderr


def test_the_cli_attach_ends_when_the_lease_is_released(
    env: Env,  # noqa: F811
    pool: str,
    tmp_path: Path,
) -> None:
    lease = env.create(ALICE, pool=pool, ttl="20m").body["id"]
    env.until(ALICE, lease, "Ready")
    attach = lessor(env, tmp_path, "attach", lease, stdin=subprocess.PIPE)
    assert attach.stdin is not None and attach.stdout is not None
    attach.stdin.write("typed into the sandbox\n")
    attach.stdin.flush()
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in attach.stdout], daemon=True).start()  # type: ignore[union-attr]
    marker = f"from-sandbox-{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + 120  # a hang guard
    seen = ""
    while marker not in seen and time.monotonic() < deadline:
        with env.cluster.pod_log.open("a") as log:
            log.write(f"{STAMP} stdout F {marker}\n")
        with contextlib.suppress(queue.Empty):
            seen += lines.get(timeout=1)
    assert marker in seen
    assert env.release(ALICE, lease).status == 204
    _, stderr = attach.communicate(timeout=60)
    assert attach.returncode == 1, stderr
    assert "lease_not_ready" in stderr, stderr


def test_a_stopping_server_tells_its_sessions_why(env: Env, lease: str) -> None:  # noqa: F811
    """A replica that is being stopped closes its sessions at once with 1001 `server_shutdown`
    (rather than holding them through gunicorn's graceful timeout, 25 s here, and then cutting
    them without a word), so clients know to open a new session on another replica."""
    process, api = start_api(
        env.cluster, env.namespace, env.directory / "stopping-api.log", EXTERNAL,
        env.directory / "lessor-apiserver.kubeconfig",
    )  # fmt: skip
    try:
        reader = Reader(connect(api.base, lease, "attach"))
        container_says(env, reader, f"before-{uuid.uuid4().hex[:8]}")
        process.send_signal(signal.SIGTERM)
        closed = reader.end(timeout=60)
        assert (closed.code, closed.error and closed.error["reason"]) == (1001, "server_shutdown")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def test_the_cli_attach_on_a_terminal(env: Env, lease: str, tmp_path: Path) -> None:  # noqa: F811
    """On a terminal (a real pty): raw mode while attached and restored after, the output, a
    resize, and Ctrl-] detaching with exit 0."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    before = termios.tcgetattr(terminal)
    attach = subprocess.Popen(
        [sys.executable, "-m", "lessor.cli.main", "attach", lease],
        stdin=terminal, stdout=terminal, stderr=terminal, start_new_session=True,
        env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"),
             "LESSOR_ENDPOINT": env.api.api.base, "LESSOR_TOKEN": ALICE},
    )  # fmt: skip
    shown = b""

    def read_until(needle: bytes, write: str | None = None) -> None:
        nonlocal shown
        deadline = time.monotonic() + 120  # a hang guard
        while needle not in shown and time.monotonic() < deadline:
            if write:
                with env.cluster.pod_log.open("a") as log:
                    log.write(f"{STAMP} stdout F {write}\n")
            ready, _, _ = select.select([controller], [], [], 1)
            if ready:
                shown += os.read(controller, 4096)
        assert needle in shown, shown

    try:
        read_until(b"Ctrl-] detaches")
        assert termios.tcgetattr(terminal)[3] & termios.ICANON == 0, "raw while attached"
        marker = f"on-the-terminal-{uuid.uuid4().hex[:8]}"
        read_until(marker.encode(), write=marker)
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
        attach.send_signal(signal.SIGWINCH)  # no controlling terminal here to send it
        os.write(controller, b"typed\x1d")
        read_until(b"detached from")
        assert attach.wait(timeout=60) == 0
        assert termios.tcgetattr(terminal) == before, "the terminal is restored"
    finally:
        if attach.poll() is None:
            attach.kill()
        os.close(controller)
        os.close(terminal)


def test_pools_list_sandbox_pools_with_their_capabilities(env: Env, lease: str) -> None:  # noqa: F811
    listed = env.api.call("GET", "/v1/pools", token=ALICE)
    assert listed.status == 200
    records = {record["name"]: record for record in listed.body}
    assert records["sb-ports"]["resourceKind"] == "Sandbox"
    assert records["sb-ports"]["capabilities"] == [
        "lease", "extend", "release", "logs", "attach", "port-forward",
    ]  # fmt: skip
    assert "exec" in records["sb-run"]["capabilities"], "a pool with a runner executes"
    assert "exec" not in records["sb-warm"]["capabilities"]
    assert records["sb-warm"]["policy"] == {"mode": "fixed", "ttl": "10m", "warmTarget": 2}
    one = env.api.call("GET", "/v1/pools/sb-ports", token=ALICE).body
    # The same record; its counts are the operator's, which may move between the two reads
    # (another test's lease of sb-ports ending).
    live = {"phase", "ready", "leased", "quarantined"}
    assert one.keys() == records["sb-ports"].keys()
    assert {k: v for k, v in one.items() if k not in live} == {
        k: v for k, v in records["sb-ports"].items() if k not in live
    }
    assert [r["name"] for r in env.api.call("GET", "/v1/pools", token=DAVE).body] == [], (
        "no Sandbox grant, no Sandbox pool"
    )
    assert env.api.call("GET", "/v1/pools/sb-ports", token=DAVE).status == 404
    # A Sandbox pool's leases: the caller's own only, even for another caller with a grant.
    own = env.api.call("GET", "/v1/pools/sb-ports/leases", token=ALICE).body
    assert [(row["id"], row["phase"], row["profile"]) for row in own] == [
        (lease, "Ready", "sb-ports")
    ]
    others = env.api.call("GET", "/v1/pools/sb-ports/leases", token=BOB)
    assert others.status == 200 and lease not in [row["id"] for row in others.body]
    status = env.api.api.call("GET", "/v1/status", token=ALICE).body  # names auth methods
    assert "sb-ports" in [row["name"] for row in status["pools"]]
    assert records["sb-ports"]["leased"] >= 1, "the lease of this test holds one"


def test_a_sandbox_pools_record_counts_the_sandboxes_it_is_making(env: Env) -> None:  # noqa: F811
    """Warm sandboxes that cannot be placed (no node matches) are `creating`, not ready, and
    the pool is Degraded: the record carries agent-sandbox's counts, not zeros."""
    unplaceable = sandbox_pool("sb-unplaceable", 2)
    unplaceable["spec"]["template"]["spec"]["nodeSelector"] = {"lessor.dev/none": "none"}
    env.objects.apply(unplaceable)
    try:

        def counted() -> dict[str, Any] | None:
            record = env.api.call("GET", "/v1/pools/sb-unplaceable", token=ALICE).body
            return record if record.get("creating") == 2 else None

        record = wait_for("2 sandboxes being made", counted, timeout=120)
        assert (record["phase"], record["ready"], record["leased"]) == ("Degraded", 0, 0)
        assert (record["recycling"], record["unhealthy"], record["queueDepth"]) == (0, 0, 0)
    finally:
        env.cluster.kubectl("delete", "sandboxpool", "sb-unplaceable", "-n", env.namespace)


def test_the_cli_leases_extends_and_releases_a_sandbox(
    env: Env,  # noqa: F811
    pool: str,
    tmp_path: Path,
) -> None:
    def run(*argv: str) -> tuple[int, str, str]:
        process = lessor(env, tmp_path, *argv)
        stdout, stderr = process.communicate(timeout=120)
        return process.returncode, stdout, stderr

    code, stdout, stderr = run("lease", pool, "--ttl", "10m", "-o", "json")
    assert code == 0, stderr
    leased = json.loads(stdout)
    assert (leased["kind"], leased["phase"]) == ("Sandbox", "Ready")
    assert "attach" in leased["capabilities"] and leased["expires_at"]
    assert "kubeconfig" not in leased
    lease = leased["id"]
    code, stdout, _ = run("status", "-o", "json")
    assert lease in [row["id"] for row in json.loads(stdout)["sandbox_leases"]]
    code, stdout, stderr = run("extend", lease, "--ttl", "5m")
    assert code == 0 and "now expires" in stdout, stderr
    code, stdout, stderr = run("release", lease)
    assert code == 0 and "released sandbox lease" in stdout, stderr
    env.until(ALICE, lease, "Released")
    code, _, stderr = run("lease", pool, "--kubeconfig", str(tmp_path / "kc"))
    assert code == 2 and "--kubeconfig is for cluster pools" in stderr


def test_the_cli_reads_the_last_lines_of_a_sandboxs_log(
    env: Env,  # noqa: F811
    lease: str,
    tmp_path: Path,
) -> None:
    marks = [f"line-{n}-{uuid.uuid4().hex[:8]}" for n in range(3)]
    with env.cluster.pod_log.open("a") as log:
        log.writelines(f"{STAMP} stdout F {mark}\n" for mark in marks)
    tail = lessor(env, tmp_path, "logs", lease, "--tail", "2")
    stdout, stderr = tail.communicate(timeout=60)
    assert tail.returncode == 0, stderr
    assert stdout.splitlines() == marks[1:], stdout
    refusals = {
        ("-c", "nope"): "no container nope",  # the API's 400, one line
        ("--tail", "0"): "--tail must be from 1 to 5000",
        ("x0123456789abcdef01234567", "--tail", "3"): "not an execution's output",
    }
    for argv, said in refusals.items():
        refused = lessor(env, tmp_path, "logs", lease, *argv)
        _, stderr = refused.communicate(timeout=60)
        assert refused.returncode == 2 and said in stderr, (argv, stderr)


def test_the_cli_forwards_through_the_proxy_the_environment_names(
    env: Env,  # noqa: F811
    lease: str,
    echo_server: EchoServer,
    tmp_path: Path,
) -> None:
    """Behind a corporate proxy every request goes through it, the WebSocket session too: a
    CONNECT tunnel (urllib honoured HTTP_PROXY for the REST calls, the session's own socket
    did not)."""
    proxy = HttpProxy()
    api = urlsplit(env.api.api.base)
    through = {"http_proxy": proxy.url, "HTTP_PROXY": proxy.url, "no_proxy": "", "NO_PROXY": ""}
    forward = lessor(env, tmp_path, "port-forward", lease, ":web", env_extra=through)
    try:
        assert forward.stdout is not None
        banner = forward.stdout.readline()
        found = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> web", banner)
        assert found, (banner, forward.stderr.read() if forward.poll() is not None else "")
        with socket.create_connection(("127.0.0.1", int(found[1])), timeout=60) as local:
            local.sendall(b"through the proxy")
            assert local.recv(100) == b"through the proxy"
    finally:
        forward.send_signal(signal.SIGINT)
        forward.wait(timeout=30)
        proxy.close()
    assert f"CONNECT {api.hostname}:{api.port}" in proxy.seen, proxy.seen


class TlsFront:
    """TLS ahead of the API server, as an ingress or load balancer terminates it in a
    deployment: each connection is decrypted and its bytes relayed to the API unchanged."""

    def __init__(self, context: ssl.SSLContext, upstream: tuple[str, int]) -> None:
        self.context, self.upstream = context, upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(raw,), daemon=True).start()

    def _relay(self, raw: socket.socket) -> None:
        with contextlib.suppress(OSError):
            client = self.context.wrap_socket(raw, server_side=True)
            api = socket.create_connection(self.upstream, timeout=60)
            threading.Thread(target=_pump, args=(api, client), daemon=True).start()
            _pump(client, api)


def test_a_session_through_an_https_proxy_is_tls_in_tls_end_to_end(
    env: Env,  # noqa: F811
    lease: str,
    echo_server: EchoServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review N13 on the real API: the endpoint is https (TlsFront), the proxy an `https://` one
    with credentials. The CLI speaks TLS to the proxy (its CA from SSL_CERT_FILE), sends the
    CONNECT and its Basic credentials inside that TLS, and the session's own TLS to the endpoint
    runs inside the tunnel: a port-forward session carries its bytes both ways and ends with the
    server's close; the network in front of the proxy saw neither the credentials nor the
    CONNECT."""
    proxy_ca, endpoint_ca = CertificateAuthority("proxy CA"), CertificateAuthority("endpoint CA")
    (tmp_path / "proxy-ca.pem").write_bytes(proxy_ca.cert_pem)
    (tmp_path / "endpoint-ca.pem").write_bytes(endpoint_ca.cert_pem)
    api = urlsplit(env.api.api.base)
    front = TlsFront(
        server_context(endpoint_ca, tmp_path, "front"), (api.hostname or "", api.port or 80)
    )
    proxy = ConnectProxy(server_context(proxy_ca, tmp_path, "proxy"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "proxy-ca.pem"))
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    for name in ("https_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(name, f"https://alice:pass%20word@localhost:{proxy.port}")
    endpoint = f"https://localhost:{front.port}"
    client = Client(
        Target(
            endpoint=endpoint, auth="token", token=ALICE, ca_file=str(tmp_path / "endpoint-ca.pem")
        )
    )
    try:
        session = StreamClient.open(client, f"/v1/sandbox-leases/{lease}/port-forward?port=web")
        reader = Reader(session)
        payload = os.urandom(200_000)
        for start in range(0, len(payload), 50_000):
            session.send(STDIN, payload[start : start + 50_000])
        assert reader.size(STDOUT, len(payload)) == payload, "every byte back, in order"
        session.end()
        assert reader.end().code == 1000
    finally:
        proxy.close()
        front.listener.close()
    login = base64.b64encode(b"alice:pass word").decode()
    (head,) = proxy.heads
    assert proxy.tls == [True] and head.startswith(f"CONNECT localhost:{front.port} HTTP/1.1")
    assert f"Proxy-Authorization: Basic {login}" in head, head
    for secret in (login.encode(), b"pass word", b"CONNECT", ALICE.encode()):
        assert secret not in proxy.tapped, secret
