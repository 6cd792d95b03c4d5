"""HTTP to the lessor API with the right credential, errors turned into one-line messages.

The credential for a request is, in order: the session from `lessor login` (while it lasts), then
the target's own credential: a static token (`LESSOR_TOKEN` or the config) sent as a Bearer token,
or a signature by the ssh-agent's key over each request. An OIDC target has no credential of its
own besides the session, so it needs `lessor login` first. When a session is refused (revoked,
or the server's session key changed), it is dropped and the target's credential is used instead.
A session that can renew itself (an OIDC refresh token, a CI job's token) is renewed instead,
once it ends or is refused, without a browser.
"""

from __future__ import annotations

import datetime
import email.utils
import http.client
import json
import os
import platform
import re
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel

from lessor import __version__
from lessor.cli import answers, debug, proxy_tunnel, sessions
from lessor.cli.config import CiSettings, Target
from lessor.cli.errors import (
    AUTH,
    SERVER,
    USAGE,
    AnswerLostError,
    ApiError,
    CliError,
    UnreachableError,
)
from lessor.cli.limits import (
    REQUEST_TIMEOUT_ENV,
    RETRY_BUDGET_ENV,
    RETRY_BUDGET_SECONDS,
    TIMEOUT_SECONDS,
)
from lessor.cli.ssh_agent import AgentError, SshAgent, fingerprint
from lessor.cli.trace_context import TraceContext
from lessor.protocol.durations import parse_duration
from lessor.protocol.lease_ids import LEASE_ID
from lessor.protocol.responses import SessionIssued
from lessor.protocol.ssh_signature import audience_of

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
N = TypeVar("N", bound=BaseModel)
USER_AGENT = f"lessor/{__version__} (Python {platform.python_version()}; {sys.platform})"
_TITLE = re.compile(rb"<title[^>]*>([^<]{1,200})</title>", re.IGNORECASE)


def _not_ours(url: str, status: int, content_type: str, raw: bytes) -> str:
    """What an answer that is not lessor's JSON says, in one line: a proxy's or a load
    balancer's HTML error page is named by its title, never printed."""
    title = _TITLE.search(raw)
    said = f": {' '.join(title.group(1).decode(errors='replace').split())}" if title else ""
    kind = content_type.split(";", maxsplit=1)[0] or "no content type"
    return f"{url} answered HTTP {status} with {kind}, not lessor's JSON{said}"


class Credential(Protocol):
    def header(self, method: str, target: str, body: bytes) -> str | None: ...


@dataclass(frozen=True)
class Anonymous:
    def header(self, method: str, target: str, body: bytes) -> str | None:
        return None


@dataclass(frozen=True)
class Bearer:
    token: str = field(repr=False)

    def header(self, method: str, target: str, body: bytes) -> str | None:
        return f"Bearer {self.token}"


@dataclass(frozen=True)
class SshSignature:
    """A signature by the agent's key over each request, naming the endpoint it is sent to:
    a signature is never offered that another deployment could accept."""

    agent: SshAgent
    key: bytes
    audience: str

    def header(self, method: str, target: str, body: bytes) -> str | None:
        try:
            return self.agent.authorization(self.key, self.audience, method, target, body)
        except AgentError as error:
            raise CliError(str(error), AUTH) from None


@dataclass
class Response:
    status: int
    body: Any
    headers: dict[str, str]


def agent_keys(target: Target) -> tuple[SshAgent, list[bytes]]:
    """The agent and its Ed25519 keys, the configured one alone when `ssh_key` names one."""
    try:
        agent = SshAgent()
        keys = agent.ed25519_keys()
    except AgentError as error:
        raise CliError(str(error), AUTH) from None
    if target.ssh_key:
        keys = [(blob, c) for blob, c in keys if target.ssh_key in (fingerprint(blob), c)]
        if not keys:
            raise CliError(f"the ssh-agent holds no Ed25519 key {target.ssh_key}", AUTH)
    if not keys:
        raise CliError("the ssh-agent holds no Ed25519 key: ssh-add one", AUTH)
    return agent, [blob for blob, _ in keys]


def own_credential(target: Target) -> Credential | None:
    """The target's credential without a session; None for OIDC (which needs a login)."""
    if target.auth == "token":
        token = os.environ.get("LESSOR_TOKEN") or target.token
        if not token:
            raise CliError(
                "no token: set LESSOR_TOKEN or `lessor config set NAME --auth token --token-stdin`",
                AUTH,
            )
        return Bearer(token)
    if target.auth == "ssh":
        agent, keys = agent_keys(target)
        return SshSignature(agent, keys[0], audience_of(target.endpoint))
    if target.auth == "none":
        return Anonymous()
    return None


