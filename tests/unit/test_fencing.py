"""The API's one retry of fenced writes that lost a race, and its one backoff."""

from __future__ import annotations

import pytest

from lessor.apiserver.http.errors import HttpConflictError
from lessor.apiserver.state.fencing import FenceConflictError, retry_on_conflict


def test_a_lost_race_is_tried_again_and_the_winner_returned() -> None:
    calls = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise FenceConflictError
        return "done"

    assert retry_on_conflict(attempt, doing="extending it") == "done"
    assert len(calls) == 3


def test_races_lost_every_time_end_in_a_retryable_409_saying_what_was_done() -> None:
    def attempt() -> None:
        raise FenceConflictError

    with pytest.raises(HttpConflictError) as raised:
        retry_on_conflict(attempt, doing="releasing it", attempts=2)
    assert raised.value.reason == "conflict_retryable"
    assert raised.value.detail == "the lease changed while releasing it; retry"


def test_a_409_of_another_reason_is_not_retried() -> None:
    calls = []

    def attempt() -> None:
        calls.append(1)
        raise HttpConflictError("only a Bound lease can be extended", reason="not_ready")

    with pytest.raises(HttpConflictError, match="Bound"):
        retry_on_conflict(attempt, doing="extending it")
    assert len(calls) == 1
