"""Shell completion (bash, zsh, fish) by argcomplete: commands and flags from the parser itself,
where a target goes the config's target names, and, where a lease or a pool goes, the caller's
lease ids and aliases and the pools it may lease from, asked of the server.

`lessor completion SHELL` prints the script to load (`source <(lessor completion bash)`). The
shell then runs `lessor` with argcomplete's environment at every Tab; main() hands that run to
argcomplete before anything else, and argcomplete is imported only then, so a normal run pays
nothing for it. A completion that needs the server has COMPLETION_TIMEOUT seconds (or
LESSOR_COMPLETION_TIMEOUT: a slow link, a loaded machine), and any
failure (no target, not logged in, unreachable) completes nothing rather than print an error
into the user's command line.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any, TypeVar

from lessor.cli.limits import REQUEST_TIMEOUT_ENV, RETRY_BUDGET_ENV

if TYPE_CHECKING:  # imported when the shell asks: a normal run pays nothing for completion
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")

SHELLS = ("bash", "zsh", "fish")
COMPLETION_TIMEOUT = 5.0
TIMEOUT_ENV = "LESSOR_COMPLETION_TIMEOUT"


def timeout() -> float:
    """Seconds a completion may wait for the server: a Tab that hangs is worse than none."""
    try:
        return max(0.1, float(os.environ.get(TIMEOUT_ENV, COMPLETION_TIMEOUT)))
    except ValueError:
        return COMPLETION_TIMEOUT


def requested() -> bool:
    """Whether this run is a shell asking for completions."""
    return "_ARGCOMPLETE" in os.environ


def complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell and exit (argcomplete does both)."""
    import argcomplete  # noqa: PLC0415 - only when the shell asks

    argcomplete.autocomplete(parser)


def _ask(parsed_args: argparse.Namespace, path: str, model: type[M]) -> list[M]:
    from lessor.cli import context  # noqa: PLC0415 - only when the shell asks

    # This process only completes, then exits: a short wait, and no retries.
    os.environ[REQUEST_TIMEOUT_ENV] = str(timeout())
    os.environ[RETRY_BUDGET_ENV] = "0"
    try:
        return context.client(parsed_args).get_models(path, model)
    except Exception:
        return []


def leases(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    from lessor.protocol.responses import LeaseSummary  # noqa: PLC0415 - only when asked

    found = _ask(parsed_args, "/v1/leases", LeaseSummary)
    names = [lease.id for lease in found] + [lease.alias or "" for lease in found]
    return [name for name in names if name and name.startswith(prefix)]


def pools(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    from lessor.protocol.responses import PoolRecord  # noqa: PLC0415 - only when asked

    names = [pool.name for pool in _ask(parsed_args, "/v1/pools", PoolRecord)]
    return [name for name in names if name.startswith(prefix)]


def targets(prefix: str, **_: Any) -> list[str]:
    """The config's target names (`--target`, `config use/rename/delete`): local, no server."""
    from lessor.cli import config  # noqa: PLC0415 - only when the shell asks

    try:
        names = config.load().targets
    except Exception:
        return []
    return [name for name in sorted(names) if name.startswith(prefix)]


def script(args: argparse.Namespace) -> int:
    """`lessor completion SHELL`: the script that makes SHELL complete `lessor`."""
    from argcomplete.shell_integration import shellcode  # noqa: PLC0415

    print(shellcode(["lessor"], shell=args.shell), end="")
    return 0
