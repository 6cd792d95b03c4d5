"""How long the CLI waits: per request, and in all for refusals that say when to come back. A
module of its own, light to import: main() turns `--request-timeout` and `--retry-budget` into
these variables before any command's module (and the HTTP client) is loaded."""

from __future__ import annotations

TIMEOUT_SECONDS = 30.0
# How long a command may spend waiting out refusals that say when to come back (a burst of CI
# jobs meeting a rate limit or load shedding) before it reports the refusal.
RETRY_BUDGET_SECONDS = 120.0
REQUEST_TIMEOUT_ENV = "LESSOR_REQUEST_TIMEOUT"
RETRY_BUDGET_ENV = "LESSOR_RETRY_BUDGET"
