"""What the `lessor` commands print for the API's answers, pinned byte for byte: `-o json`,
`-o yaml`, `-o jsonpath=`, `-o name` and the text tables of `lease`, `get` (one lease, and the
listing), `status` (its pools), `extend`, `logs`, `cancel`, `exec`, `diagnostics`, `wait` and
`kubeconfig`.

The CLI reads answers through the response models (lessor.cli.answers); what it prints stayed
what it printed when it read them as dicts. The answers here are the server's own: each is a
response model serialized by the API's rule, and where a command echoes an answer the expected
JSON is built from that answer as the dict-reading CLI built it. The texts were captured from
that CLI (the commit before lessor.cli.answers) and this module passed against it unchanged.

In-process (`main(argv)`), against a local HTTP server on port 0 that answers fixed bodies, with
the clock fixed: the texts say how far away a time is, and pinned bytes need answers the real
stack cannot hold still. The real API server drives the CLI in tests/integration/test_cli.py."""

from __future__ import annotations

import datetime
import json
import os
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.cli import output
from lessor.cli.main import main
from lessor.protocol.responses import (
    ClusterHealth,
    DiagnosticsBundle,
    Execution,
    ExecutionLogs,
    ExecutionWindow,
    Expiry,
    Lease,
    LeaseCreated,
    LeaseEvent,
    LeaseSummary,
    PlacementRef,
    PoolPolicy,
    PoolRecord,
    SandboxExpiry,
    SandboxLease,
    SandboxLeaseCreated,
    SandboxLogs,
    SandboxPlacement,
    Status,
    StatusAuth,
    StatusPool,
    StatusSandbox,
    serialized,
)

NOW = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.UTC)
EXPIRES = "2026-03-01T13:30:00Z"  # in 1h30m
CLUSTER_ID = "l0123abcd4567"
OTHER_ID = "l00000000beef"
SANDBOX_ID = "s" + "0123456789ab" * 2
EXECUTION_ID = "x" + "89abcdef0123" * 2
KUBECONFIG = yaml.safe_dump(
    {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "lease",
        "clusters": [{"name": "lease", "cluster": {"server": "https://203.0.113.7:6443"}}],
        "users": [{"name": "lease", "user": {"token": "abc.def"}}],
        "contexts": [{"name": "lease", "context": {"cluster": "lease", "user": "lease"}}],
    }
)
METADATA = {"commit": "abc123", "attempt": 2, "ratio": 1.5, "tags": ["e2e", "pr"]}


def _pool(name: str, kind: str, capabilities: list[str]) -> dict[str, Any]:
    return serialized(
        PoolRecord(
            name=name, resource_kind=kind, capabilities=capabilities, phase="Healthy",
            ready=2, leased=1, creating=0, recycling=0, unhealthy=0, quarantined=0,
            queue_depth=0, policy=PoolPolicy(mode="fixed", ttl="1h", warmTarget=2),
        )
    )  # fmt: skip


