"""Authentication: OIDC JWTs, static tokens, SSH request signatures and session tokens."""
