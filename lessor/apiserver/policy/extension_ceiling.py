"""The one rule for an extension against a lease's lifetime ceiling, for both kinds of lease.

A lease lives at most `maxTtl` from its start (a cluster lease's binding, a Sandbox lease's
readiness). An extension that would carry its expiry past that is refused whole (409
`max_ttl_ceiling`) and spends nothing; it is never granted in part. The spec says so of Sandbox
leases; cluster leases follow it too, so that a 200 always means the lease got all it asked for
(a CI job that extended by 30m must not find it got 10m). The refusal says how much can still
be asked, so a client can ask again for that.
"""

from __future__ import annotations

import datetime

from lessor.apiserver.http.errors import HttpConflictError
from lessor.protocol.durations import format_duration
from lessor.protocol.timestamps import timestamp


def refuse_past_ceiling(
    *,
    expiry: datetime.datetime,
    extension: datetime.timedelta,
    ceiling: datetime.datetime,
    start: str,
) -> None:
    """409 `max_ttl_ceiling` when `expiry` moved by `extension` would pass `ceiling` (the
    lease's start, named by `start`, plus its maxTtl)."""
    if expiry + extension <= ceiling:
        return
    room = int((ceiling - expiry).total_seconds())
    left = (
        f"at most {format_duration(datetime.timedelta(seconds=room))} more can be asked"
        if room > 0
        else "it already lasts that long"
    )
    raise HttpConflictError(
        f"the lease cannot live past {timestamp(ceiling)}, its maxTtl from {start}: {left}",
        reason="max_ttl_ceiling",
    )