POOL = _pool("ci-small", "Cluster", ["lease", "kubeconfig", "extend", "release"])
SANDBOX_POOL = _pool("agents", "Sandbox", ["lease", "extend", "release", "logs", "exec"])
CREATED = serialized(
    LeaseCreated(
        id=CLUSTER_ID, phase="Pending", profile="ci-small", queue_position=2,
        effective_ttl="1h", alias="pr-7", metadata=METADATA,
    )
)  # fmt: skip
BOUND_LEASE = Lease(id=CLUSTER_ID, phase="Bound", profile="ci-small", expires_at=EXPIRES)
BOUND_LEASE.alias = "pr-7"
BOUND_LEASE.metadata = METADATA
BOUND_LEASE.kubeconfig = KUBECONFIG
BOUND_LEASE.cluster_health = ClusterHealth(
    healthy=False, since="2026-03-01T11:50:00Z", message="node n-1 not ready"
)
BOUND = serialized(BOUND_LEASE)
PENDING = serialized(
    Lease(id=OTHER_ID, phase="Pending", profile="ci-large", expires_at=None, queue_position=3)
)
EVENTS = [
    serialized(
        LeaseEvent(
            type="Normal", reason="Bound", message="bound to cluster c-1", count=1,
            first_seen="2026-03-01T11:45:00Z", last_seen="2026-03-01T11:45:00Z",
        )
    ),
    serialized(
        LeaseEvent(
            type="Warning", reason="ClusterUnhealthy", message="node n-1 not ready", count=4,
            first_seen="2026-03-01T11:50:00Z", last_seen="2026-03-01T11:57:00Z",
        )
    ),
]  # fmt: skip
SUMMARIES = [
    serialized(
        LeaseSummary(
            id=CLUSTER_ID, phase="Bound", profile="ci-small", expires_at=EXPIRES, alias="pr-7"
        )
    ),
    serialized(LeaseSummary(id=OTHER_ID, phase="Pending", profile="ci-large", expires_at=None)),
]
SANDBOX_CREATED = serialized(
    SandboxLeaseCreated(
        id=SANDBOX_ID, phase="Pending", pool="agents", ttl="30m", alias="bot",
        provisioning_deadline="2026-03-01T12:05:00Z",
    )
)  # fmt: skip
_READY = SandboxLease(
    id=SANDBOX_ID, phase="Ready", pool="agents", ttl="30m", alias="bot",
    provisioning_deadline="2026-03-01T12:05:00Z", extensions_count=1, max_extensions=3,
    placement=SandboxPlacement(
        lease_uid="u-1", claim=PlacementRef(name="c-1", uid="u-2"),
        pod=PlacementRef(name="p-1", uid="u-3"),
    ),
)  # fmt: skip
_READY.ready_at = "2026-03-01T11:58:00Z"
_READY.expires_at = "2026-03-01T12:28:00Z"
_READY.message = "sandbox ready"
SANDBOX_READY = serialized(_READY)
STATUS = serialized(
    Status(
        version="0.9.0",
        auth=StatusAuth(methods=["token", "ssh"], sessions=["token"]),
        pools=[
            StatusPool(
                name="ci-small", ready=2, leased=1, creating=0, phase="Healthy", quarantined=0
            ),
            StatusPool(name="agents", ready=1, leased=0, creating=1),
        ],
        sandbox=StatusSandbox(mode="external", served=True, reason="agent-sandbox is served"),
    )
)
EXPIRY = serialized(Expiry(expires_at="2026-03-01T14:00:00Z"))
SANDBOX_EXPIRY = serialized(
    SandboxExpiry(expiresAt="2026-03-01T12:38:00Z", extensionsCount=2, maxExtensions=3)
)
LOGS = serialized(SandboxLogs(id=SANDBOX_ID, pod="p-1", data="line 1\nline 2\n", truncated=False))
CANCELLED = serialized(
    Execution(
        id=EXECUTION_ID, state="Cancelled", startedAt="2026-03-01T11:59:00Z",
        finishedAt="2026-03-01T11:59:30Z", truncated=False, timeout="10m",
    )
)  # fmt: skip
STARTED = serialized(
    Execution(
        id=EXECUTION_ID, state="Running", startedAt="2026-03-01T11:59:00Z", truncated=False,
        timeout="10m",
    )
)  # fmt: skip
FINISHED_LOGS = serialized(
    ExecutionLogs(
        id=EXECUTION_ID, state="Failed", exitCode=3,
        stdout=ExecutionWindow(data="out\n", nextOffset=4, more=False, truncated=False),
        stderr=ExecutionWindow(data="err\n", nextOffset=4, more=False, truncated=False),
    )
)  # fmt: skip
BUNDLE = serialized(
    DiagnosticsBundle(
        url="https://store.example/b.tar.gz?sig=x", expires_at="2026-03-01T13:00:00Z",
        captured_at="2026-03-01T11:59:00Z", size_bytes=2048, truncated=True,
    )
)  # fmt: skip

