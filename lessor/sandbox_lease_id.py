"""The form of a Sandbox lease id, a contract between the API server, which makes them
(lessor.apiserver.sandbox_leases), and the CLI, which tells them from cluster lease ids: `s`
and 24 hex digits. Light to import, like lessor.stream_frames, as the CLI imports it."""

from __future__ import annotations

import re

SANDBOX_LEASE_ID = re.compile(r"^s[0-9a-f]{24}$")