def server_id(value: str, what: str = "lease") -> str:
    """The id a server answered with, checked before it names a file (`~/.kube/lessor-<id>`) or
    a path: a DNS label, as every id lessor makes is (lessor.protocol.lease_ids). A server that
    sends anything else, malicious or intercepted, is refused instead of trusted."""
    if LEASE_ID.match(value) is None:
        raise CliError(f"the server answered with a malformed {what} id", SERVER)
    return value


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """The TLS context for a target's endpoint (and its OIDC issuer): the system's CAs, or the
    target's `caFile`; a file that is gone or holds no PEM certificate is one line."""
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as error:
        reason = getattr(error, "strerror", None) or getattr(error, "reason", None) or error
        raise CliError(
            f"the CA file {ca_file} cannot be used ({reason}): "
            "set a PEM bundle with `lessor config set ... --ca-file`",
            USAGE,
        ) from None


class _TunnelledHTTPSConnection(http.client.HTTPSConnection):
    """An https connection made by lessor.cli.proxy_tunnel: direct, or a CONNECT tunnel through
    the environment's proxy that is TLS to an `https://` proxy (urllib's is plaintext there,
    Basic credentials included: review N13), with this connection's TLS inside it."""

    def connect(self) -> None:
        sock = proxy_tunnel.connect("https", self.host, self.port or 443, self.timeout or 30.0)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


class _TunnellingHTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_TunnelledHTTPSConnection, req, context=self._context)  # type: ignore[attr-defined]


def _opener(context: ssl.SSLContext) -> urllib.request.OpenerDirector:
    """https through proxy_tunnel, which applies HTTPS_PROXY and NO_PROXY itself (so urllib's
    proxy handler keeps only plain http's); redirects that keep the credential at home."""
    plain = {k: v for k, v in urllib.request.getproxies().items() if k == "http"}
    return urllib.request.build_opener(
        urllib.request.ProxyHandler(plain),
        _TunnellingHTTPSHandler(context=context),
        _CredentialsStayAtHome(),
    )


