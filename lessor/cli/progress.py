"""How a command that waits shows it is waiting, on stderr (stdout is only the result).

On a terminal (stdout and stderr both), one status line rewritten in place with a spinner.
Anywhere else (a CI log, `2> file`) plain lines: one each time the status changes, and the same
again after HEARTBEAT seconds without a change, so that a log shows a wait is alive (and a CI
system that ends a job silent for ten minutes does not end a long queue), without a line per
poll.
"""

from __future__ import annotations

import sys
import time

_SPINNER = "|/-\\"
HEARTBEAT = 30.0


class Progress:
    def __init__(self) -> None:
        self.terminal = sys.stdout.isatty() and sys.stderr.isatty()
        self.started = time.monotonic()
        self._ticks = 0
        self._drawn = False
        self._said: tuple[str, float] | None = None  # the last plain line, and when

    def update(self, text: str) -> None:
        now = time.monotonic()
        elapsed = now - self.started
        if not self.terminal:
            if self._said is None or self._said[0] != text or now - self._said[1] >= HEARTBEAT:
                sys.stderr.write(f"lessor: {text} ({elapsed:.0f}s)\n")
                sys.stderr.flush()
                self._said = (text, now)
            return
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
