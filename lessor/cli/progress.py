"""One status line, rewritten in place while a command waits, on terminals only.

It is drawn on stderr, and only when both stdout and stderr are terminals: piped or redirected
output (a CI log, `| jq`) gets nothing but the final result.
"""

from __future__ import annotations

import sys
import time

_SPINNER = "|/-\\"


class Progress:
    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stdout.isatty() and sys.stderr.isatty() if enabled is None else enabled
        self.started = time.monotonic()
        self._ticks = 0
        self._drawn = False

    def update(self, text: str) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.started
        spinner = _SPINNER[self._ticks % len(_SPINNER)]
        self._ticks += 1
        sys.stderr.write(f"\r\x1b[2K{spinner} {text} ({elapsed:.1f}s)")
        sys.stderr.flush()
        self._drawn = True

    def clear(self) -> None:
        if self._drawn:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()
            self._drawn = False