class _CredentialsStayAtHome(urllib.request.HTTPRedirectHandler):
    """Redirects are followed, but the credential goes only where it was meant for: never to
    another origin (scheme, host, port) and never from https to http. A bearer token, a session
    token or a request signature must not reach a host the user never named (review N12)."""

    def redirect_request(  # noqa: PLR0917 - urllib's signature
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        follow = super().redirect_request(req, fp, code, msg, headers, newurl)
        if follow is not None and _origin(newurl) != _origin(req.full_url):
            follow.remove_header("Authorization")
        return follow


def retry_after(headers: dict[str, str]) -> float | None:
    """Seconds a `Retry-After` asks for (delta-seconds or an HTTP date), None when absent."""
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(int(value))
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def _seconds_from_env(name: str, default: float) -> float:
    """A duration (`90s`, `2m`) or a number of seconds from the environment."""
    value = os.environ.get(name)
    if not value:
        return default
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return parse_duration(value).total_seconds()
    except ValueError as error:
        raise CliError(f"{name}: {error}", USAGE) from None


def _say(line: str) -> None:
    print(f"lessor: {line}", file=sys.stderr, flush=True)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


class Client:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.endpoint = target.endpoint
        self._context = tls_context(target.ca_file)
        self._opener = _opener(self._context)
        self._session = sessions.load(self.endpoint)
        self.debug = debug.enabled()
        self.trace = TraceContext()
        self.request_timeout = _seconds_from_env(REQUEST_TIMEOUT_ENV, TIMEOUT_SECONDS)
        self.retry_budget = _seconds_from_env(RETRY_BUDGET_ENV, RETRY_BUDGET_SECONDS)
        self._waited = 0.0  # of the retry budget, by all this command's requests

    @property
    def session(self) -> sessions.Session | None:
        return self._session if self._session and self._session.usable else None

    def credential(self) -> Credential:
        if self.session is None and self._renewable():
            self._renew()
        if self.session is not None:
            return Bearer(self.session.token)
        credential = own_credential(self.target)
        if credential is None:
            raise CliError(f"not logged in to {self.endpoint}: run `lessor login`", AUTH)
        return credential

    def send(
        self, method: str, path: str, body: Any = None, credential: Credential | None = None
    ) -> Response:
        """One request, retried while that is safe and within the retry budget: a 429 or 503
        that says when to come back (`Retry-After`: a rate limit, load shedding, an identity
        provider away) was refused before anything was done, so any request is sent again
        then, a create too; a request that got no answer is sent again only when it is a read
        (a create that may have been received is recovered from its Location, never resent).
        The concurrency 429 names no time: it is final, as the spec says. The budget is the
        command's: what all its requests have waited counts (a poll's GETs share it)."""
        data = json.dumps(body).encode() if body is not None else b""
        tries = 0
        while True:
            tries += 1
            try:
                # Signed again each time: an SSH signature's nonce is good for one request.
                response = self._exchange(method, path, data, credential)
            except UnreachableError as error:
                pause = float(tries)
                retry = error.transient and method == "GET" and tries <= 3
                if not retry or not self._may_wait(pause):
                    raise
                _say(f"{error}; trying again in {pause:g}s")
                time.sleep(pause)
                continue
            wait = retry_after(response.headers) if response.status in (429, 503) else None
            if wait is None or not self._may_wait(wait):
                return response
            why = (response.body or {}).get("detail") if isinstance(response.body, dict) else None
            _say(f"the server answered {response.status} ({why or 'busy'}); retrying in {wait:g}s")
            time.sleep(wait)

    def _may_wait(self, seconds: float) -> bool:
        """Whether the command may wait this much more; counted as spent when it may."""
        if self._waited + seconds > self.retry_budget:
            return False
        self._waited += seconds
        return True

    def _exchange(
        self, method: str, path: str, data: bytes, credential: Credential | None
    ) -> Response:
        url = self.endpoint + path
        signed_target = self.signed_target(path)
        request = urllib.request.Request(url, data=data or None, method=method)  # noqa: S310
        request.add_header("Accept", "application/json")
        request.add_header("User-Agent", USER_AGENT)
        request.add_header("traceparent", self.trace.traceparent)
        if data:
            request.add_header("Content-Type", "application/json")
        signer = credential or Anonymous()
        header = signer.header(method, signed_target, data)
        if header:
            request.add_header("Authorization", header)
        if self.debug:  # the credential's kind, never its value
            debug.trace(f"> {method} {url} ({len(data)} bytes, {type(signer).__name__})")
        started = time.monotonic()
        try:
            with self._opener.open(request, timeout=self.request_timeout) as answer:
                status, headers = answer.status, dict(answer.headers)
                content_type = answer.headers.get("Content-Type", "")
                raw = self._body(answer, status)
        except urllib.error.HTTPError as error:
            status, headers = error.code, dict(error.headers)
            content_type = error.headers.get("Content-Type", "")
            raw = self._body(error, status)
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
            # Nothing of an answer arrived: the request may or may not have been received.
            reason = getattr(error, "reason", error) or type(error).__name__
            if self.debug:
                debug.trace(f"< no answer after {time.monotonic() - started:.3f}s: {reason}")
            transient = isinstance(
                reason, ConnectionResetError | ConnectionAbortedError | TimeoutError
            )
            raise UnreachableError(
                f"cannot reach {self.endpoint}: {reason}", SERVER, transient=transient
            ) from None
        if self.debug:
            request_id = next((v for k, v in headers.items() if k.lower() == "x-request-id"), "-")
            took = time.monotonic() - started
            trace_id = self.trace.trace_id
            debug.trace(f"< {status} in {took:.3f}s, request id {request_id}, trace {trace_id}")
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        if raw and (parsed is None or "json" not in content_type):
            # Never an API error: an HTML 404 from a wrong URL is not "no such lease".
            detail = _not_ours(url, status, content_type, raw)
            raise CliError(f"{detail}: is the endpoint right?", SERVER)
        return Response(status, parsed, headers)

    def _body(self, answer: Any, status: int) -> bytes:
        try:
            raw: bytes = answer.read()
        except (OSError, http.client.HTTPException):
            # answer.headers compares names case-insensitively (servers may send `location`).
            location = answer.headers.get("Location")
            raise AnswerLostError(self.endpoint, status, location) from None
        return raw

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """An authenticated call; the parsed body, or ApiError for any 4xx/5xx. Commands read
        an answer through its model (`get_model`, `call_model`); this is for answers nobody
        reads (a release's 204)."""

        def attempt(credential: Credential) -> Any:
            response = self.send(method, path, body, credential)
            if response.status >= 400:
                raise ApiError(response.status, response.body)
            return response.body

        return self.authenticated(attempt)

    def get_model(self, path: str, model: type[M]) -> M:
        """GET `path`, its answer read as `model` (lessor.cli.answers)."""
        return self.call_model("GET", path, model)

    def get_models(self, path: str, model: type[M]) -> list[M]:
        """GET a listing, its answer read as a list of `model`."""
        return answers.read_list(model, self.call("GET", path), "GET", path)

    def call_model(self, method: str, path: str, model: type[M], body: Any = None) -> M:
        """An authenticated call whose answer is read as `model`: ApiError for a refusal,
        MalformedAnswerError for an answer that does not fit."""
        return answers.read(model, self.call(method, path, body), method, path)

    def create(
        self,
        path: str,
        body: dict[str, Any],
        created: type[M],
        recovered: type[N],
        *,
        keyed: bool = True,
    ) -> M | N:
        """A POST that creates one object, recovered as spec 4.3 says when its answer is lost:
        the POST's answer as `created`, or the object read back as `recovered` (a GET's model).

        If the answer's status and headers arrived and its body did not, the request was
        received: the object is read from the Location the answer named, and the POST is never
        repeated (rule 3). If the connection failed before any answer, a POST with an
        idempotency key (`keyed`) is sent once more, since the key makes the server create one
        object (rule 4); one without a key is not, since it could create a second.
        """
        try:
            return self._create_or_recover(path, body, created, recovered)
        except UnreachableError as error:
            if not keyed:
                raise UnreachableError(
                    f"{error}; it may have been created all the same: `lessor status` lists "
                    "what exists",
                    SERVER,
                ) from None
        return self._create_or_recover(path, body, created, recovered)

    def _create_or_recover(
        self, path: str, body: dict[str, Any], created: type[M], recovered: type[N]
    ) -> M | N:
        try:
            return self.call_model("POST", path, created, body)
        except answers.MalformedAnswerError as error:
            # A success all the same: what it created exists, and is not to be created again.
            raise answers.MalformedAnswerError(
                f"{error}. It was created all the same: `lessor status` lists what exists"
            ) from None
        except AnswerLostError as lost:
            location = urlsplit(lost.location or "").path
            if lost.status >= 400 or not location.startswith("/v1/"):
                raise
            return self.get_model(location, recovered)

    def authenticated(self, attempt: Callable[[Credential], T]) -> T:
        """`attempt` with the current credential; when the session is refused (401) because it
        was revoked or the server's key rotated, again with the target's own credential, and the
        dead session is not sent again."""
        try:
            return attempt(self.credential())
        except ApiError as error:
            if error.status != 401 or self.session is None:
                raise
        if self._renewable():
            self._renew()
            return attempt(self.credential())
        sessions.forget(self.endpoint)
        self._session = None
        fallback = own_credential(self.target)
        if fallback is None:
            raise CliError(f"the session for {self.endpoint} ended: run `lessor login`", AUTH)
        return attempt(fallback)

    def open_session(
        self,
        credentials: list[Credential],
        ttl: str | None = None,
        *,
        refresh_token: str | None = None,
        renew: str = "",
    ) -> sessions.Session:
        """POST /v1/login with the first of `credentials` the server accepts; the session is
        stored for this endpoint with what renews it."""
        refusal: ApiError | None = None
        for credential in credentials:
            answer = self.send("POST", "/v1/login", {"ttl": ttl} if ttl else None, credential)
            if answer.status == 200:
                break
            refusal = ApiError(answer.status, answer.body)
            if answer.status != 401:
                raise refusal
        else:
            raise refusal or CliError("no credential to log in with", AUTH)
        granted = answers.read(SessionIssued, answer.body, "POST", "/v1/login")
        expires = datetime.datetime.fromisoformat(granted.expires_at.replace("Z", "+00:00"))
        session = sessions.Session(
            token=granted.session_token,
            identity=granted.identity,
            method=granted.method,
            expires_at=granted.expires_at,
            expires=expires.timestamp(),
            refresh_token=refresh_token,
            renew=renew,
        )
        sessions.store(self.endpoint, session)
        self._session = session
        return session

    def _renewable(self) -> bool:
        old = self._session
        return old is not None and bool(old.refresh_token or old.renew == "ci")

    def _renew(self) -> None:
        """A new session from what the ended one kept: an ID token for its refresh token, or
        the CI job's token again. One line and `lessor login` when that is refused."""
        old = self._session
        assert old is not None
        self._session = None  # renewed once per run at most
        try:
            if old.renew == "ci":
                from lessor.cli import ci_tokens  # noqa: PLC0415 - only CI jobs need it

                token = ci_tokens.job_token(self.target.ci or CiSettings())
                self.open_session([Bearer(token)], renew="ci")
            else:
                from lessor.cli import oidc  # noqa: PLC0415 - a login's imports

                if self.target.oidc is None or old.refresh_token is None:
                    raise CliError("the target has no OIDC issuer", AUTH)
                tokens = oidc.Provider(self.target.oidc, self._context).refresh(old.refresh_token)
                self.open_session([Bearer(tokens.id_token)], refresh_token=tokens.refresh_token)
        except CliError as error:
            sessions.forget(self.endpoint)
            raise CliError(
                f"the login to {self.endpoint} ended and could not be renewed ({error}): "
                "run `lessor login`",
                AUTH,
            ) from None

    def signed_target(self, path: str) -> str:
        """The request target a signature covers: the endpoint's path prefix, the path, the
        query."""
        parts = urlsplit(self.endpoint + path)
        return parts.path + (f"?{parts.query}" if parts.query else "")

    @property
    def tls(self) -> ssl.SSLContext:
        return self._context
