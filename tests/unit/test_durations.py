"""One duration syntax everywhere: what it accepts, refuses, and how it spells durations back."""

from __future__ import annotations

import datetime
import re

import pytest

from lessor.protocol.durations import PATTERN, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("1h", 3600), ("1h30m", 5400), ("2h0m5s", 7205), ("0s", 0)],
)
def test_accepted_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == datetime.timedelta(seconds=seconds)
    assert re.match(PATTERN, text), "the CRD pattern accepts what the parser accepts"


@pytest.mark.parametrize(
    "text", ["", "h", "1m1h", "-1s", "1.5h", "1d", "10", "1h 30m", " 1h", "99999999999999999999h"]
)
def test_refused_durations(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)
    if text != "99999999999999999999h":  # syntactically fine; only its size is refused
        assert not re.match(PATTERN, text), "the CRD pattern refuses what the parser refuses"


@pytest.mark.parametrize(
    ("seconds", "text"), [(5400, "1h30m"), (90, "1m30s"), (3600, "1h"), (0, "0s"), (3661, "1h1m1s")]
)
def test_canonical_spelling_round_trips(seconds: int, text: str) -> None:
    value = datetime.timedelta(seconds=seconds)
    assert format_duration(value) == text
    assert parse_duration(format_duration(value)) == value
