"""Which service a command talks to: `--endpoint`, else `--target`, `LESSOR_TARGET`, or the
config's current target. `--endpoint` (or `LESSOR_ENDPOINT`) overrides the address of the chosen
target for one run; with no target at all it stands alone, authenticated by `LESSOR_TOKEN` when
that is set, which is all a CI job needs."""

from __future__ import annotations

import argparse
import os

from pydantic import ValidationError

from lessor.cli import config
from lessor.cli.client import Client
from lessor.cli.errors import USAGE, CliError


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
                chosen = config.Target.model_validate({**chosen.model_dump(), "endpoint": endpoint})
        except ValidationError as error:
            raise CliError(f"--endpoint: {config.describe(error)}", USAGE) from None
    if chosen is None:
        raise CliError(
            "no target: add one with `lessor config set NAME --endpoint URL --auth MODE` "
            "or pass --endpoint URL",
            USAGE,
        )
    return name, chosen


def client(args: argparse.Namespace) -> Client:
    return Client(target(args)[1])
