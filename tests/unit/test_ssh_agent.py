"""The CLI's ssh-agent client signs with a key in a real ssh-agent; the server verifies it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from lessor.apiserver.auth.errors import AuthenticationError
from lessor.apiserver.auth.ssh import (
    NonceCache,
    key_blob_from_openssh,
    parse_authorization,
    verify_request,
)
from lessor.cli.ssh_agent import AgentError, SshAgent
from tests.ssh_agent_process import ssh_agent

pytestmark = pytest.mark.skipif(shutil.which("ssh-agent") is None, reason="needs OpenSSH")


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[SshAgent, str]]:
    with ssh_agent(tmp_path, "alice@ci") as running:
        yield SshAgent(running.socket), running.public_key


def test_agent_signature_verifies_on_the_server(agent: tuple[SshAgent, str]) -> None:
    client, public_line = agent
    [(blob, comment)] = client.ed25519_keys()
    assert comment == "alice@ci"
    authorized = {key_blob_from_openssh(public_line): "alice"}
    header = client.authorization(blob, "https://lessor.example.com", "GET", "/v1/leases", b"")
    identity = verify_request(
        parse_authorization(header),
        method="GET",
        target="/v1/leases",
        body=b"",
        authorized_keys=authorized,
        nonces=NonceCache(),
        audiences={"https://lessor.example.com"},
    )
    assert identity == "alice"
    with pytest.raises(AuthenticationError):
        verify_request(
            parse_authorization(header),
            method="GET",
            target="/v1/pools",
            body=b"",
            authorized_keys=authorized,
            nonces=NonceCache(),
            audiences={"https://lessor.example.com"},
        )


def test_a_missing_agent_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(AgentError, match="unreachable"):
        SshAgent(str(tmp_path / "no-such.sock")).ed25519_keys()
