"""Versions of objects this process has replaced that its cache still shows.

The companion of ClaimsInFlight, for a reconciler's writes to its own objects. A lease's status
write returns at once, but the lease cache learns of it one watch event later; a reconcile of
the same lease in that moment (enqueued by the instance its bind just claimed) read the version
the write replaced, redid the bind (a read and a create of the kubeconfig copy) and lost its
status write with a 409: about one conflict and three wasted kube-apiserver requests per lease
(bench/results/2026-11-26.json, `reconcile_conflicts`). A reconcile that finds the cache still
at a version this process replaced skips instead: the watch event of the write enqueues the key
again (every change of the cache does, a relist included), and then the cache shows it.

Only the leader writes, and its reconciles share one event loop, so no lock is needed.
"""

from __future__ import annotations

import time

from lessor.operator.runtime.store import version_of
from lessor.protocol.json_object import Json

# A replaced version the cache still shows after this long is no longer trusted to be on its
# way (the write's event lost to a relist that skipped it): the reconcile then goes ahead and
# loses at most one fenced write.
FORGET_AFTER = 30.0


class WritesInFlight:
    def __init__(self) -> None:
        # key: every version this process replaced since the cache last caught up, and when
        self._replaced: dict[str, tuple[set[tuple[str, str]], float]] = {}

    def wrote(self, key: str, before: Json, after: Json) -> None:
        """`before`: the object the write was computed from; `after`: as the write returned it.
        One reconcile may write an object several times, and the cache may show each version
        in turn: all of them are replaced."""
        version = version_of(before)
        if version is None or version == version_of(after):
            return
        replaced, _ = self._replaced.get(key, (set(), 0.0))
        self._replaced[key] = (replaced | {version}, time.monotonic())

    def stale(self, key: str, cached: Json | None) -> bool:
        """Whether `cached` is a version this process has already replaced. Forgets the key
        once the cache shows any other version, so a write is remembered until its event."""
        found = self._replaced.get(key)
        if found is None:
            return False
        replaced, since = found
        if (
            cached is not None
            and version_of(cached) in replaced
            and time.monotonic() - since < FORGET_AFTER
        ):
            return True
        del self._replaced[key]
        return False
