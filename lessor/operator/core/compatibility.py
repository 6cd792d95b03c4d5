"""Whether the installed agent-sandbox is one lessor can drive (lessor.agentsandbox.compat), as
one verdict for the whole process: the SandboxPool and SandboxLease controllers both gate on it,
and CRDs change so rarely that reading them on every reconcile would only load the API server.
"""

from __future__ import annotations

import logging
import time

from lessor.agentsandbox.compat import FINGERPRINTS, Compatibility, evaluate
from lessor.operator.runtime.client import ApiError, KubeClient, NotFoundError
from lessor.protocol.json_object import Json

log = logging.getLogger(__name__)

RECHECK_SECONDS = 60.0
RECHECK_FAILING_SECONDS = 10.0  # a fix (installing agent-sandbox) is noticed soon


class CompatibilityCache:
    """The compatibility verdict, read at most once a minute (CRDs rarely change)."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._verdict: Compatibility | None = None
        self._checked = 0.0

    async def verdict(self) -> Compatibility:
        if self._verdict is not None:
            wait = RECHECK_SECONDS if self._verdict.ok else RECHECK_FAILING_SECONDS
            if time.monotonic() - self._checked < wait:
                return self._verdict
        found: dict[str, Json | Exception | None] = {}
        for name in FINGERPRINTS:
            path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            try:
                found[name] = await self.client.get(path)
            except NotFoundError:
                found[name] = None
            except ApiError as error:
                found[name] = error
        verdict = evaluate(found)
        if self._verdict is None or verdict.problems != self._verdict.problems:
            log.log(logging.INFO if verdict.ok else logging.ERROR, "%s", verdict.reason)
        self._verdict, self._checked = verdict, time.monotonic()
        return verdict
