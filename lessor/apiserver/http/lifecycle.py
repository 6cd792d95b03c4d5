"""Whether this gunicorn worker is stopping.

On SIGTERM gunicorn clears the worker's `alive` flag and lets requests finish within the
graceful timeout; the master then kills what is left without a word to the client. A WebSocket
session never finishes by itself, so sessions watch this flag and close at once with 1001
(lessor.apiserver.sandboxes.stream_bridge), telling the client to reconnect to another replica.
"""

from __future__ import annotations

from typing import Any

_worker: list[Any] = []


def watch(worker: Any) -> None:
    """gunicorn's `post_worker_init` hook: remember this process's worker."""
    _worker[:] = [worker]


def stopping() -> bool:
    return bool(_worker) and not _worker[0].alive
