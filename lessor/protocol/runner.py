"""Bounds of lessor-runner's answers that the API promises its callers. The runner is a
standard-library script an image may carry as one file (lessor/runner/runner.py), so it declares
its own copies; tests/unit/test_runner_protocol.py holds the two equal."""

from __future__ import annotations

OUTPUT_CAP = 1024 * 1024
"""Bytes of each of stdout and stderr an execution keeps; the rest is dropped, `truncated` set."""
LOG_WINDOW = 64 * 1024
"""The largest window of output one logs request returns."""
