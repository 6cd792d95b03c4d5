"""Per-principal admission rate limiting, per API replica: of Sandbox lease creation (spec 4.3),
of cluster lease creation and of SSH-signed requests, each with buckets of its own (`scope`).

A token bucket per principal: `burst` tokens, refilled at `rate` per second. An attempt that
finds a whole token spends it before any admission work; one that does not is refused with the
seconds until a token will be there (Retry-After) and spends nothing, so a client hammering a
throttled endpoint does not push its own recovery further away.

"Per replica" means per server, not per gunicorn worker: the buckets live in one SQLite file of
the replica (lessor.apiserver.state.replica_db), and each take is one `BEGIN IMMEDIATE` transaction,
so the workers of a replica share one bucket per principal exactly. Buckets are keyed by a
digest of the identity, never the identity itself.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from pathlib import Path

from lessor.apiserver.state.replica_db import ReplicaDatabase

DEFAULT_RATE = 0.5  # tokens per second: 30 creates a minute, sustained
DEFAULT_BURST = 10


@dataclass(frozen=True)
class Decision:
    allowed: bool
    retry_after: int = 0  # whole seconds, at least 1 when refused


class AdmissionLimiter:
    def __init__(
        self, rate: float, burst: int, directory: Path | None = None, *, scope: str = "sandbox"
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("the admission rate must be positive and the burst at least 1")
        self.rate = rate
        self.burst = burst
        # Limiters share the replica's table; each keeps its own buckets.
        self.scope = scope
        self.database = ReplicaDatabase(
            "buckets.sqlite3",
            "CREATE TABLE IF NOT EXISTS buckets"
            " (principal TEXT PRIMARY KEY, tokens REAL NOT NULL, at REAL NOT NULL)",
            directory,
        )

    def take(self, identity: str, now: float | None = None) -> Decision:
        """Spend one token of `identity`'s bucket if a whole one is there."""
        key = hashlib.sha256(f"{self.scope}\0{identity}".encode()).hexdigest()
        now = time.time() if now is None else now
        db = self.database.connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute(
                "SELECT tokens, at FROM buckets WHERE principal = ?", (key,)
            ).fetchone()
            tokens = float(self.burst) if row is None else row[0]
            if row is not None:
                tokens = min(float(self.burst), tokens + max(0.0, now - row[1]) * self.rate)
            if tokens >= 1.0:
                db.execute(
                    "INSERT OR REPLACE INTO buckets (principal, tokens, at) VALUES (?, ?, ?)",
                    (key, tokens - 1.0, now),
                )
                db.execute("COMMIT")
                return Decision(True)
            db.execute("ROLLBACK")  # refused: nothing spent, the refill keeps counting from `at`
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return Decision(False, max(1, math.ceil((1.0 - tokens) / self.rate)))
