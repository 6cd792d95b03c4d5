"""Getting an OIDC ID token for the CLI: the authorization-code flow with PKCE and a loopback
redirect (RFC 8252) when a browser can be opened, the device flow (RFC 8628) otherwise.

The ID token is what lessor exchanges for a session, so the AccessPolicy's `audience` must list
the CLI's client id (the ID token's `aud`). When the provider grants a refresh token (the
`offline_access` scope, on most providers), it is kept with the session (sessions.json, mode
0600) and renews it without the browser once it ends; a refresh token the provider refuses
(revoked, expired) is deleted, and the next command asks for `lessor login`.

The discovery document is checked as OpenID Connect Discovery 1.0 (4.3) requires: it must name
the configured issuer, and every endpoint it names must be https (or http on loopback), since
the browser, the device code and the tokens pass through them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import webbrowser
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from lessor.cli.config import OidcSettings, secure_url
from lessor.cli.errors import AUTH, SERVER, TIMEOUT, CliError

LOGIN_TIMEOUT_SECONDS = 300
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
ENDPOINTS = ("authorization_endpoint", "token_endpoint", "device_authorization_endpoint")


@dataclass(frozen=True)
class Tokens:
    id_token: str
    refresh_token: str | None = None


def _fetch(url: str, form: dict[str, str] | None, context: ssl.SSLContext) -> tuple[int, Any]:
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    request = urllib.request.Request(url, data=data)  # noqa: S310 - URLs from the issuer's discovery
    request.add_header("Accept", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:  # noqa: S310
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as error:
        try:
            return error.code, json.loads(error.read() or b"{}")
        except ValueError:
            return error.code, {}
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise CliError(f"the identity provider at {url} did not answer: {error}", SERVER) from None


class Provider:
    def __init__(self, settings: OidcSettings, context: ssl.SSLContext) -> None:
        self.settings = settings
        self.context = context
        status, self.discovery = _fetch(
            f"{settings.issuer}/.well-known/openid-configuration", None, context
        )
        if status != 200 or not isinstance(self.discovery, dict):
            raise CliError(f"{settings.issuer} publishes no OpenID configuration", SERVER)
        named = str(self.discovery.get("issuer", ""))
        if named.rstrip("/") != settings.issuer.rstrip("/"):
            raise CliError(
                f"the OpenID configuration at {settings.issuer} is of another issuer "
                f"({named[:200]!r}): check --oidc-issuer",
                AUTH,
            )
        for name in ENDPOINTS:
            url = self.discovery.get(name)
            if url is not None and not (isinstance(url, str) and secure_url(url)):
                raise CliError(f"{settings.issuer} names an insecure {name}: {url!r}", AUTH)
        if "token_endpoint" not in self.discovery:
            raise CliError(f"{settings.issuer} publishes no token endpoint", SERVER)

    @property
    def scope(self) -> str:
        return " ".join(self.settings.scopes)

    def tokens(self, answer: dict[str, Any]) -> Tokens:
        token = answer.get("id_token")
        if not isinstance(token, str):
            raise CliError(
                "the identity provider returned no ID token (is `openid` a scope?)", AUTH
            )
        refresh = answer.get("refresh_token")
        return Tokens(token, refresh if isinstance(refresh, str) else None)

    def refresh(self, refresh_token: str) -> Tokens:
        """New tokens for a refresh token; CliError (AUTH) when the provider refuses it."""
        status, answer = self.token({"grant_type": "refresh_token", "refresh_token": refresh_token})
        if status != 200:
            raise CliError(
                f"the identity provider refused to renew the login ({answer.get('error', status)})",
                AUTH,
            )
        tokens = self.tokens(answer)
        # A provider that does not rotate refresh tokens answers without one: keep ours.
        return tokens if tokens.refresh_token else Tokens(tokens.id_token, refresh_token)

    def token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        status, answer = _fetch(
            self.discovery["token_endpoint"],
            {**form, "client_id": self.settings.client_id},
            self.context,
        )
        return status, answer if isinstance(answer, dict) else {}

    # -- browser ---------------------------------------------------------------------------

    def browser_login(self, timeout: float = LOGIN_TIMEOUT_SECONDS) -> Tokens:
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        state = secrets.token_urlsafe(24)
        received: dict[str, str] = {}
        done = threading.Event()

        class Callback(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
                if query.get("state") != state:
                    self.send_error(400, "unexpected state")
                    return
                received.update(query)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.end_headers()
                self.wfile.write(b"lessor: login complete, you can close this window.\n")
                done.set()

            def log_message(self, *_args: Any) -> None:
                return

        server = HTTPServer(("127.0.0.1", 0), Callback)
        redirect = f"http://127.0.0.1:{server.server_port}/callback"
        query = urllib.parse.urlencode(
            {
                "response_type": "code",
                "client_id": self.settings.client_id,
                "redirect_uri": redirect,
                "scope": self.scope,
                "state": state,
                "code_challenge": challenge.decode().rstrip("="),
                "code_challenge_method": "S256",
            }
        )
        url = f"{self.discovery['authorization_endpoint']}?{query}"
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            print(f"opening a browser to log in; if none opens, visit:\n  {url}", file=sys.stderr)
            webbrowser.open(url)
            if not done.wait(timeout):
                raise CliError(
                    f"no answer from the browser login within {timeout:g}s; "
                    "run `lessor login` again, or `lessor login --device`",
                    TIMEOUT,
                )
        finally:
            server.shutdown()
            server.server_close()
        if "code" not in received:
            error = received.get("error_description") or received.get("error") or "no code"
            raise CliError(f"login refused by the identity provider: {error}", AUTH)
        status, answer = self.token(
            {
                "grant_type": "authorization_code",
                "code": received["code"],
                "redirect_uri": redirect,
                "code_verifier": verifier,
            }
        )
        if status != 200:
            raise CliError(f"the code exchange failed: {answer.get('error', status)}", AUTH)
        return self.tokens(answer)

    # -- device ----------------------------------------------------------------------------

    def device_login(self) -> Tokens:
        endpoint = self.discovery.get("device_authorization_endpoint")
        if not endpoint:
            raise CliError(
                f"{self.settings.issuer} offers no device flow; log in with a browser", AUTH
            )
        status, grant = _fetch(
            endpoint, {"client_id": self.settings.client_id, "scope": self.scope}, self.context
        )
        if status != 200 or "device_code" not in grant:
            raise CliError(f"the device authorization failed: {grant.get('error', status)}", AUTH)
        where = grant.get("verification_uri_complete") or grant["verification_uri"]
        print(f"to log in, visit {where} and enter the code {grant['user_code']}", file=sys.stderr)
        interval = float(grant.get("interval", 5))
        deadline = time.monotonic() + float(grant.get("expires_in", LOGIN_TIMEOUT_SECONDS))
        while time.monotonic() < deadline:
            time.sleep(interval)
            status, answer = self.token(
                {"grant_type": DEVICE_GRANT, "device_code": grant["device_code"]}
            )
            if status == 200:
                return self.tokens(answer)
            error = answer.get("error")
            if error == "slow_down":
                interval += 5
            elif error == "expired_token":
                break
            elif error == "access_denied":
                raise CliError("the login was refused at the identity provider", AUTH)
            elif error != "authorization_pending":
                raise CliError(f"device login failed: {error or status}", AUTH)
        raise CliError(
            "the device code expired before the login was approved: run `lessor login` again",
            TIMEOUT,
        )


def browser_available() -> bool:
    try:
        webbrowser.get()
    except webbrowser.Error:
        return False
    return True


def login(
    settings: OidcSettings,
    context: ssl.SSLContext,
    device: bool,
    timeout: float = LOGIN_TIMEOUT_SECONDS,
) -> Tokens:
    provider = Provider(settings, context)
    if device or not browser_available() or "authorization_endpoint" not in provider.discovery:
        return provider.device_login()
    return provider.browser_login(timeout)
