"""The forms of lease ids, a contract between the API server, which makes them, and the CLI,
which tells the two kinds apart and uses an id in file names (`~/.kube/lessor-<id>`). Light to
import, like lessor.protocol.stream_frames, as the CLI imports it.

Every lease id is a DNS label (a Kubernetes object name the server chose): a cluster lease's is
`l` and 12 hex digits, a Sandbox lease's `s` and 24. The CLI refuses any other id a server
sends, so that no server, malicious or intercepted, can make it write outside `~/.kube`."""

from __future__ import annotations

import re

LEASE_ID = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
SANDBOX_LEASE_ID = re.compile(r"^s[0-9a-f]{24}$")
