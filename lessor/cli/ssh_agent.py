"""Signing requests with a key held by the running ssh-agent, over its socket protocol.

The private key never leaves the agent (it may live on a hardware token); we only ask the agent to
sign the canonical request bytes defined in `lessor.apiserver.auth.ssh`.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import socket
import struct
import time

from lessor.protocol.ssh_signature import KEY_TYPE, SCHEME, canonical_request, ssh_string

_REQUEST_IDENTITIES = 11
_IDENTITIES_ANSWER = 12
_SIGN_REQUEST = 13
_SIGN_RESPONSE = 14


def fingerprint(key_blob: bytes) -> str:
    """OpenSSH's fingerprint of a public key, as `ssh-add -l` prints it: SHA256:<base64>."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key_blob).digest()).decode().rstrip("=")


class AgentError(RuntimeError):
    """The agent is unreachable, holds no Ed25519 key, or refused to sign."""


class SshAgent:
    def __init__(self, socket_path: str | None = None) -> None:
        path = socket_path or os.environ.get("SSH_AUTH_SOCK")
        if not path:
            raise AgentError("SSH_AUTH_SOCK is not set: start ssh-agent and ssh-add your key")
        self.socket_path = path

    def _call(self, message: bytes) -> bytes:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.settimeout(30)
                connection.connect(self.socket_path)
                connection.sendall(ssh_string(message))
                (length,) = struct.unpack(">I", _receive(connection, 4))
                return _receive(connection, length)
        except OSError as error:
            raise AgentError(f"ssh-agent at {self.socket_path} unreachable: {error}") from error

    def ed25519_keys(self) -> list[tuple[bytes, str]]:
        """(public key blob, comment) of every Ed25519 key the agent holds."""
        reply = self._call(bytes([_REQUEST_IDENTITIES]))
        if reply[0] != _IDENTITIES_ANSWER:
            raise AgentError("ssh-agent refused to list keys")
        (count,) = struct.unpack(">I", reply[1:5])
        offset, keys = 5, []
        for _ in range(count):
            blob, offset = _take(reply, offset)
            comment, offset = _take(reply, offset)
            key_type, _ = _take(blob, 0)
            if key_type == KEY_TYPE:
                keys.append((blob, comment.decode(errors="replace")))
        return keys

    def sign(self, key_blob: bytes, data: bytes) -> bytes:
        """The SSH signature blob (type string and raw signature) of `data`."""
        reply = self._call(
            bytes([_SIGN_REQUEST]) + ssh_string(key_blob) + ssh_string(data) + b"\0\0\0\0"
        )
        if reply[0] != _SIGN_RESPONSE:
            raise AgentError("ssh-agent refused to sign (is the key still loaded?)")
        signature, _ = _take(reply, 1)
        return signature

    def authorization(
        self,
        key_blob: bytes,
        audience: str,
        method: str,
        target: str,
        body: bytes,
        *,
        now: float | None = None,
    ) -> str:
        """The Authorization header value for one request to the deployment `audience` (the
        endpoint the request goes to, lessor.protocol.ssh_signature.audience_of)."""
        timestamp = int(time.time() if now is None else now)
        nonce = secrets.token_urlsafe(24)
        message = canonical_request(
            audience, method, target, timestamp=timestamp, nonce=nonce, body=body
        )
        signature = self.sign(key_blob, message)
        key = base64.b64encode(key_blob).decode()
        sig = base64.b64encode(signature).decode()
        return (
            f'{SCHEME} key="{key}", aud="{audience}", ts="{timestamp}", nonce="{nonce}", '
            f'sig="{sig}"'
        )


def _receive(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise AgentError("ssh-agent closed the connection")
        data += chunk
    return data


def _take(buffer: bytes, offset: int) -> tuple[bytes, int]:
    (length,) = struct.unpack(">I", buffer[offset : offset + 4])
    start = offset + 4
    return buffer[start : start + length], start + length
