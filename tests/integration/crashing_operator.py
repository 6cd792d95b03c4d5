"""The real operator, SIGKILLed by itself at a chosen point of its progress: just before, or just
after, its Nth write to the Kubernetes API (a create, update, patch or delete) of a resource.

`python tests/integration/crashing_operator.py WHEN N RESOURCE RECORD -- <operator arguments>`
(RESOURCE: a plural such as clusterinstances, or "any")

A kill at a fixed wall-clock cadence lands wherever the operator happens to be, and on a slow
machine that is start-up, again and again, so the work never gets done. Counting writes puts
every kill where the operator was doing its work, on any machine. The fault itself is real
(SIGKILL: no cleanup, no flushing, requests in flight cut); only its place is chosen. Before
dying the process appends one JSON line to RECORD saying where it died, for the test's report.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from lessor.operator.main import main
from lessor.operator.runtime.client import KubeClient
from lessor.protocol.json_object import Json


def describe(method: str, path: str) -> str:
    """The write's method and resource, as `PATCH clusterleases/status`."""
    parts = path.strip("/").split("/")
    rest = parts[parts.index("namespaces") + 2 :] if "namespaces" in parts else parts[-2:]
    resource = rest[0] if rest else path
    subresource = f"/{rest[2]}" if len(rest) > 2 else ""
    return f"{method} {resource}{subresource}"


def crash_at(when: str, nth: int, resource: str, record: Path) -> None:
    original = KubeClient.request
    writes = 0

    def die(write: str, moment: str) -> None:
        with record.open("a") as out:
            out.write(json.dumps({"write": write, "when": moment, "nth": nth}) + "\n")
        os.kill(os.getpid(), signal.SIGKILL)

    async def request(self: KubeClient, method: str, path: str, **kwargs: Any) -> Json:
        nonlocal writes
        write = describe(method, path)
        # A review (SelfSubjectReview, SubjectAccessReview) is a POST that stores nothing.
        review = method == "POST" and path.rstrip("/").endswith("reviews")
        if method == "GET" or review or resource not in ("any", write.split()[1].split("/")[0]):
            return await original(self, method, path, **kwargs)
        writes += 1
        ordinal = writes  # its own: other writes run concurrently (workers) and count on
        if ordinal == nth and when == "before":
            die(write, "before")
        try:
            return await original(self, method, path, **kwargs)
        finally:  # after the answer, or after the error (a conflict is a write attempted)
            if ordinal == nth:
                die(write, "after")

    KubeClient.request = request  # type: ignore[method-assign]


if __name__ == "__main__":
    when, nth, resource, record, separator, *operator_args = sys.argv[1:]
    assert when in ("before", "after") and separator == "--", sys.argv
    crash_at(when, int(nth), resource, Path(record))
    sys.exit(main(operator_args))
