"""The `lessor` command as a user runs it (a subprocess), for everything that needs no server:
config targets, usage errors, exit codes, man pages."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lessor import __version__
from lessor.cli import manpages
from lessor.controlplane.ports import PortReservation

ROOT = Path(__file__).resolve().parents[2]


def lessor(
    home: Path, *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("LESSOR_") and key not in ("SSH_AUTH_SOCK",)
    }
    environment.update(HOME=str(home), XDG_CONFIG_HOME=str(home / "config"), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "lessor.cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lessor: "), result.stderr
    return lines[0]


def test_config_targets_round_trip_privately(tmp_path: Path) -> None:
    added = lessor(
        tmp_path,
        "config",
        "set",
        "ci",
        "--endpoint",
        "https://lessor.example.com/",
        "--auth",
        "token",
        "--token-stdin",
        stdin="s3cret-token\n",
    )
    assert added.returncode == 0, added.stderr
    assert "(current)" in added.stdout, "the first target becomes the current one"
    assert (
        lessor(
            tmp_path, "config", "set", "dev", "--endpoint", "http://127.0.0.1:8000", "--auth", "ssh"
        ).returncode
        == 0
    )
    path = tmp_path / "config" / "lessor" / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700

    listed = json.loads(lessor(tmp_path, "config", "list", "-o", "json").stdout)
    assert listed == [
        {"name": "ci", "endpoint": "https://lessor.example.com", "auth": "token", "current": True},
        {"name": "dev", "endpoint": "http://127.0.0.1:8000", "auth": "ssh", "current": False},
    ]
    assert lessor(tmp_path, "config", "use", "dev").returncode == 0
    assert lessor(tmp_path, "config", "current").stdout == "dev\n"

    shown = lessor(tmp_path, "config", "view").stdout
    assert "s3cret-token" not in shown and "<redacted>" in shown
    raw = json.loads(lessor(tmp_path, "config", "view", "--raw").stdout)
    assert raw["targets"]["ci"]["token"] == "s3cret-token"
    assert raw["current"] == "dev"


def test_config_refuses_what_it_cannot_use(tmp_path: Path) -> None:
    bad = lessor(tmp_path, "config", "set", "x", "--endpoint", "ftp://host", "--auth", "ssh")
    assert bad.returncode == 2
    assert "endpoint" in one_line_error(bad) and "http(s)" in bad.stderr
    missing = lessor(tmp_path, "config", "use", "nowhere")
    assert missing.returncode == 4
    assert "no target named 'nowhere'" in one_line_error(missing)
    oidc = lessor(tmp_path, "config", "set", "x", "--endpoint", "https://a.b", "--auth", "oidc")
    assert oidc.returncode == 2 and "--oidc-issuer" in one_line_error(oidc)
    assert not (tmp_path / "config" / "lessor" / "config.json").exists()

    (tmp_path / "config" / "lessor").mkdir(parents=True)
    (tmp_path / "config" / "lessor" / "config.json").write_text('{"targets": {"a": {}}}')
    broken = lessor(tmp_path, "config", "list")
    assert broken.returncode == 2
    assert "targets.a.endpoint" in one_line_error(broken)


def test_config_edit_saves_only_a_valid_config(tmp_path: Path) -> None:
    lessor(tmp_path, "config", "set", "a", "--endpoint", "http://one.example", "--auth", "none")
    editor = tmp_path / "editor.py"
    editor.write_text(
        "import sys, pathlib\n"
        "p = pathlib.Path(sys.argv[1])\n"
        "p.write_text(p.read_text().replace('one.example', 'two.example'))\n"
    )
    edited = lessor(tmp_path, "config", "edit", env={"EDITOR": f"{sys.executable} {editor}"})
    assert edited.returncode == 0, edited.stderr
    assert json.loads(lessor(tmp_path, "config", "list", "-o", "json").stdout)[0]["endpoint"] == (
        "http://two.example"
    )
    breaker = tmp_path / "breaker.py"
    breaker.write_text(
        'import sys, pathlib\npathlib.Path(sys.argv[1]).write_text(\'{"current": "gone"}\')\n'
    )
    refused = lessor(tmp_path, "config", "edit", env={"EDITOR": f"{sys.executable} {breaker}"})
    assert refused.returncode == 2
    assert "is unchanged" in one_line_error(refused)
    assert json.loads(lessor(tmp_path, "config", "list", "-o", "json").stdout)[0]["endpoint"] == (
        "http://two.example"
    )


def test_usage_errors_and_unreachable_endpoints_are_one_line_with_distinct_codes(
    tmp_path: Path,
) -> None:
    no_target = lessor(tmp_path, "lease", "small")
    assert no_target.returncode == 2 and "no target" in one_line_error(no_target)
    # A port reserved and never listened on: refused, and no other process may take it meanwhile.
    closed = PortReservation()
    endpoint = f"http://127.0.0.1:{closed.take()}"
    down = lessor(tmp_path, "--endpoint", endpoint, "status")
    assert down.returncode == 1 and f"cannot reach {endpoint}" in one_line_error(down)
    ttl = lessor(tmp_path, "lease", "small", "--endpoint", endpoint, "--ttl", "soon")
    assert ttl.returncode == 2 and "--ttl: invalid duration 'soon'" in one_line_error(ttl)
    ensure = lessor(tmp_path, "lease", "small", "--endpoint", endpoint, "--ensure")
    assert ensure.returncode == 2 and "--ensure needs --name" in one_line_error(ensure)
    metadata = lessor(tmp_path, "lease", "small", "--endpoint", endpoint, "--metadata-json", "[1]")
    assert metadata.returncode == 2, "checked before any request"
    assert "--metadata-json must be a JSON object" in one_line_error(metadata)
    unknown = lessor(tmp_path, "lease")
    assert unknown.returncode == 2 and "usage: lessor lease" in unknown.stderr
    attach = lessor(tmp_path, "attach", "lease-1", "--endpoint", endpoint)
    assert attach.returncode == 1 and f"cannot reach {endpoint}" in one_line_error(attach)
    forward = lessor(tmp_path, "port-forward", "lease-1", "80:/x", "--endpoint", endpoint)
    assert forward.returncode == 2 and "REMOTE is a port number" in one_line_error(forward)
    superscript = lessor(tmp_path, "port-forward", "lease-1", "²:web", "--endpoint", endpoint)
    assert superscript.returncode == 2 and "LOCAL is a port number" in one_line_error(superscript)
    no_command = lessor(tmp_path, "exec", "lease-1", "--endpoint", endpoint)
    assert no_command.returncode == 2 and "end the options with --" in one_line_error(no_command)
    late = lessor(tmp_path, "exec", "lease-1", "--timeout", "0s", "--", "true")
    assert late.returncode == 2 and "--timeout" in one_line_error(late)
    version = lessor(tmp_path, "version", "-o", "json")
    assert version.returncode == 0
    assert json.loads(version.stdout)["client"] == __version__
    closed.release()


def test_man_pages_are_current() -> None:
    assert manpages.stale(ROOT / "man" / "man1") == [], (
        "regenerate with: python -m lessor.cli.manpages write man/man1"
    )


def test_every_man_page_has_examples_environment_files_and_exit_status() -> None:
    for name, text in manpages.pages().items():
        for heading in (".SH ENVIRONMENT", ".SH FILES", ".SH EXIT STATUS", "LESSOR_TOKEN"):
            assert heading in text, (name, heading)
        assert "examples:" in text, f"{name} shows no example"


def test_man_pages_are_installed_with_the_package() -> None:
    installed = Path(sys.prefix) / "share" / "man" / "man1"
    if not (installed / "lessor.1").exists() and "TOX_ENV_NAME" not in os.environ:
        pytest.skip("lessor is not installed from a wheel here (tox installs one)")
    for name, text in manpages.pages().items():
        assert (installed / name).read_text() == text, name
    if shutil.which("man"):
        found = subprocess.run(
            ["man", "-w", "lessor-lease"],
            capture_output=True,
            text=True,
            env={**os.environ, "PATH": f"{Path(sys.prefix) / 'bin'}:{os.environ['PATH']}"},
            check=False,
        )
        assert found.stdout.strip() == str(installed / "lessor-lease.1")


def pool_record(name: str, kind: str = "Cluster") -> dict[str, object]:
    """A pool as `GET /v1/pools/NAME` answers it (lessor.protocol.responses.PoolRecord)."""
    return {
        "name": name, "resourceKind": kind, "capabilities": ["lease", "kubeconfig"],
        "phase": "Healthy", "ready": 1, "leased": 0, "creating": 0, "recycling": 0,
        "unhealthy": 0, "quarantined": 0, "queueDepth": 0,
        "policy": {"mode": "fixed", "ttl": "1h", "warmTarget": 1},
    }  # fmt: skip


class HostileServer:
    """An endpoint that answers like lessor but names its lease `../../.bashrc`: a malicious or
    intercepted server, which the real one cannot be made into, so this one plays it."""

    def __init__(self, lease_id: str) -> None:
        pool = pool_record("p")
        # Both a created lease (202) and a read one: a well-formed answer but for its id.
        lease = {
            "id": lease_id, "phase": "Bound", "profile": "p", "queue_position": 0,
            "effective_ttl": "1h", "expires_at": "2030-01-01T00:00:00Z",
            "kubeconfig": "echo pwned\n",
        }  # fmt: skip
        answers = {("GET", "/v1/pools/p"): (200, pool), ("POST", "/v1/leases"): (202, lease)}

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, body = answers.get((self.command, self.path), (200, lease))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _answer  # noqa: N815

            def log_message(self, *_: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.mark.parametrize("lease_id", ["x/../../.bashrc", "../.bashrc", "a" * 300, "L1"])
def test_a_lease_id_from_the_server_never_leaves_the_kubeconfig_directory(
    tmp_path: Path, lease_id: str
) -> None:
    """Issue 18, item 6: the kubeconfig file's name comes from the server's lease id, so an id
    that is no lease id is refused before anything is written."""
    server = HostileServer(lease_id)
    bashrc = tmp_path / ".bashrc"
    bashrc.write_text("# mine\n")
    try:
        leased = lessor(tmp_path, "lease", "p", "--endpoint", server.url, env={"LESSOR_TOKEN": "t"})
    finally:
        server.server.shutdown()
    assert bashrc.read_text() == "# mine\n"
    assert leased.returncode == 1 and "malformed lease id" in one_line_error(leased)
    assert not (tmp_path / ".kube").exists() or not any((tmp_path / ".kube").iterdir())


def test_the_command_alone_helps_and_an_unknown_flag_is_named(tmp_path: Path) -> None:
    alone = lessor(tmp_path)
    assert alone.returncode == 0 and "usage: lessor" in alone.stdout, alone.stderr
    assert "lease" in alone.stdout
    bogus = lessor(tmp_path, "--bogus")
    assert bogus.returncode == 2 and "unrecognized arguments: --bogus" in bogus.stderr
    late = lessor(tmp_path, "status", "--bogus")
    assert late.returncode == 2 and "unrecognized arguments: --bogus" in late.stderr
    example = lessor(tmp_path, "config", "set", "--help")
    assert "https://lessor.example.com \\\n      --auth token --token-stdin" in example.stdout


def test_a_ca_file_that_cannot_be_used_is_refused_when_set_and_named_when_met(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config" / "lessor" / "config.json"
    base = ["config", "set", "x", "--endpoint", "https://lessor.example", "--auth", "none"]
    missing = lessor(tmp_path, *base, "--ca-file", str(tmp_path / "nowhere.pem"))
    assert missing.returncode == 2 and "cannot be used" in one_line_error(missing)
    not_pem = tmp_path / "hostname"
    not_pem.write_text("not a certificate\n")
    garbage = lessor(tmp_path, *base, "--ca-file", str(not_pem))
    assert garbage.returncode == 2 and "cannot be used" in one_line_error(garbage)
    assert not config.exists(), "a refused target is not saved"
    # A file that went away after it was set: one line, not a traceback.
    config.parent.mkdir(parents=True)
    target = {"endpoint": "https://lessor.example", "auth": "none", "caFile": str(not_pem)}
    config.write_text(json.dumps({"current": "x", "targets": {"x": target}}))
    later = lessor(tmp_path, "get", "lease-1")
    assert later.returncode == 2 and "cannot be used" in one_line_error(later)


class Origin:
    """An HTTP server that redirects every request to `to` (when set) and records the
    Authorization header each request carried."""

    def __init__(self, to: str = "") -> None:
        self.seen: list[str | None] = []
        origin = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                origin.seen.append(self.headers.get("Authorization"))
                if origin.to:
                    self.send_response(302)
                    self.send_header("Location", f"{origin.to}{self.path}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = b'{"error": "not_found", "detail": "no lease lease-1", "code": "not_found"}'
                self.send_response(404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                return

        self.to = to
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_a_redirect_carries_the_credential_to_the_same_origin_only(tmp_path: Path) -> None:
    """N12: a bearer token followed a redirect to any host. Another port is another origin."""
    elsewhere = Origin()
    endpoint = Origin(to=elsewhere.url)
    token = {"LESSOR_TOKEN": "tok-" + "x" * 20}
    try:
        result = lessor(tmp_path, "--endpoint", endpoint.url, "get", "lease-1", env=token)
        assert result.returncode == 4, result.stderr  # the redirect was followed
        assert endpoint.seen and set(endpoint.seen) == {f"Bearer {token['LESSOR_TOKEN']}"}
        assert elsewhere.seen and set(elsewhere.seen) == {None}, "the token went elsewhere"
        # Within one origin the credential stays: a path moved behind the same address.
        endpoint.to = endpoint.url + "/moved"
        endpoint.seen.clear()
        lessor(tmp_path, "--endpoint", endpoint.url, "get", "lease-1", env=token)
        assert endpoint.seen[1] == f"Bearer {token['LESSOR_TOKEN']}", endpoint.seen
    finally:
        endpoint.server.shutdown()
        elsewhere.server.shutdown()


def test_a_bundle_url_that_is_not_http_is_never_opened(tmp_path: Path) -> None:
    """N11: `diagnostics --download` opened any scheme the server sent (file:, ftp:, data:)."""
    secret = tmp_path / "secret"
    secret.write_text("a local file\n")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({
                "url": secret.as_uri(), "expires_at": "2030-01-01T00:00:00Z",
                "captured_at": "2029-12-31T23:00:00Z", "size_bytes": 13, "truncated": False,
            }).encode()  # fmt: skip
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    bundle = tmp_path / "bundle.tar.gz"
    try:
        result = lessor(
            tmp_path, "--endpoint", endpoint, "diagnostics", "lease-1", "--download", str(bundle),
            env={"LESSOR_TOKEN": "tok-" + "y" * 20},
        )  # fmt: skip
    finally:
        server.shutdown()
    assert result.returncode == 1 and "not http(s)" in one_line_error(result)
    assert not bundle.exists()


class Scripted:
    """A server answering each request with the next of `script`: (status, headers, body) or
    "drop" (the connection closed with no answer); records each request's method and path."""

    def __init__(self, script: list[object]) -> None:
        self.script = list(script)
        self.seen: list[str] = []
        state = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                state.seen.append(f"{self.command} {self.path}")
                step = state.script.pop(0) if state.script else (404, {}, {"error": "x"})
                if step == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                status, headers, body = step  # type: ignore[misc]
                data = json.dumps(body).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def log_message(self, *_: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


LIMITED = (429, {"Retry-After": "1"}, {"error": "too many requests", "code": "rate_limited"})
SHED = (503, {"Retry-After": "1"}, {"error": "service unavailable", "code": "overloaded"})
MISSING = (404, {}, {"error": "not found", "detail": "no lease lease-1", "code": "not_found"})


@pytest.mark.parametrize(
    ("script", "args", "code", "requests", "retried"),
    [
        pytest.param([LIMITED, LIMITED, MISSING], ["get", "lease-1"], 4, 3, 2, id="rate-limited"),
        pytest.param(
            [(429, {}, {"error": "x", "code": "concurrency_limit"})],
            ["get", "lease-1"],
            6,
            1,
            0,
            id="concurrency-is-final",
        ),
        pytest.param(
            [(429, {"Retry-After": "100"}, {"error": "x", "code": "rate_limited"})],
            ["--retry-budget", "5s", "get", "lease-1"],
            6,
            1,
            0,
            id="beyond-the-budget",
        ),
        pytest.param(
            [SHED, (400, {}, {"error": "bad request", "code": "invalid_request"})],
            ["lease", "pool-a", "--no-wait"],
            2,
            2,
            1,
            id="shed-create-resent",
        ),
        pytest.param(["drop", MISSING], ["get", "lease-1"], 4, 2, 1, id="read-without-answer"),
        pytest.param(  # the budget is the command's: the second request finds it spent
            [LIMITED, MISSING, LIMITED],
            ["--retry-budget", "1s", "get", "lease-1"],
            6,
            2,
            1,
            id="one-budget-for-the-command",
        ),
    ],
)
def test_refusals_that_say_when_are_waited_out_and_reads_without_an_answer_retried(
    tmp_path: Path, script: list[object], args: list[str], code: int, requests: int, retried: int
) -> None:
    server = Scripted(script)
    if args[0] == "lease":  # `lease` reads the pool first
        server.script.insert(0, (200, {}, pool_record("pool-a")))
        requests += 1
    try:
        result = lessor(
            tmp_path, "--endpoint", server.url, *args, env={"LESSOR_TOKEN": "tok-" + "z" * 20}
        )
    finally:
        server.server.shutdown()
    assert result.returncode == code, (result.stderr, server.seen)
    # `get` looks among sandbox leases as well once the cluster lease is not found.
    asked = [seen for seen in server.seen if "/v1/sandbox-leases/" not in seen]
    assert len(asked) == requests, server.seen
    assert result.stderr.count("retrying in") + result.stderr.count("trying again") == retried


def test_options_between_the_pool_and_the_command_mean_what_they_mean_before_it(
    tmp_path: Path,
) -> None:
    """`with-lease POOL --retry-budget 1s -v -- CMD`: the shared options count there too (the
    pool's read is refused past the budget), and an unknown one is one line."""
    server = Scripted([LIMITED, LIMITED, MISSING])
    token = {"LESSOR_TOKEN": "tok-" + "z" * 20}
    try:
        late = lessor(
            tmp_path, "--endpoint", server.url, "with-lease", "pool-a",
            "--retry-budget", "1s", "-v", "--", "true", env=token,
        )  # fmt: skip
    finally:
        server.server.shutdown()
    assert late.returncode == 6, late.stderr
    assert late.stderr.count("retrying in") == 1 and "> GET" in late.stderr, late.stderr
    bogus = lessor(tmp_path, "with-lease", "pool-a", "--bogus", "--", "true", env=token)
    assert bogus.returncode == 2
    assert bogus.stderr == "lessor: unknown options before --: --bogus\n", bogus.stderr


def test_a_create_that_got_no_answer_is_not_sent_again(tmp_path: Path) -> None:
    server = Scripted([(200, {}, pool_record("pool-a")), "drop"])
    try:
        result = lessor(
            tmp_path, "--endpoint", server.url, "lease", "pool-a", "--no-wait",
            env={"LESSOR_TOKEN": "tok-" + "z" * 20},
        )  # fmt: skip
    finally:
        server.server.shutdown()
    assert result.returncode == 1, result.stderr
    assert [seen.split()[0] for seen in server.seen] == ["GET", "POST"]
