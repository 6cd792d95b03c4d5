"""Every error the API answers, as `{"error", "detail", "reason", "code"}` (spec 7.2).

A refusal is raised with one classification (`reason=`), lessor's or the spec's: the body's
`code` carries it always, its `reason` only when it is one of the spec's (the spec omits the
reason where it names none; lessor.protocol.error_reasons). The same condition carries the same
reason on the cluster and Sandbox paths. A client mistake is a 4xx with a message that says what
to change; a 500 never carries internals.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from lessor.protocol.error_reasons import LESSOR_CODES, SPEC_REASONS, Reason, SpecReason
from lessor.protocol.responses import Error


class HttpError(Exception):
    status = 500
    error = "internal error"
    reason: Reason | None = None

    def __init__(
        self,
        detail: str | None = None,
        *,
        reason: Reason | None = None,
        error: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail or self.error)
        self.detail = detail
        if reason is not None:
            # Checked at run time too: a reason may come from a value mypy does not see.
            if reason not in SPEC_REASONS | LESSOR_CODES:
                raise ValueError(f"{reason!r} is no error reason of the API")
            self.reason = reason
        if error is not None:
            self.error = error
        self.headers = headers or {}

    def body(self) -> Error:
        body = Error(error=self.error)
        if self.detail:
            body.detail = self.detail
        if self.reason:
            body.code = self.reason
            if _in_spec(self.reason):
                body.reason = self.reason
        return body


def _in_spec(reason: Reason) -> TypeGuard[SpecReason]:
    """Whether the spec names `reason` (an error body's `reason` takes only those)."""
    return reason in SPEC_REASONS


class BadRequestError(HttpError):
    status, error = 400, "bad request"


class UnauthorizedError(HttpError):
    status, error = 401, "unauthorized"


class ForbiddenError(HttpError):
    status, error = 403, "forbidden"


class HttpNotFoundError(HttpError):
    status, error, reason = 404, "not found", "not_found"


class HttpConflictError(HttpError):
    status, error = 409, "conflict"


class RequestTimeoutError(HttpError):
    status, error = 408, "request timeout"


class PayloadTooLargeError(HttpError):
    status, error = 413, "payload too large"


class UpgradeRequiredError(HttpError):
    status, error = 426, "upgrade required"


class TooManyRequestsError(HttpError):
    status, error = 429, "too many requests"

    @classmethod
    def rate_limited(cls, what: str, retry_after: int) -> TooManyRequestsError:
        """A refusal of an admission rate limit: the one 429 that says when to come back."""
        return cls(
            f"too many {what}; retry in {retry_after}s",
            reason="rate_limited",
            headers={"Retry-After": str(retry_after)},
        )


class UnavailableError(HttpError):
    """Something lessor depends on did not answer: worth a retry, and said when (a client
    that honours Retry-After, as the CLI does, waits a second instead of giving up)."""

    status, error, reason = 503, "service unavailable", "backend_error"

    def __init__(self, detail: str | None = None, **options: Any) -> None:
        super().__init__(detail, **options)
        self.headers.setdefault("Retry-After", "1")


class NotImplementedYetError(HttpError):
    status, error = 501, "not implemented"
