"""Bounds of the Sandbox API that its callers are promised: the server enforces them, its
OpenAPI document states them, and the CLI checks its flags against them before asking."""

from __future__ import annotations

import datetime

# Lines of a Sandbox's pod log one request returns (`tailLines`): the default and the most.
LOG_TAIL_DEFAULT = 100
LOG_TAIL_MAX = 5000
# Bytes of that tail at most, whatever the lines: past it the answer says `truncated`.
LOG_BYTES_MAX = 256 * 1024
# An execution's timeout when its request names none, and the longest it may name.
DEFAULT_TIMEOUT = datetime.timedelta(seconds=60)
MAX_TIMEOUT = datetime.timedelta(hours=1)
