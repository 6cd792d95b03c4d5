"""What a static token's Secret value stands for: the token in plaintext, or its SHA-256."""

from __future__ import annotations

import hashlib

import pytest

from lessor.apiserver.auth.static_tokens import MalformedDigestError, stored_digest, token_digest

TOKEN = "a-token-\u00e9"  # not ASCII: the digest is of the UTF-8 bytes
DIGEST = hashlib.sha256(TOKEN.encode()).hexdigest()


def test_a_digest_and_the_plaintext_stand_for_the_same_token() -> None:
    assert stored_digest(f"sha256:{DIGEST}".encode()) == token_digest(TOKEN)
    assert stored_digest(TOKEN.encode()) == token_digest(TOKEN)


def test_a_digest_is_not_itself_the_token() -> None:
    assert stored_digest(f"sha256:{DIGEST}".encode()) != token_digest(f"sha256:{DIGEST}")
    assert stored_digest(f"sha256:{DIGEST}".encode()) != token_digest(DIGEST)


@pytest.mark.parametrize(
    "value",
    [
        f"sha256:{DIGEST[:63]}",
        f"sha256:{DIGEST}0",
        f"sha256:{DIGEST.upper()}",
        f"sha256:{DIGEST}\n",
        f"sha256: {DIGEST}",
        f"sha256:{'g' * 64}",
        "sha256:",
    ],
)
def test_a_malformed_digest_is_refused_without_naming_it(value: str) -> None:
    with pytest.raises(MalformedDigestError) as raised:
        stored_digest(value.encode())
    assert DIGEST[:8] not in str(raised.value) and DIGEST[:8].upper() not in str(raised.value)
