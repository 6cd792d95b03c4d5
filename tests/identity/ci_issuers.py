"""Stand-ins for the CI systems' OIDC issuers, laid out as the real ones are, under their real
names, and the runner endpoint a GitHub Actions job asks for its token.

- GitHub Actions: issuer https://token.actions.githubusercontent.com, keys at
  `/.well-known/jwks` (named by its discovery document; nothing at the derived default), claims
  `repository`, `repository_owner`, `ref`, `sub: repo:ORG/REPO:ref:REF`, audience chosen by
  the job when it asks the runner.
- GitLab: issuer https://gitlab.com, keys at `/oauth/discovery/keys`, claims `project_path`,
  `namespace_path`, `ref`, `sub: project_path:GROUP/PROJECT:ref_type:branch:ref:REF`, audience
  fixed by the pipeline's `id_tokens:`.

They serve https with certificates for those names from a CA of the test's, so the shipped
example policies are used unchanged: the API server reaches them through a forward proxy
(HTTPS_PROXY) that sends those names here and nothing anywhere else, and trusts the CA
(SSL_CERT_FILE). A mock only in where the bytes come from: what lessor fetches and verifies is
what the real issuers serve.
"""

from __future__ import annotations

import json
import secrets
import socket
import ssl
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from lessor.controlplane.pki import CertificateAuthority
from tests.integration.tcp_relay import _pump, serve

GITHUB = "https://token.actions.githubusercontent.com"
GITLAB = "https://gitlab.com"


@dataclass
class CiIssuer:
    issuer: str
    jwks_path: str
    discovery_issuer: str = ""  # what its discovery document names; the issuer by default
    key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    kid: str = field(default_factory=lambda: secrets.token_hex(8))
    paths: list[str] = field(default_factory=list)
    port: int = 0

    @property
    def host(self) -> str:
        return urllib.parse.urlsplit(self.issuer).hostname or ""

    def token(self, audience: str, **claims: Any) -> str:
        now = int(time.time())
        payload = {"iss": self.issuer, "aud": audience, "iat": now, "nbf": now, "exp": now + 300}
        return jwt.encode(
            {**payload, **claims}, self.key, algorithm="RS256", headers={"kid": self.kid}
        )

    def document(self, path: str) -> dict[str, Any] | None:
        if path == "/.well-known/openid-configuration":
            return {
                "issuer": self.discovery_issuer or self.issuer,
                "jwks_uri": f"{self.issuer}{self.jwks_path}",
                "response_types_supported": ["id_token"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
            }
        if path == self.jwks_path:
            public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
            return {"keys": [{**public, "kid": self.kid, "alg": "RS256", "use": "sig"}]}
        return None

    def serve(self, authority: CertificateAuthority) -> ThreadingHTTPServer:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer.paths.append(self.path)
                document = issuer.document(self.path)
                body = json.dumps(document or {"message": "Not Found"}).encode()
                self.send_response(200 if document is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                return

        pair = authority.issue(self.host, server_names=(self.host,))
        with tempfile.TemporaryDirectory() as scratch:
            cert, key = Path(scratch) / "tls.crt", Path(scratch) / "tls.key"
            cert.write_bytes(pair.cert_pem)
            key.write_bytes(pair.key_pem)
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(cert, key)
        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


def github(repository: str, ref: str = "refs/heads/main") -> dict[str, Any]:
    """The claims GitHub Actions puts in a job's token (those policies match on)."""
    owner = repository.split("/", maxsplit=1)[0]
    return {
        "sub": f"repo:{repository}:ref:{ref}",
        "repository": repository,
        "repository_owner": owner,
        "ref": ref,
        "workflow": "ci",
        "event_name": "push",
        "runner_environment": "github-hosted",
    }


def gitlab(project_path: str, ref: str = "main") -> dict[str, Any]:
    namespace = project_path.rsplit("/", 1)[0]
    return {
        "sub": f"project_path:{project_path}:ref_type:branch:ref:{ref}",
        "project_path": project_path,
        "namespace_path": namespace,
        "ref": ref,
        "ref_type": "branch",
        "pipeline_source": "push",
    }


class NameRoutingProxy:
    """A forward proxy that tunnels CONNECTs to the names it is given, to their stand-ins,
    and refuses every other destination (a test never reaches the internet)."""

    def __init__(self, routes: dict[str, int]) -> None:
        self.routes = routes  # host -> local port
        self.seen: list[str] = []
        self._listener = serve(self._handle)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def close(self) -> None:
        self._listener.close()

    def _handle(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 8192:
            chunk = client.recv(1)
            if not chunk:
                break
            head += chunk
        method, target = ([*head.split(b"\r\n", 1)[0].decode(errors="replace").split(" "), ""])[:2]
        self.seen.append(f"{method} {target}")
        host, _, port = target.rpartition(":")
        if method != "CONNECT" or port != "443" or host not in self.routes:
            client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            client.close()
            return
        upstream = socket.create_connection(("127.0.0.1", self.routes[host]), timeout=60)
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


@dataclass
class GithubRunner:
    """The endpoint a GitHub Actions runner gives its job (ACTIONS_ID_TOKEN_REQUEST_URL): GET
    with the job's request token as a bearer, `audience` in the query, answered with
    `{"count": N, "value": JWT}`."""

    issuer: CiIssuer
    repository: str
    request_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    audiences: list[str] = field(default_factory=list)
    url: str = ""

    def serve(self) -> ThreadingHTTPServer:
        runner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.headers.get("Authorization") != f"Bearer {runner.request_token}":
                    self.send_error(401)
                    return
                query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
                audience = query.get("audience", "https://github.com/example-org")
                runner.audiences.append(audience)
                token = runner.issuer.token(audience, **github(runner.repository))
                body = json.dumps({"count": len(token), "value": token}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                return

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        port = server.server_address[1]
        # The runner's URL carries a query of its own, as the real one does.
        self.url = f"http://127.0.0.1:{port}/_apis/pipelines/workflows/1/idtoken?api-version=2.0"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server
