"""Turns at capturing: at most TOTAL captures at once in the operator, and at most PER_OWNER of
one lease owner's.

The total bounds the memory and connections captures hold. The share per owner keeps one tenant
whose clusters answer slowly (or who ends many leases at once) from taking every turn: its
captures queue behind each other, not in front of other owners', who find a turn free. A wait
still counts against the waiting capture's own deadline (teardown is never held longer than
`captureTimeout`), so an owner's own captures are what its waits are spent on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator

TOTAL = 4
PER_OWNER = 2


class Turns:
    def __init__(self, total: int = TOTAL, per_owner: int = PER_OWNER) -> None:
        self.per_owner = per_owner
        self._total = asyncio.Semaphore(total)
        self._owners: dict[str, asyncio.Semaphore] = {}
        self._users: Counter[str] = Counter()  # running or waiting, per owner

    @contextlib.asynccontextmanager
    async def turn(self, owner: str) -> AsyncIterator[None]:
        """A turn for one of `owner`'s captures: first among its own, then among all."""
        share = self._owners.setdefault(owner, asyncio.Semaphore(self.per_owner))
        self._users[owner] += 1
        try:
            async with share, self._total:
                yield
        finally:
            self._users[owner] -= 1
            if not self._users[owner]:  # forgotten with its last capture
                del self._users[owner], self._owners[owner]
