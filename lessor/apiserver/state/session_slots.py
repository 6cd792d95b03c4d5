"""How many attach and port-forward sessions one identity may hold open on one API replica.

A session holds a pod stream, a connection to kube-apiserver and two greenlets for as long as it
lasts (up to `--sandbox-stream-max-duration`), so without a ceiling one identity's sessions could
take every connection a replica's workers accept and starve everyone else's requests. Over the
ceiling a new session is refused with 429 `too_many_sessions`, without Retry-After: like the
concurrent-lease limit, it clears when the caller closes a session, not after a time.

Counted per replica, like the admission rate limit, so the ceiling does not depend on which
worker the kernel hands a connection to: one row per open session in an SQLite file of the
replica (lessor.apiserver.state.replica_db), each claim one `BEGIN IMMEDIATE` transaction. A row
names the worker process that holds it; a worker killed without closing its sessions (kill -9,
OOM) leaves rows whose process is gone, and the next claim deletes them, so a crash never leaks
a slot. Identities are stored as digests.

The waits of held requests are counted the same way, in a file of their own
(lessor.apiserver.state.held_requests): so this is replica state, below every feature.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from lessor.apiserver.state.replica_db import ReplicaDatabase

DEFAULT_PER_IDENTITY = 32


class SessionSlots:
    def __init__(
        self, per_identity: int, directory: Path | None = None, file: str = "sessions.sqlite3"
    ) -> None:
        if per_identity < 1:
            raise ValueError("the session ceiling must be at least 1")
        self.per_identity = per_identity
        self.database = ReplicaDatabase(
            file,
            "CREATE TABLE IF NOT EXISTS sessions (id INTEGER PRIMARY KEY,"
            " principal TEXT NOT NULL, pid INTEGER NOT NULL)",
            directory,
        )

    def claim(self, identity: str) -> int | None:
        """A slot for one more session of `identity`, or None at the ceiling."""
        key = hashlib.sha256(identity.encode()).hexdigest()
        db = self.database.connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            pids = [row[0] for row in db.execute("SELECT DISTINCT pid FROM sessions")]
            gone = [(pid,) for pid in pids if not _alive(pid)]
            db.executemany("DELETE FROM sessions WHERE pid = ?", gone)
            (held,) = db.execute(
                "SELECT COUNT(*) FROM sessions WHERE principal = ?", (key,)
            ).fetchone()
            slot = None
            if held < self.per_identity:
                inserted = db.execute(
                    "INSERT INTO sessions (principal, pid) VALUES (?, ?)", (key, os.getpid())
                )
                slot = inserted.lastrowid
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return slot

    def release(self, slot: int) -> None:
        self.database.connection().execute("DELETE FROM sessions WHERE id = ?", (slot,))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user: alive, and not ours to judge
        return True
    return True
