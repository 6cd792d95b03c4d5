"""Why a request is not authenticated, in the two kinds a client must tell apart."""


class AuthenticationError(Exception):
    """The credentials are not acceptable: 401 with a generic message.

    The precise cause is kept for logs and metrics only; telling a caller which check failed
    would help someone forging tokens.
    """

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


class IssuerUnavailableError(Exception):
    """The identity provider's keys could not be fetched: 503, retryable, not the caller's fault."""
