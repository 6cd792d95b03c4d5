"""The forms of lease ids, a contract between the API server, which makes them, and the CLI,
which tells the two kinds apart and uses an id in file names (`~/.kube/lessor-<id>`). Light to
import, like lessor.protocol.stream_frames, as the CLI imports it.

Every lease id is a DNS label (a Kubernetes object name the server chose): a cluster lease's is
`l` and 12 hex digits, a Sandbox lease's `s` and 24. The CLI refuses any other id a server
sends, so that no server, malicious or intercepted, can make it write outside `~/.kube`. A lease
may be addressed by its alias where an id goes, so an alias never has an id's form."""

from __future__ import annotations

import re

LEASE_ID = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
CLUSTER_LEASE_ID = re.compile(r"^l[0-9a-f]{12}$")
SANDBOX_LEASE_ID = re.compile(r"^s[0-9a-f]{24}$")


def looks_like_an_id(name: str) -> bool:
    """Whether `name` has the form of a lease id of either kind: a path segment of that form is
    an id, any other an alias, so no alias may take this form."""
    return bool(CLUSTER_LEASE_ID.match(name) or SANDBOX_LEASE_ID.match(name))
