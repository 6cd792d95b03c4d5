"""`lessor -v`: each HTTP exchange traced on stderr. A module of its own, light to import: main()
sets the switch before any command's module (and the HTTP client) is loaded."""

from __future__ import annotations

import os
import sys

# `lessor -v` sets it; a CI job can set it for every command of a script.
DEBUG_ENV = "LESSOR_DEBUG"


def enabled() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def trace(line: str) -> None:
    print(f"lessor: {line}", file=sys.stderr, flush=True)