Answers = dict[tuple[str, str], object]
LEASE = {
    ("GET", "/v1/pools/ci-small"): POOL,
    ("POST", "/v1/leases"): CREATED,
    ("GET", f"/v1/leases/{CLUSTER_ID}"): BOUND,
}
SANDBOX = {
    ("GET", "/v1/pools/agents"): SANDBOX_POOL,
    ("POST", "/v1/sandbox-leases"): SANDBOX_CREATED,
    ("GET", f"/v1/sandbox-leases/{SANDBOX_ID}"): SANDBOX_READY,
}
ENSURE = {("GET", "/v1/pools/ci-small"): POOL, ("GET", "/v1/leases"): SUMMARIES}
DESCRIBE = {
    ("GET", f"/v1/leases/{CLUSTER_ID}"): BOUND,
    ("GET", f"/v1/leases/{CLUSTER_ID}/events"): EVENTS,
    ("GET", f"/v1/leases/{OTHER_ID}"): PENDING,
    ("GET", f"/v1/leases/{OTHER_ID}/events"): [],
    ("GET", f"/v1/sandbox-leases/{SANDBOX_ID}"): SANDBOX_READY,
}
LISTING = {("GET", "/v1/leases"): SUMMARIES, ("GET", "/v1/sandbox-leases"): [SANDBOX_READY]}
STATUSES = {("GET", "/v1/status"): STATUS, **LISTING}
SANDBOX_USE = {
    ("PATCH", f"/v1/leases/{CLUSTER_ID}"): EXPIRY,
    ("PATCH", f"/v1/sandbox-leases/{SANDBOX_ID}"): SANDBOX_EXPIRY,
    ("GET", f"/v1/sandbox-leases/{SANDBOX_ID}/logs"): LOGS,
    ("DELETE", f"/v1/sandbox-leases/{SANDBOX_ID}/executions/{EXECUTION_ID}"): CANCELLED,
    ("POST", f"/v1/sandbox-leases/{SANDBOX_ID}/executions"): STARTED,
    ("GET", f"/v1/sandbox-leases/{SANDBOX_ID}/executions/{EXECUTION_ID}/logs"): FINISHED_LOGS,
    ("GET", f"/v1/leases/{CLUSTER_ID}/diagnostics"): BUNDLE,
    ("GET", f"/v1/leases/{CLUSTER_ID}"): BOUND,
}


