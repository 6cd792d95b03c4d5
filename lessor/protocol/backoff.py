"""How long to wait before trying again, for every component that retries (the operator's
watches, the API's fenced writes and policy relists): one rule, client-go's `wait.Backoff`."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """How long to wait before attempt `n + 1` (client-go's `wait.Backoff`): `first * factor**n`,
    at most `cap`, less a random part of up to `jitter` of it, so that the writers who lost one
    race do not meet again in the next."""

    first: float
    factor: float = 2.0
    cap: float = math.inf
    jitter: float = 1.0  # 0: exactly the delay; 1: anything from 0 to the delay

    def delay(self, attempt: int) -> float:
        # The exponent is bounded: a thread that retries for ever must not overflow a float.
        longest = min(self.first * self.factor ** min(attempt, 64), self.cap)
        return random.uniform(longest * (1 - self.jitter), longest)  # noqa: S311 - jitter
