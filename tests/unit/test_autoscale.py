"""The autoscaler's target (lessor.operator.cluster.autoscale.decide) as an administrator reads
it in the pool's status: it follows arrivals, remembers a period ago, stays in its bounds, rises
at once, falls only after scaleDownDelay, and counts a lease once however often it is seen."""

from __future__ import annotations

import datetime
from typing import Any

from lessor.operator.cluster.autoscale import decide
from lessor.resources.cluster import AutoscaleStatus, ClusterLease, PoolPolicy

T0 = datetime.datetime(2026, 11, 26, 9, 0, tzinfo=datetime.UTC)


def _policy(**fields: Any) -> PoolPolicy:
    return PoolPolicy.model_validate(
        {"mode": "autoscale", "minWarm": 1, "maxWarm": 5, "window": "10m", "period": "24h",
         "scaleDownDelay": "30m", **fields}
    )  # fmt: skip


def _leases(*created: datetime.datetime) -> list[ClusterLease]:
    return _models([{"metadata": {"creationTimestamp": c.isoformat()}} for c in created])


def _models(leases: list[dict[str, Any]]) -> list[ClusterLease]:
    """Leases as the cache reads them: each with its pool, as every stored lease has."""
    return [ClusterLease.model_validate({"spec": {"pool": "p"}, **lease}) for lease in leases]


def test_a_burst_raises_the_target_at_once_within_the_bounds() -> None:
    burst = _leases(*(T0 + datetime.timedelta(seconds=s) for s in range(8)))
    decided = decide(_policy(), None, burst, waiting=3, now=T0 + datetime.timedelta(minutes=1))
    assert decided.status.target == 5, "eight arrivals, capped by maxWarm"
    assert "8 lease(s) in the last 10m" in decided.status.reason
    quiet = decide(_policy(), None, [], waiting=0, now=T0)
    assert quiet.status.target == 1, "minWarm when nothing happens"


def test_yesterdays_burst_is_warm_before_it_comes_again() -> None:
    """Three leases at 09:10 yesterday: at 09:00 today the next window is expected to be as
    busy, and the counts live in the status (the leases themselves were deleted since)."""
    yesterday = T0 - datetime.timedelta(days=1) + datetime.timedelta(minutes=12)
    seen = decide(_policy(), None, _leases(yesterday, yesterday, yesterday), 0, yesterday)
    assert seen.status.arrivals[0].leases == 3
    today = decide(_policy(), seen.status, [], 0, T0 + datetime.timedelta(minutes=1))
    assert today.status.target == 3
    assert "3 one 24h ago" in today.status.reason


def test_the_target_falls_only_after_the_scale_down_delay() -> None:
    burst = _leases(*(T0 for _ in range(4)))
    high = decide(_policy(), None, burst, 0, T0)
    later = T0 + datetime.timedelta(minutes=25)  # two windows on: the burst is no longer recent
    held = decide(_policy(), high.status, burst, 0, later)
    assert held.status.target == 4 and "scaleDownDelay" in held.status.reason
    assert held.recheck_after <= 5 * 60
    fallen = decide(_policy(), held.status, burst, 0, T0 + datetime.timedelta(minutes=31))
    assert fallen.status.target == 1
    assert fallen.status.changed_at == T0 + datetime.timedelta(minutes=31)


def test_a_lease_seen_again_or_a_pass_replayed_counts_once() -> None:
    leases = _leases(T0, T0)
    once = decide(_policy(), None, leases, 0, T0)
    again = decide(_policy(), once.status, leases, 0, T0)
    assert [a.leases for a in again.status.arrivals] == [2]
    assert again.status == once.status.model_copy(update={"raised_at": once.status.raised_at})


def test_counts_older_than_a_period_are_forgotten() -> None:
    old = AutoscaleStatus.model_validate(
        {"target": 1, "arrivals": [{"start": "2026-11-20T09:00:00Z", "leases": 9}]}
    )
    assert decide(_policy(), old, [], 0, T0).status.arrivals == []


def test_leases_released_before_they_bound_are_no_demand() -> None:
    """Review N16: a tenant creating and releasing leases (none ever binding) does not hold the
    pool at maxWarm; leases that bound, and those still waiting, count."""
    ended = {"endedAt": T0.isoformat(), "endReason": "Released"}
    churn = [
        {"metadata": {"creationTimestamp": (T0 + datetime.timedelta(seconds=s)).isoformat()},
         "status": ended}
        for s in range(50)
    ]  # fmt: skip
    quiet = decide(
        _policy(), None, _models(churn), waiting=0, now=T0 + datetime.timedelta(minutes=1)
    )
    assert quiet.status.target == 1
    bound = {**ended, "boundAt": T0.isoformat()}
    used = [*_models([{**churn[0], "status": bound}, {**churn[1], "status": bound}]), *_leases(T0)]
    busy = decide(_policy(), None, used, waiting=0, now=T0 + datetime.timedelta(minutes=1))
    assert busy.status.target == 3
