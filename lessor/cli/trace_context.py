"""The W3C trace context the CLI sends with its requests (`traceparent`), so that the API
server's spans of one command share a trace, and `lessor -v` prints its id to find it.

One trace per command: every request of `lessor lease` (the create, the polls, the kubeconfig)
carries the same trace id and the same parent, the command itself. A CI job that traces its
steps hands its context down in TRACEPARENT (the environment variable OpenTelemetry's
propagators read for processes); lessor's requests then join the job's trace.

Written here rather than with OpenTelemetry's SDK: the CLI installs without the server stack,
exports no span of its own, and a traceparent is one format string.
"""

from __future__ import annotations

import os
import re
import secrets

TRACEPARENT_ENV = "TRACEPARENT"
_FORMAT = re.compile(r"^00-(?!0{32})([0-9a-f]{32})-(?!0{16})([0-9a-f]{16})-([0-9a-f]{2})$")


class TraceContext:
    def __init__(self) -> None:
        inherited = _FORMAT.match(os.environ.get(TRACEPARENT_ENV, "").strip())
        if inherited is not None:
            self.trace_id, self._parent, self._flags = inherited.groups()
        else:  # the command is the root; sampled, so the server's default sampler keeps it
            self.trace_id, self._parent, self._flags = (
                secrets.token_hex(16),
                secrets.token_hex(8),
                "01",
            )

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self._parent}-{self._flags}"
