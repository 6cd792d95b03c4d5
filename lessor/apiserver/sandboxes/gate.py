"""Whether this replica serves the Sandbox API (`agentSandbox.mode`).

`disabled` (the default): no Sandbox route exists, so every /v1/sandbox-leases path is a 404.
`external`: the routes exist only while the read-only compatibility check of the installed
agent-sandbox (lessor.agentsandbox.compat) passes (spec 1); otherwise they answer 404 with the
reason as detail, which /v1/status shows too. The check runs when a worker starts
and again at most once a minute, so installing or fixing agent-sandbox needs no restart; a
change of verdict is logged once.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from lessor.agentsandbox.compat import Compatibility, check
from lessor.apiserver.state.kube import Kube
from lessor.protocol.responses import StatusSandbox

log = logging.getLogger(__name__)
RECHECK_SECONDS = 60.0


@dataclass(frozen=True)
class Verdict:
    served: bool
    reason: str


class SandboxGate:
    def __init__(self, mode: str, kube: Kube | None) -> None:
        self.mode = mode
        self.kube = kube
        self._lock = threading.Lock()
        self._verdict: Verdict | None = None
        self._checked = 0.0

    def verdict(self) -> Verdict:
        if self.mode != "external" or self.kube is None:
            return Verdict(False, "agentSandbox.mode is disabled")
        now = time.monotonic()
        with self._lock:
            if self._verdict is not None and now - self._checked < RECHECK_SECONDS:
                return self._verdict
            self._checked = now
        compatibility: Compatibility = check(self.kube.crd)
        verdict = Verdict(compatibility.ok, compatibility.reason)
        with self._lock:
            if verdict != self._verdict:
                level = logging.INFO if verdict.served else logging.ERROR
                log.log(level, "Sandbox API %s: %s",
                        "served" if verdict.served else "not served", verdict.reason)  # fmt: skip
            self._verdict = verdict
        return verdict

    def status(self) -> StatusSandbox:
        """The Sandbox API as /v1/status shows it: the check's verdict in external mode."""
        if self.mode != "external":
            return StatusSandbox(mode="disabled", served=False)
        verdict = self.verdict()
        return StatusSandbox(mode="external", served=verdict.served, reason=verdict.reason)
