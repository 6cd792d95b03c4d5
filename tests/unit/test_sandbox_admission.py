"""Sandbox admission rules that need no cluster: the per-principal token bucket (shared by the
processes of one server), grants and their verbs, the resource ceiling, TTL caps and expiry."""

from __future__ import annotations

import datetime
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from lessor.apiserver.policy.evaluation import ceiling_exceeded, sandbox_grant, sandbox_ttl
from lessor.apiserver.state.admission_limit import AdmissionLimiter
from lessor.resources.access_policy import AccessPolicySpec, SandboxGrant
from lessor.resources.cluster import Extension
from lessor.resources.lease_time import expires_at


def test_a_bucket_spends_its_burst_then_refuses_with_the_wait(tmp_path: Path) -> None:
    limiter = AdmissionLimiter(rate=0.5, burst=2, directory=tmp_path)
    assert [limiter.take("a", now=100.0).allowed for _ in range(3)] == [True, True, False]
    refused = limiter.take("a", now=100.5)
    assert not refused.allowed and refused.retry_after == 2  # 0.25 tokens: 1.5 s, rounded up
    assert limiter.take("b", now=100.5).allowed, "every principal has its own bucket"


def test_refusals_spend_nothing_so_the_refill_is_not_pushed_back(tmp_path: Path) -> None:
    limiter = AdmissionLimiter(rate=1.0, burst=1, directory=tmp_path)
    assert limiter.take("a", now=0.0).allowed
    for moment in (0.2, 0.4, 0.6, 0.8, 0.9):
        assert not limiter.take("a", now=moment).allowed
    assert limiter.take("a", now=1.0).allowed, "a token a second after the last charge"
    assert not limiter.take("a", now=1.1).allowed


def test_the_bucket_never_holds_more_than_the_burst(tmp_path: Path) -> None:
    limiter = AdmissionLimiter(rate=10.0, burst=3, directory=tmp_path)
    limiter.take("a", now=0.0)
    allowed = [limiter.take("a", now=1000.0).allowed for _ in range(5)]
    assert allowed == [True, True, True, False, False]


def _take_many(directory: str, count: int, results: Any) -> None:
    limiter = AdmissionLimiter(rate=0.001, burst=50, directory=Path(directory))
    results.put(sum(limiter.take("shared", now=0.0).allowed for _ in range(count)))


def test_the_workers_of_one_server_share_each_bucket_exactly(tmp_path: Path) -> None:
    """Four processes (gunicorn workers) take from one bucket of 50: exactly 50 succeed."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    workers = [
        context.Process(target=_take_many, args=(str(tmp_path), 40, results)) for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert sum(results.get(timeout=10) for _ in workers) == 50


def test_nonsense_limits_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="positive"):
        AdmissionLimiter(rate=0, burst=1, directory=tmp_path)


def grant(**fields: Any) -> SandboxGrant:
    return SandboxGrant.model_validate({"pools": ["sb-*"], "verbs": ["lease"], **fields})


def test_the_first_grant_with_the_verb_decides() -> None:
    spec = AccessPolicySpec.model_validate({
        "auth": {"oidc": {"issuer": "https://token.example", "audience": []}},
        "identity": "{sub}",
        "rules": [],
        "sandbox": [
            {"match": {"claim": "team", "value": "ml"}, "pools": ["sb-gpu"], "verbs": ["lease"],
             "maxExtensions": 5},
            {"pools": ["sb-*"], "verbs": ["lease", "release"], "maxExtensions": 1},
        ],
    })  # fmt: skip
    ml = {"sub": "a", "team": "ml"}
    found = sandbox_grant(spec, ml, "sb-gpu", "lease")
    assert found is not None and found.max_extensions == 5
    release = sandbox_grant(spec, ml, "sb-gpu", "release")
    assert release is not None and release.max_extensions == 1, "the first one lacks the verb"
    assert sandbox_grant(spec, {"sub": "b"}, "other", "lease") is None


def template(**resources: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": n, "resources": r} for n, r in resources.items()]}}


def test_the_resource_ceiling_sums_the_pods_containers() -> None:
    ceiling = grant(maxCpu="1", maxMemory="1Gi")
    fits = template(a={"requests": {"cpu": "500m", "memory": "512Mi"}},
                    b={"requests": {"cpu": "0.5"}, "limits": {"memory": "512Mi"}})  # fmt: skip
    assert ceiling_exceeded(ceiling, fits) is None
    too_big = template(a={"requests": {"cpu": "600m", "memory": "1Mi"}},
                       b={"requests": {"cpu": "500m", "memory": "1Mi"}})  # fmt: skip
    assert "1.100 cpu" in (ceiling_exceeded(ceiling, too_big) or "")
    unsized = template(a={"requests": {"cpu": "100m"}})
    assert "declares no memory size" in (ceiling_exceeded(ceiling, unsized) or "")
    assert ceiling_exceeded(grant(), unsized) is None, "no ceiling, no check"


def test_the_ttl_is_the_request_or_default_within_both_caps() -> None:
    assert sandbox_ttl(None, "30m", "4h", grant()) == ("30m", "4h")
    assert sandbox_ttl("6h", "30m", "4h", grant()) == ("4h", "4h")
    assert sandbox_ttl("2h", "30m", "4h", grant(maxTtl="1h")) == ("1h", "1h")


def test_extensions_never_carry_expiry_past_the_ceiling_from_readiness() -> None:
    ready = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    extensions = [Extension(ttl="30m"), Extension(ttl="30m")]
    assert expires_at(ready, "30m", extensions, 2, "2h") == ready + datetime.timedelta(minutes=90)
    assert expires_at(ready, "30m", extensions, 2, "1h") == ready + datetime.timedelta(hours=1)
    assert expires_at(ready, "30m", extensions, 1, None) == ready + datetime.timedelta(hours=1)
