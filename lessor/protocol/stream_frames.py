"""The frames of the Sandbox attach and port-forward WebSockets, shared by the API and the CLI.

Every message is binary: one channel byte, then the payload. The channels are those of the
Kubernetes streaming protocol (v4.channel.k8s.io), so a session maps onto the pod's stream
without translation, but only these directions are accepted:

    client -> server   0 stdin (port-forward: bytes to the port)   4 resize (JSON, attach only)
    server -> client   1 stdout (port-forward: bytes from the port)   2 stderr   3 error (JSON)

An error frame is sent once, just before the server closes the session for any reason other
than the stream ending normally; it carries `{"reason": ..., "detail": ...}` and the close frame
repeats the reason with one of the codes below. See docs/api.md ("Attach and port-forward").
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

SUBPROTOCOL = "v1.stream.lessor.dev"

STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4
FROM_CLIENT = frozenset({STDIN, RESIZE})

# Close codes: the RFC 6455 ones, and 4000-4999 ("private use") for the service's own reasons.
NORMAL = 1000  # the stream ended (the process exited, the port connection closed)
GOING_AWAY = 1001  # the API server is shutting down: open a new session
PROTOCOL_ERROR = 1002  # a frame this protocol does not allow
UNSUPPORTED = 1003  # a text message
BACKEND_ERROR = 1011  # the pod's stream failed
LEASE_ENDED = 4000  # the lease left Ready or reached its expiry
IDLE_TIMEOUT = 4001  # no data either way for the idle limit
DURATION_LIMIT = 4002  # the session reached its longest allowed duration
ACCESS_REVOKED = 4003  # the caller's AccessPolicy no longer grants the lease's pool

CLOSE_REASONS = {
    GOING_AWAY: "server_shutdown",
    LEASE_ENDED: "lease_not_ready",
    IDLE_TIMEOUT: "idle_timeout",
    DURATION_LIMIT: "duration_limit",
    ACCESS_REVOKED: "access_revoked",
    BACKEND_ERROR: "backend_error",
    PROTOCOL_ERROR: "protocol_error",
    UNSUPPORTED: "protocol_error",
}


class FrameError(ValueError):
    """A client frame this protocol does not allow; `code` is the close code it earns."""

    def __init__(self, message: str, code: int = PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.code = code


class Resize(BaseModel):
    """A terminal size, the payload of a resize frame."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    width: int = Field(ge=1, le=10000)
    height: int = Field(ge=1, le=10000)


def encode(channel: int, payload: bytes = b"") -> bytes:
    return bytes((channel,)) + payload


def decode(message: bytes) -> tuple[int, bytes]:
    if not message:
        raise FrameError("an empty frame has no channel byte")
    return message[0], message[1:]


def client_frame(message: bytes) -> tuple[int, bytes]:
    """A frame a client may send, checked: stdin, or a resize with a valid size."""
    channel, payload = decode(message)
    if channel not in FROM_CLIENT:
        raise FrameError(f"channel {channel} is not one a client may send on")
    if channel == RESIZE:
        try:
            Resize.model_validate_json(payload)
        except ValidationError as error:
            raise FrameError('a resize frame carries {"width": W, "height": H}') from error
    return channel, payload


def error_payload(reason: str, detail: str) -> bytes:
    return json.dumps({"reason": reason, "detail": detail}).encode()


def parse_error(payload: bytes) -> dict[str, Any]:
    """An error frame's object; a malformed one becomes its text as the detail."""
    try:
        parsed = json.loads(payload)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return parsed
    return {"reason": "backend_error", "detail": payload.decode(errors="replace")}
