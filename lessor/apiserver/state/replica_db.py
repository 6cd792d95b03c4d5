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
    """One SQLite file of the replica, with a connection per thread (a greenlet under gevent):
    an sqlite3 connection must not be shared between threads. Autocommit, so callers open their
    own transactions."""

    def __init__(self, filename: str, schema: str, directory: Path | None = None) -> None:
        directory = directory or Path(os.environ.get(DIRECTORY_ENV) or replica_directory())
        self.path = directory / filename
        self.schema = schema
        self._local = threading.local()

    def connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "db", None)
        if connection is None:
            connection = sqlite3.connect(self.path, timeout=5, isolation_level=None)
            connection.execute(self.schema)
            self._local.db = connection
        return connection
