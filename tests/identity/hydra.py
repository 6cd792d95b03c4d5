"""ORY Hydra, a certified OpenID provider, built here from its Go module and run for the suite.

Built once into the cache like the local control plane (lessor.controlplane.binaries). Hydra's
own go.mod replaces its API client with a directory missing from the module zip, so it is built
from a wrapper module that requires it and repeats its one other replace (its fork of pop).
The binary is static (sqlite for its in-memory store needs cgo; `netgo`, `osusergo` and a static
link make it run in any image), so the kind e2e runs the same file in a pod. Measured: the first
build took 1 min 39 s on two cores with the module cache warm; later runs find it in the cache.

Hydra leaves login and consent to the deployer by design: `tests/identity/login_consent.py` is
ours, a static user accepted through Hydra's admin API, as a deployer would write it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

from lessor.controlplane.binaries import build_once, cache_root, run_go, wrapper_module
from lessor.controlplane.ports import reserved_port
from tests.identity import form_browser
from tests.identity.login_consent import LoginConsent
from tests.integration.operator_harness import wait_for

HYDRA = "v2.3.0"  # github.com/ory/hydra/v2: the only version the module proxy serves here
# Hydra's go.mod replaces pop with Ory's fork; a wrapper module must say so itself.
POP_FORK = "github.com/ory/pop/v6 v6.2.1-0.20241121111754-e5dfc0f3344b"
TAGS = "sqlite,sqlite_omit_load_extension,netgo,osusergo"
MISSING_GO = "the Go toolchain (and a C compiler, for sqlite) is needed to build ORY Hydra"
ID_TOKEN_KEYS = "hydra.openid.id-token"  # the key set Hydra signs ID tokens with


def hydra_binary() -> Path:
    """The hydra binary of HYDRA, built once into the cache."""
    target = cache_root() / "bin" / f"hydra-{HYDRA}"

    def build(go: str, work: Path, out: Path) -> None:
        module = work / "hydra"
        lines = [
            "go 1.22",
            f"require github.com/ory/hydra/v2 {HYDRA}",
            f"replace github.com/gobuffalo/pop/v6 => {POP_FORK}",
        ]
        wrapper_module(module, "lessor.dev/identity/hydra", lines)
        cgo = {"CGO_ENABLED": "1"}
        run_go(go, ["get", f"github.com/ory/hydra/v2@{HYDRA}"], module, print, cgo)
        stamp = f"-X github.com/ory/hydra/v2/driver/config.Version={HYDRA}"
        flags = f"-s -w {stamp} -linkmode external -extldflags -static"
        command = ["build", "-trimpath", "-tags", TAGS, "-ldflags", flags, "-o", f"{out}/hydra"]
        run_go(go, [*command, "github.com/ory/hydra/v2"], module, print, cgo)

    directory = build_once(
        target,
        (target / "hydra").is_file,
        build,
        what=f"ORY Hydra {HYDRA}",
        missing_go=MISSING_GO,
        progress=print,
    )
    return directory / "hydra"


def config(
    issuer: str,
    login_app: str,
    public_port: int,
    admin_port: int,
    tls: tuple[bytes, bytes] | None = None,
) -> dict[str, Any]:
    """Hydra's configuration: an in-memory store, short token lifetimes, login and consent at
    `login_app`; with `tls` (a certificate and its key, PEM), the public address serves https
    (the admin API stays plain: only the tests' automation calls it). `--dev` lets the pages be
    http, and serves plain http where no certificate is configured."""
    public: dict[str, Any] = {"host": "0.0.0.0", "port": public_port}
    if tls is not None:
        cert, key = (base64.b64encode(pem).decode() for pem in tls)
        public["tls"] = {"enabled": True, "cert": {"base64": cert}, "key": {"base64": key}}
    return {
        "dsn": "memory",
        "serve": {
            "public": public,
            "admin": {"host": "0.0.0.0", "port": admin_port, "tls": {"enabled": False}},
            "cookies": {"same_site_mode": "Lax"},
        },
        "urls": {
            "self": {"issuer": issuer},
            "login": f"{login_app}/login",
            "consent": f"{login_app}/consent",
            "logout": f"{login_app}/logout",
            "error": f"{login_app}/error",
        },
        "secrets": {"system": [secrets.token_urlsafe(32)]},
        "ttl": {"id_token": "5m", "access_token": "5m", "refresh_token": "1h"},
        "oauth2": {"pkce": {"enforced_for_public_clients": True}},
        "log": {"level": "warn", "leak_sensitive_values": False},
    }


@dataclass
class Hydra:
    """A running Hydra: its issuer (the public address) and admin API."""

    issuer: str
    admin: str
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    clients: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, directory: Path, login_app: str) -> Hydra:
        public_port, public_reservation = reserved_port()
        admin_port, admin_reservation = reserved_port()
        issuer = f"http://127.0.0.1:{public_port}"
        settings = directory / "hydra.json"
        settings.write_text(json.dumps(config(issuer, login_app, public_port, admin_port)))
        log = directory / "hydra.log"
        public_reservation.release()
        admin_reservation.release()
        with log.open("ab") as output:
            process = subprocess.Popen(
                # --dev: an http issuer on loopback, as lessor's loopback rule allows in tests.
                [str(hydra_binary()), "serve", "all", "--dev", "--config", str(settings)],
                stdout=output,
                stderr=subprocess.STDOUT,
                env={k: v for k, v in os.environ.items() if not k.startswith(("HTTP", "http"))},
            )
        hydra = cls(issuer, f"http://127.0.0.1:{admin_port}", process, log)
        hydra.wait_ready()
        return hydra

    def wait_ready(self, timeout: float = 120.0) -> None:
        def ready() -> bool:
            if self.process is not None and self.process.poll() is not None:
                tail = self.log.read_text()[-3000:] if self.log else ""
                raise AssertionError(f"hydra exited:\n{tail}")
            try:
                with urllib.request.urlopen(f"{self.admin}/health/ready", timeout=5) as answer:
                    return bool(answer.status == 200)
            except OSError:
                return False

        wait_for("ORY Hydra", ready, timeout=timeout)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)

    # -- the admin API, as a deployer's automation uses it ---------------------------------

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.admin}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                raw = answer.read()
                return answer.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as error:
            raw = error.read()
            return error.code, json.loads(raw) if raw else None

    def public_client(self, client_id: str, scopes: str = "openid offline_access email") -> None:
        """A public client (no secret, PKCE enforced) with a loopback redirect, as a CLI is
        registered (RFC 8252: any port on 127.0.0.1)."""
        status, body = self.call(
            "POST",
            "/admin/clients",
            {
                "client_id": client_id,
                "client_name": client_id,
                "token_endpoint_auth_method": "none",
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "redirect_uris": ["http://127.0.0.1/callback"],
                "scope": scopes,
            },
        )
        assert status == 201, (status, body)
        self.clients.append(client_id)

    def tokens(self, client_id: str, user: str, password: str, scope: str) -> dict[str, Any]:
        """The token answer of an authorization-code login with PKCE, a person's part played by
        tests/identity/form_browser.py through the login and consent pages."""
        verifier = secrets.token_urlsafe(48)
        digest = hashlib.sha256(verifier.encode()).digest()
        challenge = base64.urlsafe_b64encode(digest).decode().rstrip("=")
        received: dict[str, str] = {}

        class Callback(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                received.update(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                return

        callback = HTTPServer(("127.0.0.1", 0), Callback)
        threading.Thread(target=callback.serve_forever, daemon=True).start()
        redirect = f"http://127.0.0.1:{callback.server_port}/callback"
        query = urllib.parse.urlencode({
            "response_type": "code", "client_id": client_id, "redirect_uri": redirect,
            "scope": scope, "state": secrets.token_urlsafe(12), "code_challenge": challenge,
            "code_challenge_method": "S256",
        })  # fmt: skip
        try:
            form_browser.browse(f"{self.issuer}/oauth2/auth?{query}", user=user, password=password)
        finally:
            callback.shutdown()
            callback.server_close()
        assert "code" in received, received
        return self.token_request({
            "grant_type": "authorization_code", "code": received["code"],
            "redirect_uri": redirect, "code_verifier": verifier, "client_id": client_id,
        })  # fmt: skip

    def token_request(self, form: dict[str, str]) -> dict[str, Any]:
        data = urllib.parse.urlencode(form).encode()
        with urllib.request.urlopen(f"{self.issuer}/oauth2/token", data=data, timeout=30) as answer:
            document: dict[str, Any] = json.loads(answer.read())
            return document

    def add_signing_key(self, kid: str) -> None:
        """A new ID-token signing key; Hydra signs with the newest key of the set from then on,
        and keeps the old one published for tokens it signed before."""
        status, body = self.call(
            "POST", f"/admin/keys/{ID_TOKEN_KEYS}", {"alg": "RS256", "use": "sig", "kid": kid}
        )
        assert status == 201, (status, body)

    def revoke_consent(self, subject: str) -> None:
        """What an administrator does to cut a user off: their consent sessions revoked, and
        with them every refresh token issued under them."""
        status, body = self.call(
            "DELETE", f"/admin/oauth2/auth/sessions/consent?subject={subject}&all=true"
        )
        assert status == 204, (status, body)


@dataclass
class IdentityProvider:
    """Hydra and the pages a person logs in on."""

    hydra: Hydra
    pages: LoginConsent

    @property
    def issuer(self) -> str:
        return self.hydra.issuer


if __name__ == "__main__":
    print(hydra_binary())  # tox builds it before the tests, outside their time limits
