"""Which service a command talks to: `--endpoint`, else `--target`, `LESSOR_TARGET`, or the
config's current target. `--endpoint` (or `LESSOR_ENDPOINT`) overrides the address of the chosen
target for one run; with no target at all it stands alone, authenticated by `LESSOR_TOKEN` when
that is set, which is all a CI job needs. A target's stored token goes only to the target's own
endpoint: sent elsewhere with `--endpoint`, the run uses `LESSOR_TOKEN` or nothing (sessions
are kept per endpoint, and SSH signatures name the endpoint, so neither can leak either)."""

from __future__ import annotations

import argparse
import os

from pydantic import ValidationError

from lessor.cli import config
from lessor.cli.client import Client
from lessor.cli.errors import USAGE, CliError
from lessor.protocol.ssh_signature import audience_of
from lessor.protocol.validation_errors import describe


def target(args: argparse.Namespace) -> tuple[str | None, config.Target]:
    settings = config.load()
    name = args.target or os.environ.get("LESSOR_TARGET") or settings.current
    chosen = settings.target(name) if name else None
    endpoint = args.endpoint or os.environ.get("LESSOR_ENDPOINT")
    if endpoint:
        try:
            if chosen is None:
                auth = "token" if os.environ.get("LESSOR_TOKEN") else "none"
                chosen = config.Target(endpoint=endpoint, auth=auth)
            else:
                moved: dict[str, str | None] = {"endpoint": endpoint}
                if audience_of(endpoint) != audience_of(chosen.endpoint):
                    moved["token"] = None
                chosen = config.Target.model_validate({**chosen.model_dump(), **moved})
        except ValidationError as error:
            raise CliError(f"--endpoint: {describe(error, root='config')}", USAGE) from None
        except ValueError as error:
            raise CliError(f"--endpoint: {error}", USAGE) from None
    if chosen is None:
        raise CliError(
            "no target: add one with `lessor config set NAME --endpoint URL --auth MODE` "
            "or pass --endpoint URL",
            USAGE,
        )
    return name, chosen


def client(args: argparse.Namespace) -> Client:
    return Client(target(args)[1])
