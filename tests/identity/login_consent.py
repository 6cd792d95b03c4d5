"""The login-and-consent app a Hydra deployer writes (Hydra has none by design): one static
user, a login form and a consent form, each accepted or rejected through Hydra's admin API.

Runnable on its own (`python -m tests.identity.login_consent --hydra-admin URL --port N`) so
the kind e2e runs the same app in a pod; the integration tests start it in a thread. It uses
the standard library only, so it runs from lessor's own image.
"""

from __future__ import annotations

import argparse
import html
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class User:
    username: str = "dana"
    password: str = "correct horse battery staple"
    email: str = "dana@example.com"
    groups: tuple[str, ...] = ("developers",)


@dataclass
class LoginConsent:
    hydra_admin: str
    user: User = field(default_factory=User)
    logins: int = 0

    def admin(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.hydra_admin}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=30) as answer:
            document: dict[str, Any] = json.loads(answer.read() or b"{}")
            return document

    def login_page(self, challenge: str, error: str = "") -> str:
        return _page(
            "Log in",
            f"<p class=error>{html.escape(error)}</p>" if error else "",
            challenge,
            "login_challenge",
            '<label>Username <input name="username"></label>'
            '<label>Password <input name="password" type="password"></label>',
        )

    def login(self, form: dict[str, str]) -> tuple[str | None, str]:
        """(where the browser goes next, or None to show the form again; the error)."""
        challenge = form.get("login_challenge", "")
        query = urllib.parse.urlencode({"login_challenge": challenge})
        if form.get("action") != "accept":
            rejected = {"error": "access_denied", "error_description": "the user refused"}
            answer = self.admin(
                "PUT", f"/admin/oauth2/auth/requests/login/reject?{query}", rejected
            )
            return answer["redirect_to"], ""
        if (form.get("username"), form.get("password")) != (self.user.username, self.user.password):
            return None, "unknown user or wrong password"
        self.logins += 1
        accepted = {"subject": self.user.username, "remember": False}
        answer = self.admin("PUT", f"/admin/oauth2/auth/requests/login/accept?{query}", accepted)
        return answer["redirect_to"], ""

    def consent_page(self, challenge: str) -> str:
        query = urllib.parse.urlencode({"consent_challenge": challenge})
        request = self.admin("GET", f"/admin/oauth2/auth/requests/consent?{query}")
        client = html.escape(str(request.get("client", {}).get("client_id", "")))
        scopes = html.escape(" ".join(request.get("requested_scope") or []))
        return _page(
            "Allow access", f"<p>{client} asks for: {scopes}</p>", challenge, "consent_challenge"
        )

    def consent(self, form: dict[str, str]) -> str:
        challenge = form.get("consent_challenge", "")
        query = urllib.parse.urlencode({"consent_challenge": challenge})
        path = "/admin/oauth2/auth/requests/consent"
        if form.get("action") != "accept":
            rejected = {"error": "access_denied", "error_description": "the user refused"}
            return str(self.admin("PUT", f"{path}/reject?{query}", rejected)["redirect_to"])
        request = self.admin("GET", f"{path}?{query}")
        accepted = {
            "grant_scope": request.get("requested_scope") or [],
            "grant_access_token_audience": request.get("requested_access_token_audience") or [],
            "remember": False,
            "session": {
                "id_token": {
                    "email": self.user.email,
                    "email_verified": True,
                    "groups": list(self.user.groups),
                }
            },
        }
        return str(self.admin("PUT", f"{path}/accept?{query}", accepted)["redirect_to"])

    def serve(self, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
        app = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: str = "", location: str = "") -> None:
                data = body.encode()
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(parts.query))
                try:
                    if parts.path == "/login":
                        self._send(200, app.login_page(query.get("login_challenge", "")))
                    elif parts.path == "/consent":
                        self._send(200, app.consent_page(query.get("consent_challenge", "")))
                    elif parts.path == "/healthz":
                        self._send(200, "ok")
                    else:
                        self._send(404, _escaped(query.get("error_description", "not found")))
                except urllib.error.HTTPError as error:
                    self._send(400, f"Hydra refused: HTTP {error.code}")

            def do_POST(self) -> None:
                length = min(int(self.headers.get("Content-Length") or 0), 65536)
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                path = urllib.parse.urlsplit(self.path).path
                try:
                    if path == "/login":
                        where, error = app.login(form)
                        if where is None:
                            page = app.login_page(form.get("login_challenge", ""), error)
                            self._send(200, page)
                        else:
                            self._send(302, location=where)
                    elif path == "/consent":
                        self._send(302, location=app.consent(form))
                    else:
                        self._send(404, "not found")
                except urllib.error.HTTPError as error:
                    self._send(400, f"Hydra refused: HTTP {error.code}")

            def log_message(self, *_: Any) -> None:
                return

        server = ThreadingHTTPServer((host, port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


def _escaped(text: str) -> str:
    return f"<p>{html.escape(text)}</p>"


def _page(title: str, before: str, challenge: str, challenge_field: str, fields: str = "") -> str:
    return (
        f"<!doctype html><title>{title}</title><h1>{title}</h1>{before}"
        f'<form method="post"><input type="hidden" name="{challenge_field}" '
        f'value="{html.escape(challenge)}">{fields}'
        '<button name="action" value="accept">Accept</button>'
        '<button name="action" value="deny">Deny</button></form>'
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hydra-admin", required=True)
    parser.add_argument("--port", type=int, default=3000)
    args = parser.parse_args()
    LoginConsent(args.hydra_admin).serve("0.0.0.0", args.port)
    threading.Event().wait()  # the server answers in its thread until the pod stops


if __name__ == "__main__":
    main()
