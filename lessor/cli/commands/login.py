"""`lessor login` exchanges the target's credential for a session token (kept per endpoint,
mode 0600, reused by every later command); `lessor logout` revokes it and deletes it, and the
target's stored static token with it."""

from __future__ import annotations

import argparse
import datetime
import ssl

from lessor.cli import config, context, oidc, output, sessions
from lessor.cli.client import Bearer, Client, Credential, SshSignature, agent_keys, own_credential
from lessor.cli.errors import USAGE, ApiError, CliError
from lessor.protocol.ssh_signature import audience_of


def _credentials(client: Client, device: bool) -> list[Credential]:
    """What to try, in order. Every key in the agent may be tried: the server says which one
    it knows only by accepting it."""
    target = client.target
    if target.auth == "ssh":
        agent, keys = agent_keys(target)
        return [SshSignature(agent, key, audience_of(target.endpoint)) for key in keys]
    if target.auth == "oidc":
        if target.oidc is None:
            raise CliError("this oidc target has no issuer: `lessor config set` it again", USAGE)
        tls = ssl.create_default_context(cafile=target.ca_file)
        return [Bearer(oidc.login(target.oidc, tls, device))]
    credential = own_credential(target)
    if credential is None or target.auth == "none":
        raise CliError("this target has no auth mode: set one with `lessor config set`", USAGE)
    return [credential]


def login(args: argparse.Namespace) -> int:
    client = Client(context.target(args)[1])
    body = {"ttl": args.ttl} if args.ttl else None
    refusal: ApiError | None = None
    for credential in _credentials(client, args.device):
        answer = client.send("POST", "/v1/login", body, credential)
        if answer.status == 200:
            break
        refusal = ApiError(answer.status, answer.body)
        if answer.status != 401:
            raise refusal
    else:
        assert refusal is not None
        raise refusal
    granted = answer.body
    expires = datetime.datetime.fromisoformat(granted["expires_at"].replace("Z", "+00:00"))
    session = sessions.Session(
        token=granted["session_token"],
        identity=granted["identity"],
        method=granted["method"],
        expires_at=granted["expires_at"],
        expires=expires.timestamp(),
    )
    sessions.store(client.endpoint, session)
    if output.wants_json(args):
        output.emit(
            args,
            {
                "endpoint": client.endpoint,
                "identity": session.identity,
                "method": session.method,
                "expires_at": session.expires_at,
            },
        )
    else:
        print(
            f"logged in to {client.endpoint} as {session.identity} ({session.method}); "
            f"the session expires {output.until(session.expires_at)}"
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
