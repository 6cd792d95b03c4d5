"""Exit codes and the one error type every command raises: a message a person can act on.

Scripts branch on the exit code, so each outcome a caller handles differently has its own:

    0  success                      4  not found (lease, pool, target)
    1  server error or unreachable  5  timed out (--wait-timeout)
    2  usage error (bad flag/input) 6  refused: conflict or limit (409, 429)
    3  authentication or permission 130 interrupted (Ctrl-C)
"""

from __future__ import annotations

OK = 0
SERVER = 1
USAGE = 2
AUTH = 3
NOT_FOUND = 4
TIMEOUT = 5
REFUSED = 6
INTERRUPTED = 130

_BY_STATUS = {400: USAGE, 401: AUTH, 403: AUTH, 404: NOT_FOUND, 409: REFUSED, 429: REFUSED}


class CliError(Exception):
    """Printed as one line `lessor: <message>`; the process exits with `code`."""

    def __init__(self, message: str, code: int = SERVER) -> None:
        super().__init__(message)
        self.code = code


class UnreachableError(CliError):
    """The server could not be reached, or the connection failed before an answer: a request
    sent may or may not have arrived. `transient` when the connection was reset or timed out
    (worth another try for a read), not when nothing listens or the name does not resolve."""

    def __init__(self, message: str, code: int = SERVER, *, transient: bool = False) -> None:
        super().__init__(message, code)
        self.transient = transient


class AnswerLostError(CliError):
    """The server answered (status and headers arrived) but the connection failed in its body:
    the request was received and acted on, so it must not be sent again (spec 4.3, rule 3)."""

    def __init__(self, endpoint: str, status: int, location: str | None) -> None:
        super().__init__(f"{endpoint} answered HTTP {status} but the answer was cut short", SERVER)
        self.status = status
        self.location = location


class ApiError(CliError):
    """The server refused: its status, cause and detail, as one line. The cause is the body's
    `code` (lessor's classification, the spec's reasons among them), else its `reason`."""

    def __init__(self, status: int, body: object) -> None:
        fields = body if isinstance(body, dict) else {}
        self.status = status
        self.reason = str(fields.get("code") or fields.get("reason") or "")
        error = str(fields.get("error") or f"HTTP {status}")
        detail = str(fields.get("detail") or "")
        message = f"{error}: {detail}" if detail else error
        if self.reason:
            message += f" ({self.reason})"
        super().__init__(message, _BY_STATUS.get(status, SERVER if status >= 500 else USAGE))
