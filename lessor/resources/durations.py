"""Durations as people write them in policies and on the command line: "90s", "30m", "1h30m".

One parser serves the CRDs, the API and the CLI, so a duration that one part accepts every other
part accepts too. The pattern is written for RE2 as well (no look-ahead), because the API server
enforces the same pattern from the CRD schema.
"""

from __future__ import annotations

import datetime
import re
from typing import Annotated

from pydantic import AfterValidator, Field

PATTERN = r"^(([0-9]+h)([0-9]+m)?([0-9]+s)?|([0-9]+m)([0-9]+s)?|([0-9]+s))$"
_PARTS = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
EXAMPLES = '"90s", "30m", "1h", "1h30m"'


def parse_duration(text: str) -> datetime.timedelta:
    """Parse hours, minutes and seconds components, in that order, each optional but not all."""
    match = _PARTS.match(text) if text else None
    if match is None or not any(match.groups()):
        raise ValueError(f"invalid duration {text!r}: use hours, minutes, seconds like {EXAMPLES}")
    hours, minutes, seconds = (int(part or 0) for part in match.groups())
    try:
        return datetime.timedelta(hours=hours, minutes=minutes, seconds=seconds)
    except OverflowError as error:
        raise ValueError(f"invalid duration {text!r}: too long") from error


def format_duration(value: datetime.timedelta) -> str:
    """The canonical spelling: 5400 s is "1h30m", 90 s is "1m30s", zero is "0s"."""
    total = int(value.total_seconds())
    if total < 0:
        raise ValueError("durations are never negative")
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    text += f"{seconds}s" if seconds or not text else ""
    return text


def _valid(text: str) -> str:
    parse_duration(text)
    return text


def _positive(text: str) -> str:
    if parse_duration(text) <= datetime.timedelta(0):
        raise ValueError(f"duration {text!r} must be longer than zero")
    return text


# The pattern goes into JSON Schema (and so the CRDs) only; validation in Python is the parser's,
# whose message says what a duration looks like instead of quoting a regular expression.
_SCHEMA = Field(json_schema_extra={"pattern": PATTERN})
Duration = Annotated[str, _SCHEMA, AfterValidator(_valid)]
PositiveDuration = Annotated[str, _SCHEMA, AfterValidator(_positive)]
