"""A small OpenID provider for the CLI's login flows, speaking the real protocols over HTTP:
discovery, JWKS, the authorization-code flow with PKCE (S256 enforced) and the device flow, and
issuing ID tokens signed with a real RSA key. It approves every browser login at once (there is
no person to click) and a device login when its verification URL is visited."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

CLIENT_ID = "lessor-cli"


@dataclass
class Provider:
    subject: str = "dana"
    url: str = ""
    key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    codes: dict[str, dict[str, str]] = field(default_factory=dict)
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)
    exchanged: list[str] = field(default_factory=list)
    device_lifetime: int = 120  # seconds a device code stays valid

    def id_token(self) -> str:
        now = int(time.time())
        claims = {"iss": self.url, "aud": CLIENT_ID, "sub": self.subject, "iat": now}
        return jwt.encode(
            {**claims, "exp": now + 300}, self.key, algorithm="RS256", headers={"kid": "k1"}
        )

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.url,
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "device_authorization_endpoint": f"{self.url}/device",
            "jwks_uri": f"{self.url}/jwks",
        }

    def jwks(self) -> dict[str, Any]:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**public, "kid": "k1", "alg": "RS256", "use": "sig"}]}

    def authorize(self, query: dict[str, str]) -> str:
        """Where the browser is sent next: back to the loopback redirect with a code."""
        redirect = query["redirect_uri"]
        assert urllib.parse.urlsplit(redirect).hostname == "127.0.0.1"
        assert query["client_id"] == CLIENT_ID and query["code_challenge_method"] == "S256"
        code = secrets.token_urlsafe(16)
        self.codes[code] = {"challenge": query["code_challenge"], "redirect": redirect}
        state = urllib.parse.quote(query["state"])
        return f"{redirect}?code={code}&state={state}"

    def token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if form.get("client_id") != CLIENT_ID:
            return 401, {"error": "invalid_client"}
        if form.get("grant_type") == "authorization_code":
            grant = self.codes.pop(form.get("code", ""), None)
            verifier = form.get("code_verifier", "").encode()
            challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest())
            if grant is None or grant["challenge"] != challenge.decode().rstrip("="):
                return 400, {"error": "invalid_grant"}
            if grant["redirect"] != form.get("redirect_uri"):
                return 400, {"error": "invalid_grant"}
            self.exchanged.append("authorization_code")
            return 200, {"id_token": self.id_token(), "token_type": "Bearer"}
        if form.get("grant_type") == "urn:ietf:params:oauth:grant-type:device_code":
            device = self.devices.get(form.get("device_code", ""))
            if device is None:
                return 400, {"error": "invalid_grant"}
            if time.time() > device["expires"]:
                return 400, {"error": "expired_token"}
            if not device["approved"]:
                return 400, {"error": "authorization_pending"}
            self.exchanged.append("device_code")
            return 200, {"id_token": self.id_token(), "token_type": "Bearer"}
        return 400, {"error": "unsupported_grant_type"}

    def device(self) -> dict[str, Any]:
        code, user_code = secrets.token_urlsafe(16), secrets.token_hex(4).upper()
        expires = time.time() + self.device_lifetime
        self.devices[code] = {"approved": False, "user_code": user_code, "expires": expires}
        return {
            "device_code": code,
            "user_code": user_code,
            "verification_uri": f"{self.url}/activate",
            "verification_uri_complete": f"{self.url}/activate?user_code={user_code}",
            "interval": 1,
            "expires_in": self.device_lifetime,
        }

    def activate(self, user_code: str) -> bool:
        for device in self.devices.values():
            if device["user_code"] == user_code:
                device["approved"] = True
                return True
        return False

    def serve(self) -> ThreadingHTTPServer:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def _json(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(parts.query))
                if parts.path == "/.well-known/openid-configuration":
                    self._json(200, provider.discovery())
                elif parts.path == "/jwks":
                    self._json(200, provider.jwks())
                elif parts.path == "/authorize":
                    self.send_response(302)
                    self.send_header("Location", provider.authorize(query))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif parts.path == "/activate":
                    ok = provider.activate(query.get("user_code", ""))
                    self._json(200 if ok else 404, {"approved": ok})
                else:
                    self._json(404, {"error": "not_found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                if self.path == "/token":
                    self._json(*provider.token(form))
                elif self.path == "/device":
                    self._json(200, provider.device())
                else:
                    self._json(404, {"error": "not_found"})

            def log_message(self, *_: Any) -> None:
                return

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server
