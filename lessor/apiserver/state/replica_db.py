"""State the gunicorn workers of one API replica share, and nothing else does: SQLite files in a
directory the server creates before it forks (`LESSOR_REPLICA_DIR`, set by
lessor.apiserver.server). The admission rate limit and the ceiling of open sessions are "per
replica" in this sense, whichever worker the kernel hands a request to.

SQLite because the workers are processes: one file with `BEGIN IMMEDIATE` transactions gives
them exact shared counts without a server of its own. Run without that directory (the app
in-process in tests), each file is private to the process.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import threading
from pathlib import Path

DIRECTORY_ENV = "LESSOR_REPLICA_DIR"


def replica_directory() -> str:
    """A fresh directory for a server's replica state (before it forks its workers)."""
    return tempfile.mkdtemp(prefix="lessor-replica-")


class ReplicaDatabase:
    """One SQLite file of the replica, with a connection per OS thread of the process (an
    sqlite3 connection must not cross threads). Not per greenlet: under gevent every request is
    a greenlet of one OS thread, and a connection per request (opened, its schema checked) cost
    a quarter of a lease create's CPU (issue 19's profile). Greenlets may share one: sqlite3
    never yields to the gevent hub, so a transaction runs whole between two switches.
    Autocommit, so callers open their own transactions."""

    def __init__(self, filename: str, schema: str, directory: Path | None = None) -> None:
        directory = directory or Path(os.environ.get(DIRECTORY_ENV) or replica_directory())
        self.path = directory / filename
        self.schema = schema
        self._connections: dict[tuple[int, int], sqlite3.Connection] = {}
        self._lock = threading.Lock()

    def connection(self) -> sqlite3.Connection:
        key = (os.getpid(), threading.get_native_id())  # a forked worker opens its own
        connection = self._connections.get(key)
        if connection is None:
            with self._lock:
                connection = sqlite3.connect(
                    self.path, timeout=5, isolation_level=None, check_same_thread=False
                )
                # Never synced to disk: this state lives as long as the replica (buckets,
                # session slots) and a crash loses nothing that matters, while a sync on every
                # commit blocked the worker's every request with it (a lease create spent a
                # quarter of its time in COMMIT: issue 19's profile).
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute("PRAGMA synchronous=OFF")
                connection.execute(self.schema)
                self._connections[key] = connection
        return connection
