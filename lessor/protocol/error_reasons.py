"""The `reason` vocabulary of error bodies (spec 7.2), and lessor's own finer one.

An error body is `{error, detail?, reason?, code?}`. `reason` takes only the spec's values and is
omitted where none applies, as the spec says, so a client written against the spec meets no
value it does not know. `code` classifies every refusal that has a bounded cause, the spec's
reasons included, with lessor's closed set beside them (`alias_active`, `rate_limited`, ...):
what a script switches on when it needs the finer distinction (docs/api.md, Errors).

Literal types, so that mypy refuses a reason nobody declared and the OpenAPI document lists the
allowed values; the sets are derived from them for the checks made at run time.
"""

from __future__ import annotations

from typing import Literal, get_args

SpecReason = Literal[
    "not_found",
    "not_ready",
    "expired",
    "target_unresolved",
    "provenance_incomplete",
    "pool_unresolvable",
    "not_declared",
    "ambiguous_aliases",
    "ambiguous_alias",
    "backend_error",
    "extension_budget_exhausted",
    "max_ttl_ceiling",
    "expiry_derivation_mismatch",
    "conflict_retryable",
    "teardown_quarantined",
    "execution_limit_exhausted",
]

# lessor's codes for refusals the spec gives no reason: each is a status's finer cause.
LessorCode = Literal[
    "unauthenticated",  # 401
    "identity_unresolvable",  # 403: the policy's identity template names a missing claim
    "forbidden",  # 403
    "resource_ceiling",  # 403: the pool's pods ask more than the grant allows
    "invalid_request",  # 400
    "alias_active",  # 409: the alias names another active lease
    "idempotency_conflict",  # 409: the key was used for a different intent
    "concurrency_limit",  # 429 without Retry-After
    "rate_limited",  # 429 with Retry-After
    "too_many_sessions",  # 429: attach and port-forward sessions
    "overloaded",  # 429 with Retry-After: the replica sheds load (spec 7.1)
]

# Any classification of a refusal: what an error body's `code` carries.
Reason = Literal[SpecReason, LessorCode]

SPEC_REASONS: frozenset[str] = frozenset(get_args(SpecReason))
LESSOR_CODES: frozenset[str] = frozenset(get_args(LessorCode))