class Api:
    """A lessor API answering each (method, path) from a table, the query aside; a request
    that is not in it is a 404."""

    def __init__(self, answers: Answers) -> None:
        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                key = (self.command, self.path.partition("?")[0])
                status = 200 if key in answers else 404
                if key[0] == "POST":
                    status = 202
                body = answers.get(key, {"error": "not found", "code": "not_found"})
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _answer  # noqa: N815

            def log_message(self, *_: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _seconds_from(timestamp: str) -> int | None:
    """output._seconds_from_now, from NOW."""
    try:
        moment = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int((moment - NOW).total_seconds())


Run = Callable[[Answers, str], str]


@pytest.fixture
def run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Run]:
    """`lessor --endpoint API ARGS` in this process: its stdout, with the temporary home said
    as <home> and the API's address as <endpoint>."""
    for name in [n for n in os.environ if n.startswith("LESSOR_")]:
        monkeypatch.delenv(name)
    for name in ("SSH_AUTH_SOCK", "KUBECONFIG", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("LESSOR_TOKEN", "tok-" + "z" * 20)
    monkeypatch.setattr(output, "_seconds_from_now", _seconds_from)
    servers: list[Api] = []

    def lessor(answers: Answers, args: str) -> str:
        api = Api(answers)
        servers.append(api)
        code = main(["--endpoint", api.url, *args.split()])
        printed = capsys.readouterr()
        assert code == 0 or args.startswith("exec"), printed.err
        return printed.out.replace(str(tmp_path), "<home>").replace(api.url, "<endpoint>")

    yield lessor
    for api in servers:
        api.server.shutdown()


def as_json(data: object) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def as_yaml(data: object) -> str:
    return str(yaml.safe_dump(data, sort_keys=True))


WRITTEN = f"<home>/.kube/lessor-{CLUSTER_ID}"
LEASED = {
    "id": CLUSTER_ID, "profile": "ci-small", "kind": "Cluster",
    "capabilities": POOL["capabilities"], "reused": False, "alias": "pr-7", "phase": "Bound",
    "expires_at": EXPIRES, "kubeconfig": WRITTEN,
}  # fmt: skip
LEASED_TEXT = f"""\
lease         {CLUSTER_ID}
name          pr-7
pool          ci-small
kind          Cluster
capabilities  lease, kubeconfig, extend, release
phase         Bound
expires       {EXPIRES} (in 1h30m)
kubeconfig    {WRITTEN}
"""


def test_lease(run: Run) -> None:
    assert run(LEASE, "lease ci-small") == LEASED_TEXT
    assert run(LEASE, "lease ci-small -o json") == as_json(LEASED)
    assert run(LEASE, "lease ci-small -o yaml") == as_yaml(LEASED)
    assert run(LEASE, "lease ci-small -o jsonpath={.capabilities}") == (
        '["lease", "kubeconfig", "extend", "release"]\n'
    )
    waiting = {**{k: LEASED[k] for k in ("id", "profile", "kind", "capabilities", "reused")}}
    waiting.update(alias="pr-7", phase="Pending", queue_position=2)
    assert run(LEASE, "lease ci-small --no-wait -o json") == as_json(waiting)
    assert run(LEASE, "lease ci-small --no-wait") == (
        f"lease           {CLUSTER_ID}\nname            pr-7\npool            ci-small\n"
        "kind            Cluster\ncapabilities    lease, kubeconfig, extend, release\n"
        "phase           Pending\nqueue position  2\n"
    )


def test_lease_reused(run: Run) -> None:
    reused = {
        "id": CLUSTER_ID, "profile": "ci-small", "kind": "Cluster",
        "capabilities": POOL["capabilities"], "reused": True, "alias": "pr-7", "phase": "Bound",
        "queue_position": None,
    }  # fmt: skip
    assert run(ENSURE, "lease ci-small --ensure --name pr-7 --no-wait -o json") == as_json(reused)
    assert run(ENSURE, "lease ci-small --ensure --name pr-7 --no-wait") == (
        f"lease         {CLUSTER_ID}\nname          pr-7 (reused)\npool          ci-small\n"
        "kind          Cluster\ncapabilities  lease, kubeconfig, extend, release\n"
        "phase         Bound\n"
    )


def test_lease_of_a_sandbox(run: Run) -> None:
    leased = {
        "id": SANDBOX_ID, "profile": "agents", "kind": "Sandbox",
        "capabilities": SANDBOX_POOL["capabilities"], "reused": False, "alias": "bot",
        "phase": "Ready", "expires_at": "2026-03-01T12:28:00Z",
    }  # fmt: skip
    assert run(SANDBOX, "lease agents --name bot -o json") == as_json(leased)
    assert run(SANDBOX, "lease agents --name bot") == (
        f"lease         {SANDBOX_ID}\nname          bot\npool          agents\n"
        "kind          Sandbox\ncapabilities  lease, extend, release, logs, exec\n"
        "phase         Ready\nexpires       2026-03-01T12:28:00Z (in 28m)\n"
    )
    pending = {k: v for k, v in leased.items() if k != "expires_at"}
    assert run(SANDBOX, "lease agents --name bot --no-wait -o json") == as_json(
        {**pending, "phase": "Pending"}
    )


def test_describe(run: Run) -> None:
    shown = {k: v for k, v in BOUND.items() if k != "kubeconfig"}
    described = {**shown, "kind": "Cluster", "events": EVENTS}
    assert run(DESCRIBE, f"get {CLUSTER_ID} -o json") == as_json(described)
    assert run(DESCRIBE, f"get {CLUSTER_ID} -o yaml") == as_yaml(described)
    assert run(DESCRIBE, f"get {CLUSTER_ID} -o name") == f"lease/{CLUSTER_ID}\n"
    assert run(DESCRIBE, f"get {CLUSTER_ID} -o jsonpath={{.events[1]}}") == (
        json.dumps(EVENTS[1]) + "\n"
    )
    assert run(DESCRIBE, f"get {CLUSTER_ID} -o jsonpath={{.metadata}}") == (
        json.dumps(METADATA) + "\n"
    )
    assert run(DESCRIBE, f"get {CLUSTER_ID}") == (
        f"lease       {CLUSTER_ID}\n"
        "name        pr-7\n"
        "pool        ci-small\n"
        "kind        Cluster\n"
        "phase       Bound\n"
        f"expires     {EXPIRES} (in 1h30m)\n"
        "cluster     unhealthy since 2026-03-01T11:50:00Z: node n-1 not ready\n"
        f"kubeconfig  `lessor kubeconfig {CLUSTER_ID}` writes it\n"
        "\n"
        "Events:\n"
        "TYPE     REASON            AGE               MESSAGE\n"
        "Normal   Bound             15m               bound to cluster c-1\n"
        "Warning  ClusterUnhealthy  3m (x4 over 10m)  node n-1 not ready\n"
    )
    assert run(DESCRIBE, f"get {OTHER_ID} -o json") == as_json(
        {**PENDING, "kind": "Cluster", "events": []}
    )
    assert run(DESCRIBE, f"get {OTHER_ID}") == (
        f"lease           {OTHER_ID}\npool            ci-large\nkind            Cluster\n"
        "phase           Pending\nqueue position  3\n"
    )


def test_describe_a_sandbox(run: Run) -> None:
    assert run(DESCRIBE, f"get {SANDBOX_ID} -o json") == as_json(
        {**SANDBOX_READY, "kind": "Sandbox"}
    )
    assert run(DESCRIBE, f"get {SANDBOX_ID} -o name") == f"sandbox/{SANDBOX_ID}\n"
    assert run(DESCRIBE, f"get {SANDBOX_ID} -o jsonpath={{.placement}}") == (
        json.dumps(SANDBOX_READY["placement"]) + "\n"
    )
    assert run(DESCRIBE, f"get {SANDBOX_ID}") == (
        f"lease    {SANDBOX_ID}\nname     bot\npool     agents\nkind     Sandbox\n"
        "phase    Ready\nexpires  2026-03-01T12:28:00Z (in 28m)\nmessage  sandbox ready\n"
    )


def test_the_listing(run: Run) -> None:
    listed = [{**lease, "kind": "Cluster"} for lease in SUMMARIES]
    listed.append({**SANDBOX_READY, "kind": "Sandbox"})
    assert run(LISTING, "get -o json") == as_json(listed)
    assert run(LISTING, "get -o yaml") == as_yaml(listed)
    assert run(LISTING, "get -o jsonpath={.items[*].id}") == "\n"  # no `items`: a list
    assert run(LISTING, "get -o jsonpath={[*].phase}") == "Bound Pending Ready\n"
    assert run(LISTING, "get -o name") == (
        f"lease/{CLUSTER_ID}\nlease/{OTHER_ID}\nsandbox/{SANDBOX_ID}\n"
    )
    assert run(LISTING, "get") == (
        "ID                         NAME  POOL      KIND     PHASE    EXPIRES\n"
        f"{CLUSTER_ID}              pr-7  ci-small  Cluster  Bound    in 1h30m\n"
        f"{OTHER_ID}              -     ci-large  Cluster  Pending  -\n"
        f"{SANDBOX_ID}  bot   agents    Sandbox  Ready    in 28m\n"
    )
    assert run(LISTING, "get -o wide --no-headers") == (
        f"{CLUSTER_ID}              pr-7  ci-small  Cluster  Bound    in 1h30m  {EXPIRES}"
        "  -\n"
        f"{OTHER_ID}              -     ci-large  Cluster  Pending  -         -"
        "                     -\n"
        f"{SANDBOX_ID}  bot   agents    Sandbox  Ready    in 28m    2026-03-01T12:28:00Z  -\n"
    )


def test_status(run: Run) -> None:
    shown = {
        "endpoint": "<endpoint>", "target": None, "version": "0.9.0", "auth": STATUS["auth"],
        "session": None, "pools": STATUS["pools"], "leases": SUMMARIES,
        "sandbox_leases": [SANDBOX_READY],
    }  # fmt: skip

    assert run(STATUSES, "status -o json") == as_json(shown)
    assert run(STATUSES, "status -o yaml") == as_yaml(shown)
    assert run(STATUSES, "status -o jsonpath={.pools[*].name}") == "ci-small agents\n"
    assert run(STATUSES, "status -o jsonpath={.auth}") == json.dumps(STATUS["auth"]) + "\n"
    assert run(STATUSES, "status -o name") == (
        f"pool/ci-small\npool/agents\nlease/{CLUSTER_ID}\nlease/{OTHER_ID}\nsandbox/{SANDBOX_ID}\n"
    )
    assert run(STATUSES, "status") == (
        "endpoint      <endpoint>\n"
        "version       0.9.0\n"
        "auth methods  token, ssh\n"
        "sessions      token\n"
        "session       none; each request carries the target's credential\n"
        "\n"
        "POOL      READY  LEASED  CREATING  PHASE    QUARANTINED\n"
        "ci-small  2      1       0         Healthy  0\n"
        "agents    1      0       1\n"
        "\n"
        "LEASE                      POOL      PHASE    NAME  EXPIRES\n"
        f"{CLUSTER_ID}              ci-small  Bound    pr-7  {EXPIRES}\n"
        f"{OTHER_ID}              ci-large  Pending\n"
        f"{SANDBOX_ID}  agents    Ready    bot   2026-03-01T12:28:00Z\n"
    )
    assert run(STATUSES, "status --no-headers").splitlines()[6:8] == [
        "ci-small  2  1  0  Healthy  0",
        "agents    1  0  1",
    ]


def test_extend(run: Run) -> None:
    assert run(SANDBOX_USE, f"extend {CLUSTER_ID} --ttl 30m -o json") == as_json(
        {"id": CLUSTER_ID, **EXPIRY}
    )
    assert run(SANDBOX_USE, f"extend {CLUSTER_ID} --ttl 30m") == (
        f"lease {CLUSTER_ID} now expires 2026-03-01T14:00:00Z (in 2h)\n"
    )
    assert run(SANDBOX_USE, f"extend {SANDBOX_ID} --ttl 10m -o json") == as_json(
        {"id": SANDBOX_ID, **SANDBOX_EXPIRY}
    )
    assert run(SANDBOX_USE, f"extend {SANDBOX_ID} --ttl 10m -o yaml") == as_yaml(
        {"id": SANDBOX_ID, **SANDBOX_EXPIRY}
    )


def test_sandbox_logs_cancel_and_exec(run: Run) -> None:
    assert run(SANDBOX_USE, f"logs {SANDBOX_ID}") == "line 1\nline 2\n"
    assert run(SANDBOX_USE, f"logs {SANDBOX_ID} -o json") == as_json(LOGS)
    assert run(SANDBOX_USE, f"cancel {SANDBOX_ID} {EXECUTION_ID} -o json") == as_json(CANCELLED)
    assert run(SANDBOX_USE, f"cancel {SANDBOX_ID} {EXECUTION_ID} -o jsonpath={{.exitCode}}") == (
        "\n"
    )
    assert run(SANDBOX_USE, f"cancel {SANDBOX_ID} {EXECUTION_ID}") == (
        f"execution {EXECUTION_ID}: Cancelled\n"
    )
    assert run(SANDBOX_USE, f"logs {SANDBOX_ID} {EXECUTION_ID}") == "out\n"
    assert run(SANDBOX_USE, f"exec {SANDBOX_ID} --detach -o json -- make test") == as_json(
        {"id": EXECUTION_ID, "lease": SANDBOX_ID}
    )
    assert run(SANDBOX_USE, f"exec {SANDBOX_ID} -- make test") == "out\n"


def test_exec_exits_with_the_command_s_code(run: Run, capsys: pytest.CaptureFixture[str]) -> None:
    api = Api(SANDBOX_USE)
    try:
        code = main(["--endpoint", api.url, "exec", SANDBOX_ID, "--", "false"])
    finally:
        api.server.shutdown()
    assert code == 3
    assert capsys.readouterr().err == "err\n"


def test_diagnostics_wait_and_kubeconfig(run: Run) -> None:
    assert run(SANDBOX_USE, f"diagnostics {CLUSTER_ID} -o json") == as_json(BUNDLE)
    assert run(SANDBOX_USE, f"diagnostics {CLUSTER_ID}") == (
        "https://store.example/b.tar.gz?sig=x\n"
        "valid 2026-03-01T13:00:00Z (in 1h), 2048 bytes\n"
        "note: the bundle is incomplete (the pool's size or time limit); see capture.json\n"
    )
    assert run(SANDBOX_USE, f"wait {CLUSTER_ID} --for Bound -o json") == as_json(
        {"id": CLUSTER_ID, "phase": "Bound"}
    )
    assert run(SANDBOX_USE, f"wait {CLUSTER_ID} --for Bound") == f"lease {CLUSTER_ID} is Bound\n"
    assert run(SANDBOX_USE, f"kubeconfig {CLUSTER_ID} -o json") == as_json(
        {"id": CLUSTER_ID, "kubeconfig": WRITTEN}
    )
