"""`lessor login` exchanges the target's credential for a session token (kept per endpoint,
mode 0600, reused by every later command); `lessor logout` revokes it and deletes it, and the
target's stored static token with it."""

from __future__ import annotations

import argparse

from lessor.cli import ci_tokens, config, context, oidc, output, sessions
from lessor.cli.client import Bearer, Client, Credential, SshSignature, agent_keys, own_credential
from lessor.cli.errors import USAGE, ApiError, CliError
from lessor.protocol.durations import parse_duration
from lessor.protocol.ssh_signature import audience_of

Renewal = dict[str, str]  # Client.open_session's keywords: what renews the session


def _login_tokens(client: Client, args: argparse.Namespace) -> tuple[list[Credential], Renewal]:
    """What to try, in order, and what renews the session (a refresh token, a CI job). Every
    key in the agent may be tried: the server says which one it knows only by accepting it."""
    target = client.target
    if args.ci:
        return [Bearer(ci_tokens.job_token(target.ci or config.CiSettings()))], {"renew": "ci"}
    if target.auth == "ssh":
        agent, keys = agent_keys(target)
        return [SshSignature(agent, key, audience_of(target.endpoint)) for key in keys], {}
    if target.auth == "oidc":
        if target.oidc is None:
            raise CliError("this oidc target has no issuer: `lessor config set` it again", USAGE)
        tokens = oidc.login(target.oidc, client.tls, args.device, parse_seconds(args.timeout))
        renewal = {"refresh_token": tokens.refresh_token} if tokens.refresh_token else {}
        return [Bearer(tokens.id_token)], renewal
    credential = own_credential(target)
    if credential is None or target.auth == "none":
        raise CliError("this target has no auth mode: set one with `lessor config set`", USAGE)
    return [credential], {}


def parse_seconds(text: str | None) -> float:
    if not text:
        return oidc.LOGIN_TIMEOUT_SECONDS
    try:
        return parse_duration(text).total_seconds()
    except ValueError as error:
        raise CliError(f"--timeout: {error}", USAGE) from None


def login(args: argparse.Namespace) -> int:
    client = Client(context.target(args)[1])
    credentials, renewal = _login_tokens(client, args)
    session = client.open_session(credentials, args.ttl, **renewal)
    if output.wants_json(args):
        output.emit(
            args,
            {
                "endpoint": client.endpoint,
                "identity": session.identity,
                "method": session.method,
                "expires_at": session.expires_at,
                "renews": bool(renewal),
            },
        )
    else:
        renews = "; it renews itself without a login" if renewal else ""
        print(
            f"logged in to {client.endpoint} as {session.identity} ({session.method}); "
            f"the session expires {output.until(session.expires_at)}{renews}"
        )
    return 0


def _forget_stored_token(name: str | None, endpoint: str) -> bool:
    """Spec 4.7: logout removes the stored credentials with the session: the static token the
    configured target keeps (an ssh key stays in its agent, an OIDC login keeps nothing)."""
    if name is None:
        return False
    settings = config.load()
    stored = settings.targets.get(name)
    if stored is None or stored.token is None or stored.endpoint != endpoint:
        return False
    settings.targets[name] = stored.model_copy(update={"token": None})
    config.save(settings)
    return True


def logout(args: argparse.Namespace) -> int:
    name, target = context.target(args)
    client = Client(target)
    if _forget_stored_token(name, client.endpoint):
        print(f"removed the stored token of target {name}")
    session = sessions.load(client.endpoint)
    if session is None:
        print(f"not logged in to {client.endpoint}")
        return 0
    sessions.forget(client.endpoint)
    if session.usable:
        try:
            answer = client.send("DELETE", "/v1/login", credential=Bearer(session.token))
            if answer.status not in (204, 401):  # 401: it had already ended
                raise ApiError(answer.status, answer.body)
        except CliError as error:
            raise CliError(
                f"deleted the local session, but the server did not revoke it: {error}"
            ) from None
    print(f"logged out of {client.endpoint}")
    return 0
