"""How many warm clusters an autoscaled pool keeps (`policy.mode: autoscale`, issue 23).

Warm clusters exist so that a lease never waits for one to start; the clusters that matter are
those asked for at once, faster than replacements start. So the target is the busiest recent
count of arrivals (leases created) per `window`, and the same count one `period` ago (a day:
the CI burst at 09:00 yesterday predicts today's) for this window and the next, the next because
clusters take time to start and should be warm before the burst, not during it. Leases waiting
now count too. The target stays within `minWarm` and `maxWarm`; it rises at once and falls only
`scaleDownDelay` after its last rise, so a pool does not throw away clusters between two bursts
of one morning.

The arrival counts live in the pool's status, one entry per window with arrivals over the last
period: the operator may restart, and ended leases are deleted after their retention, so neither
memory nor the lease cache can remember yesterday. Each pass merges what the cache shows into
them with max(), never +: a pass replayed after a crash, or a lease seen twice, counts once.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass

from lessor.protocol.durations import format_duration, parse_duration
from lessor.protocol.timestamps import timestamp
from lessor.resources.cluster import Arrivals, AutoscaleStatus, ClusterLease, PoolPolicy

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclass(frozen=True)
class Decision:
    status: AutoscaleStatus
    recheck_after: float
    """Seconds until time alone changes the decision: the next window, or a held scale-down."""


def _window_start(moment: datetime.datetime, window: datetime.timedelta) -> datetime.datetime:
    elapsed = (moment - EPOCH) // window
    return EPOCH + window * elapsed


def _demand(lease: ClusterLease) -> bool:
    """Whether a lease asked for a cluster: it bound one, or it may still. One released before it
    ever bound took nothing, and counting it would let a tenant's create-and-release churn,
    within its admission bucket, hold the pool at maxWarm now and again a period later."""
    status = lease.status
    return status is None or status.bound_at is not None or status.ended_at is None


def arrivals(
    policy: PoolPolicy, recorded: list[Arrivals], leases: list[ClusterLease], now: datetime.datetime
) -> dict[datetime.datetime, int]:
    """Leases created per window start that asked for a cluster (`_demand`), from one period ago
    to now: the recorded counts and the cache's, merged with max()."""
    window, period = parse_duration(policy.window), parse_duration(policy.period)
    oldest = _window_start(now, window) - period
    counts = {a.start: a.leases for a in recorded if a.start >= oldest}
    seen: dict[datetime.datetime, int] = {}
    for lease in filter(_demand, leases):
        created = lease.metadata.creation_timestamp
        if created is not None and oldest <= created <= now:
            start = _window_start(created, window)
            seen[start] = seen.get(start, 0) + 1
    for start, count in seen.items():
        counts[start] = max(counts.get(start, 0), count)
    return dict(sorted(counts.items()))


def decide(
    policy: PoolPolicy,
    previous: AutoscaleStatus | None,
    leases: list[ClusterLease],
    waiting: int,
    now: datetime.datetime,
) -> Decision:
    window, period = parse_duration(policy.window), parse_duration(policy.period)
    delay = parse_duration(policy.scale_down_delay)
    counts = arrivals(policy, previous.arrivals if previous else [], leases, now)
    this = _window_start(now, window)

    def at(start: datetime.datetime) -> int:
        return counts.get(start, 0)

    recent = max(at(this), at(this - window))
    ago = max(at(this - period), at(this - period + window))
    demand = max(recent, ago, waiting)
    ceiling = policy.max_warm if policy.max_warm is not None else policy.min_warm
    wanted = min(max(demand, policy.min_warm), ceiling)
    reason = (
        f"{recent} lease(s) in the last {format_duration(window)}, {ago} one"
        f" {format_duration(period)} ago, {waiting} waiting; between {policy.min_warm} and"
        f" {ceiling}"
    )
    before = previous.target if previous else None
    raised_at = previous.raised_at if previous else None
    target, recheck = wanted, (this + window - now).total_seconds()
    if before is not None and wanted < before and raised_at is not None:
        allowed = raised_at + delay
        if now < allowed:
            target = before
            reason += f"; {wanted} from {timestamp(allowed)} (scaleDownDelay)"
            recheck = min(recheck, (allowed - now).total_seconds())
    if before is None or target > before:
        raised_at = now
    status = AutoscaleStatus(
        target=target,
        reason=reason,
        changed_at=now if target != before else (previous.changed_at if previous else now),
        raised_at=raised_at,
        arrivals=[Arrivals(start=start, leases=n) for start, n in counts.items() if n],
    )
    return Decision(status, max(1.0, math.ceil(recheck)))
