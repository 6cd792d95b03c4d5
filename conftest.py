"""What every pytest session of the project shares, tests/ and e2e/ alike."""

from __future__ import annotations

import signal


def pytest_configure() -> None:
    """Let the processes the tests start be interrupted. A shell without job control starts a
    background command (`make test &` in a CI script) with SIGINT ignored, every child inherits
    that, and Python installs its KeyboardInterrupt handler only where SIGINT was not ignored:
    a CLI the tests press Ctrl-C at would then never hear it. A handler here is reset to the
    default in each child at exec, where an ignored signal would stay ignored."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
