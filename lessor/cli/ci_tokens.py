"""The ID token a CI job's platform mints for it, for `lessor login --ci`: no stored secret.

GitHub Actions hands a job a URL and a bearer token for asking its runner for an ID token with
an audience of the job's choosing (`permissions: id-token: write`; ACTIONS_ID_TOKEN_REQUEST_URL,
ACTIONS_ID_TOKEN_REQUEST_TOKEN). GitLab CI puts each token the pipeline declares under
`id_tokens:` in a variable, its audience fixed there. Either token is then exchanged for a
session like any OIDC token; asked again when the session ends, as long as the job runs.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request

from lessor.cli.config import CiSettings
from lessor.cli.errors import AUTH, SERVER, USAGE, CliError

MAX_ANSWER_BYTES = 64 * 1024


def job_token(settings: CiSettings) -> str:
    """The running job's ID token; CliError naming what the pipeline lacks otherwise."""
    if os.environ.get("GITHUB_ACTIONS") == "true" or "ACTIONS_ID_TOKEN_REQUEST_URL" in os.environ:
        return _github(settings.audience)
    if os.environ.get("GITLAB_CI") == "true":
        return _gitlab(settings.token_variable)
    raise CliError(
        "--ci needs a GitHub Actions or GitLab CI job; elsewhere use LESSOR_TOKEN or "
        "`lessor login`",
        USAGE,
    )


def _github(audience: str) -> str:
    url = os.environ.get("ACTIONS_ID_TOKEN_REQUEST_URL")
    bearer = os.environ.get("ACTIONS_ID_TOKEN_REQUEST_TOKEN")
    if not url or not bearer:
        raise CliError(
            "this job may not ask for an ID token: give it `permissions: id-token: write`", AUTH
        )
    separator = "&" if urllib.parse.urlsplit(url).query else "?"
    request = urllib.request.Request(  # noqa: S310 - the runner's own URL
        f"{url}{separator}{urllib.parse.urlencode({'audience': audience})}"
    )
    request.add_header("Authorization", f"Bearer {bearer}")
    request.add_header("Accept", "application/json")
    try:
        with urllib.request.urlopen(  # noqa: S310
            request, timeout=30, context=ssl.create_default_context()
        ) as answer:
            body = answer.read(MAX_ANSWER_BYTES + 1)
    except urllib.error.HTTPError as error:
        raise CliError(
            f"the runner refused an ID token for audience {audience!r}: HTTP {error.code}", AUTH
        ) from None
    except (urllib.error.URLError, OSError) as error:
        raise CliError(f"the runner's token endpoint did not answer: {error}", SERVER) from None
    try:
        token = json.loads(body[:MAX_ANSWER_BYTES]).get("value")
    except (ValueError, AttributeError):
        token = None
    if not isinstance(token, str) or token.count(".") != 2:
        raise CliError("the runner's token endpoint answered without a token", SERVER)
    return token


def _gitlab(variable: str) -> str:
    token = os.environ.get(variable, "").strip()
    if not token:
        raise CliError(
            f"no ID token in ${variable}: declare it in the job, `id_tokens: {{{variable}: "
            "{aud: <the policy's audience>}}`",
            AUTH,
        )
    if token.count(".") != 2 or len(token) > MAX_ANSWER_BYTES:
        raise CliError(f"${variable} does not hold a JWT", AUTH)
    return token
