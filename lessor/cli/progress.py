"""How a command that waits shows it is waiting, on stderr (stdout is only the result).

On a terminal (stdout and stderr both), one status line rewritten in place with a spinner and
the time elapsed. A ticker thread redraws it every TICK seconds from the first update() until
clear(), so the line keeps moving while a request is in flight (a long poll is held up to 20 s
by the server) rather than only when an answer comes back. clear() stops the ticker, waits for
it, and only then erases the line, so nothing is drawn after it returns; main() clears every
line still drawn before it prints an error (clear_all()).

The line is erased with an escape code (`ESC[2K`) only where lessor.cli.output.ansi() allows
one; with NO_COLOR it is overwritten with spaces instead. A terminal that says it is dumb
(TERM=dumb: it may not even honour a carriage return) gets what a log gets.

Anywhere else (a CI log, `2> file`) plain lines: one each time the status changes, and the same
again after HEARTBEAT seconds without a change, so that a log shows a wait is alive (and a CI
system that ends a job silent for ten minutes does not end a long queue), without a line per
poll. No thread then.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from lessor.cli.output import ansi

_SPINNER = "|/-\\"
HEARTBEAT = 30.0
TICK = 0.1

# The lines drawn now, for clear_all(): a command that fails mid-wait leaves its line drawn.
_drawn: set[Progress] = set()


class Progress:
    def __init__(self) -> None:
        self.terminal = (
            sys.stdout.isatty() and sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
        )
        self.escapes = self.terminal and ansi(sys.stderr)
        self.started = time.monotonic()
        self._ticks = 0
        self._text = ""
        self._width = 0  # of the line drawn, to blank it without an escape code
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._said: tuple[str, float] | None = None  # the last plain line, and when

    def update(self, text: str) -> None:
        now = time.monotonic()
        if not self.terminal:
            if self._said is None or self._said[0] != text or now - self._said[1] >= HEARTBEAT:
                sys.stderr.write(f"lessor: {text} ({now - self.started:.0f}s)\n")
                sys.stderr.flush()
                self._said = (text, now)
            return
        with self._lock:
            self._text = text
            self._draw()
        if self._ticker is None:
            self._stop.clear()
            _drawn.add(self)  # drawn already: clear_all() must find it whatever comes next
            self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(TICK):
            with self._lock:
                if not self._stop.is_set():
                    self._draw()

    def _draw(self) -> None:
        """The line again, the spinner one step on; called with the lock held."""
        spinner = _SPINNER[self._ticks % len(_SPINNER)]
        self._ticks += 1
        line = f"{spinner} {self._text} ({time.monotonic() - self.started:.1f}s)"
        try:
            if self.escapes:
                sys.stderr.write(f"\r\x1b[2K{line}")
            else:
                sys.stderr.write(f"\r{line.ljust(self._width)}")
            sys.stderr.flush()
        except (OSError, ValueError):  # the terminal went away: the command will find out
            return
        self._width = max(self._width, len(line))

    def clear(self) -> None:
        ticker, self._ticker = self._ticker, None
        if ticker is None:
            return
        self._stop.set()
        # A Ctrl-C can land between the ticker's creation and its start: never started, it
        # has nothing to wait for (join() would raise instead of the command exiting 130).
        if ticker is not threading.current_thread() and ticker.ident is not None:
            ticker.join()
        _drawn.discard(self)
        with self._lock:
            try:
                if self.escapes:
                    sys.stderr.write("\r\x1b[2K")
                else:
                    sys.stderr.write("\r" + " " * self._width + "\r")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            self._width = 0


def clear_all() -> None:
    """Stop and erase every progress line still drawn: before an error is printed, and before
    the process ends."""
    for shown in list(_drawn):
        shown.clear()
